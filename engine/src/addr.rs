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

/// Where a send goes: an endpoint, and the incarnation of its node the sender knows it by
/// (the session of the node's engine its published address named, see [`incarnation_of`];
/// 0: not known, any). With it the engine tells a node that restarted since this side last
/// heard from it (the address is newer than the session held: that session is void) from an
/// address that outlived its node's engine (older: the send fails rather than reach the new
/// incarnation's endpoint of the same id, once the node has answered that it still runs
/// the session's start: a node restarted after its clock was stepped back has an earlier
/// incarnation too). See `Engine::check_incarnation` and `Engine::isend_to`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Dest {
    pub addr: EndpointAddr,
    pub incarnation: u32,
}

impl From<EndpointAddr> for Dest {
    fn from(addr: EndpointAddr) -> Dest {
        Dest {
            addr,
            incarnation: 0,
        }
    }
}

impl fmt::Display for Dest {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}", self.addr)?;
        if self.incarnation != 0 {
            write!(f, "@{:08x}", self.incarnation)?;
        }
        Ok(())
    }
}

/// Parses a published address, `02:00:00:00:00:01/3@6a3f09c1` or `udp:10.1.0.5:7470/3@...`:
/// the endpoint, then, after `@`, the incarnation of its node in hex (absent: 0, any).
impl FromStr for Dest {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, inc) = match s.rsplit_once('@') {
            Some((a, i)) => {
                let inc = u32::from_str_radix(i, 16)
                    .ok()
                    .filter(|&v| v != 0 && i.len() <= 8)
                    .ok_or_else(|| {
                        format!("endpoint address `{s}`: bad incarnation `{i}` (8 hex digits)")
                    })?;
                (a, inc)
            }
            None => (s, 0),
        };
        Ok(Dest {
            addr: addr.parse()?,
            incarnation: inc,
        })
    }
}

/// The incarnation of a node's engine started at `since_epoch` (wall-clock time since the
/// Unix epoch): its session, in units of 4 ms, so that a later start of the same node has a
/// later incarnation (an engine takes far longer than 4 ms to start). Compared by
/// [`newer`], modulo 2^32 (198 days), so correct for incarnations less than 99 days apart.
/// Never 0 (0 is "not known" on the wire and in addresses).
pub fn incarnation_of(since_epoch: core::time::Duration) -> u32 {
    ((since_epoch.as_millis() / 4) as u32).max(1)
}

/// Whether incarnation `a` started after `b` (serial-number order, see [`incarnation_of`]).
#[inline]
pub fn newer(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
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

/// An endpoint's text, with or without its node's incarnation (`@...`, which is dropped).
impl FromStr for EndpointAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.rsplit_once('@').map_or(s, |(a, _)| a);
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
    fn incarnation_text_and_order() {
        let a = EndpointAddr::new(MacAddr([2, 0, 0, 0xab, 0, 1]), 7);
        let d = Dest {
            addr: a,
            incarnation: 0x6a3f_09c1,
        };
        let s = d.to_string();
        assert_eq!(s, "02:00:00:ab:00:01/7@6a3f09c1");
        assert_eq!(s.parse::<Dest>().unwrap(), d);
        assert_eq!(s.parse::<EndpointAddr>().unwrap(), a);
        assert_eq!(
            "02:00:00:ab:00:01/7".parse::<Dest>().unwrap(),
            Dest::from(a)
        );
        let u = Dest {
            addr: EndpointAddr::new(crate::net::node_id([10, 0, 0, 2].into(), 7470), 3),
            incarnation: 5,
        };
        let t = format!("{}@{:08x}", udp_text(u.addr), u.incarnation);
        assert_eq!(t.parse::<Dest>().unwrap(), u);
        for bad in [
            "02:00:00:ab:00:01/7@",
            "02:00:00:ab:00:01/7@0",
            "02:00:00:ab:00:01/7@xyz",
            "02:00:00:ab:00:01/7@123456789",
        ] {
            assert!(bad.parse::<Dest>().is_err(), "{bad}");
        }
        // Later starts are newer, across the wrap too; 0 is never an incarnation.
        let t0 = core::time::Duration::from_secs(1_795_000_000);
        let (i0, i1) = (
            incarnation_of(t0),
            incarnation_of(t0 + core::time::Duration::from_millis(200)),
        );
        assert!(newer(i1, i0) && !newer(i0, i1) && !newer(i0, i0));
        assert!(newer(3, u32::MAX - 2));
        assert_eq!(incarnation_of(core::time::Duration::ZERO), 1);
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
