//! Endpoint addresses: what travels through Open MPI's modex as text.

use crate::wire::MacAddr;
use core::fmt;
use core::str::FromStr;

/// A node's MAC plus an endpoint id on that node, written `02:00:00:00:00:01/3`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct EndpointAddr {
    pub mac: MacAddr,
    pub ep: u16,
}

impl EndpointAddr {
    pub fn new(mac: MacAddr, ep: u16) -> Self {
        EndpointAddr { mac, ep }
    }
}

impl fmt::Display for EndpointAddr {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}/{}", self.mac, self.ep)
    }
}

/// The modex text of an endpoint whose agent runs `--wire udp`: `udp:10.1.0.5:7470/3` (the
/// node's name for the engine is its IPv4 address and UDP port, see [`crate::net::node_id`]).
pub fn udp_text(a: EndpointAddr) -> String {
    let (ip, port) = crate::net::node_addr(a.mac);
    format!("udp:{ip}:{port}/{}", a.ep)
}

/// The encapsulation an address text names: `"udp"` or `"ether"`.
pub fn text_wire(s: &str) -> &'static str {
    if s.starts_with("udp:") {
        "udp"
    } else {
        "ether"
    }
}

impl FromStr for EndpointAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(rest) = s.strip_prefix("udp:") {
            let bad = || {
                format!(
                    "endpoint address `{s}`: expected udp:IPV4:PORT/ID, e.g. udp:10.1.0.5:7470/3"
                )
            };
            let (node, ep) = rest.split_once('/').ok_or_else(bad)?;
            let (ip, port) = node.split_once(':').ok_or_else(bad)?;
            let ip: std::net::Ipv4Addr = ip.parse().map_err(|_| bad())?;
            let port: u16 = port.parse().map_err(|_| bad())?;
            let ep = ep.parse().map_err(|_| bad())?;
            return Ok(EndpointAddr::new(crate::net::node_id(ip, port), ep));
        }
        let (mac, ep) = s.split_once('/').ok_or_else(|| {
            format!("endpoint address `{s}`: expected MAC/ID, e.g. 02:00:00:00:00:01/3")
        })?;
        let ep = ep
            .parse()
            .map_err(|_| format!("endpoint address `{s}`: bad endpoint id `{ep}`"))?;
        Ok(EndpointAddr {
            mac: mac.parse()?,
            ep,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn text_round_trip() {
        let a = EndpointAddr::new(MacAddr([2, 0, 0, 0xab, 0, 1]), 65535);
        let s = a.to_string();
        assert_eq!(s, "02:00:00:ab:00:01/65535");
        assert_eq!(s.parse::<EndpointAddr>().unwrap(), a);
        assert!("02:00:00:ab:00:01".parse::<EndpointAddr>().is_err());
        assert!("02:00:00:ab:00:01/70000".parse::<EndpointAddr>().is_err());
        assert_eq!(text_wire(&s), "ether");
    }

    #[test]
    fn udp_text_round_trip() {
        let a = EndpointAddr::new(crate::net::node_id([10, 71, 2, 1].into(), 7470), 12);
        let s = udp_text(a);
        assert_eq!(s, "udp:10.71.2.1:7470/12");
        assert_eq!(s.parse::<EndpointAddr>().unwrap(), a);
        assert_eq!(text_wire(&s), "udp");
        for bad in [
            "udp:10.71.2.1/3",
            "udp:10.71.2:7470/3",
            "udp:10.71.2.1:70000/3",
            "udp:10.71.2.1:7470/x",
        ] {
            assert!(bad.parse::<EndpointAddr>().is_err(), "{bad}");
        }
    }
}
