//! The UDP/IPv4 wire's parsing is total: any bytes give a header or an error, never a panic,
//! and the encapsulation handles any received frame without panicking.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::net::Ipv4Addr;
use tigon_engine::MacAddr;
use tigon_engine::net::arp::ArpRepr;
use tigon_engine::net::encap::{UdpConfig, UdpEncap};
use tigon_engine::net::eth::EthRepr;
use tigon_engine::net::icmp::IcmpRepr;
use tigon_engine::net::ipv4::Ipv4Repr;
use tigon_engine::net::udp::UdpRepr;

fuzz_target!(|data: &[u8]| {
    let _ = EthRepr::parse(data);
    let _ = ArpRepr::parse(data);
    let _ = UdpRepr::parse(data);
    let _ = IcmpRepr::parse(data);
    if let Ok(ip) = Ipv4Repr::parse(data) {
        let mut b = vec![0u8; 20 + ip.payload_len];
        let again = Ipv4Repr { header_len: 20, ..ip };
        again.emit(&mut b);
        assert_eq!(Ipv4Repr::parse(&b).expect("re-parse"), again);
    }
    let mut e = UdpEncap::new(UdpConfig::new(Ipv4Addr::new(10, 0, 0, 1), 24, MacAddr([2, 0, 0, 0, 0, 1])));
    let mut f = data.to_vec();
    let _ = e.decap(&mut f, 0);
    let mut f = data.to_vec();
    let _ = e.encap(&mut f, 0);
});
