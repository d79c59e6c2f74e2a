//! The UDP/IPv4 wire's parsing is total: any bytes give a header or an error, never a panic,
//! and what parses re-emits to the same header. Then the input is read as records (op byte,
//! u16 length, frame) fed to one encapsulation in turn, with time passing, as the agent's
//! link does: received frames decapsulated (ARP learned and answered, ping answered, tigon
//! datagrams unwrapped, the rest refused or ignored) and engine frames encapsulated (next hop
//! resolved, ARP asked, off-subnet through the gateway); what comes out lies within the
//! frame and, for a tigon datagram, is the engine's Ethernet-shaped frame.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tigon_engine::net::arp::ArpRepr;
use tigon_engine::net::encap::{HEADROOM, Rx, Tx, UdpEncap};
use tigon_engine::net::eth::EthRepr;
use tigon_engine::net::icmp::IcmpRepr;
use tigon_engine::net::ipv4::Ipv4Repr;
use tigon_engine::net::udp::UdpRepr;
use tigon_engine::wire::{ETHERTYPE, MIN_FRAME};
use tigon_engine_fuzz::{Input, seeds};

fuzz_target!(|data: &[u8]| {
    if let Ok(e) = EthRepr::parse(data) {
        let mut b = [0u8; 14];
        e.emit(&mut b);
        assert_eq!(EthRepr::parse(&b), Ok(e));
    }
    if let Ok(a) = ArpRepr::parse(data) {
        let mut b = [0u8; 28];
        a.emit(&mut b);
        assert_eq!(ArpRepr::parse(&b), Ok(a));
    }
    if let Ok(u) = UdpRepr::parse(data) {
        let mut b = vec![0u8; 8 + u.payload_len];
        u.emit(&mut b);
        assert_eq!(
            UdpRepr::parse(&b).map(|v| (v.src_port, v.dst_port, v.payload_len)),
            Ok((u.src_port, u.dst_port, u.payload_len))
        );
    }
    if let Ok(i) = IcmpRepr::parse(data) {
        let mut b = data.to_vec();
        i.emit(&mut b);
        assert_eq!(IcmpRepr::parse(&b), Ok(i));
    }
    if let Ok(ip) = Ipv4Repr::parse(data) {
        let mut b = vec![0u8; 20 + ip.payload_len];
        let again = Ipv4Repr {
            header_len: 20,
            ..ip
        };
        again.emit(&mut b);
        assert_eq!(Ipv4Repr::parse(&b).expect("re-parse"), again);
    }

    let mut e = UdpEncap::new(seeds::net_config());
    let mut now = 0u64;
    let mut input = Input::new(data);
    while let (Some(op), Some(len)) = (input.u8(), input.u16()) {
        let frame = input.bytes(usize::from(len % 4096));
        // Up to 3 s per record: neighbour timeouts (30 s) and ARP retries (200 ms) come round.
        now += u64::from(op >> 2) * 50_000_000;
        match op & 3 {
            0 | 1 => {
                let mut f = frame.to_vec();
                match e.decap(&mut f, now) {
                    Rx::Tigon(r) => {
                        assert!(r.start <= r.end && r.end <= f.len(), "{r:?} of {}", f.len());
                        let t = &f[r];
                        assert_eq!(&t[..6], &e.node_id().0[..]);
                        assert_eq!(u16::from_be_bytes([t[12], t[13]]), ETHERTYPE);
                    }
                    Rx::Reply(n) => assert!(n <= f.len() && n >= 42, "reply of {n} in {}", f.len()),
                    Rx::Done | Rx::Bad => {}
                }
            }
            2 => {
                // An engine frame behind the headroom, as the link hands it over.
                let mut f = vec![0u8; HEADROOM];
                f.extend_from_slice(frame);
                if let Tx::Send = e.encap(&mut f, now) {
                    let ip = Ipv4Repr::parse(&f[14..]).expect("encapsulated IPv4 parses");
                    assert_eq!(ip.src, seeds::NET_IP);
                    assert!(UdpRepr::parse(&f[34..]).is_ok());
                }
            }
            _ => {
                // A frame whose payload follows in other buffers, and an ARP request for the
                // address the frame's first bytes name.
                let mut f = vec![0u8; HEADROOM];
                f.extend_from_slice(frame);
                let _ = e.encap_chained(&mut f, usize::from(len), now);
                if let Some(a) = frame.first_chunk::<4>() {
                    let mut b = [0u8; MIN_FRAME];
                    assert_eq!(e.arp_request((*a).into(), &mut b), MIN_FRAME);
                    assert!(ArpRepr::parse(&b[14..]).is_ok());
                }
            }
        }
    }
});
