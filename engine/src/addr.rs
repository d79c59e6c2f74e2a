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

impl FromStr for EndpointAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
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
    }
}
