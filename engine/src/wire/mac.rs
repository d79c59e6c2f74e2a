//! Ethernet addresses: as bytes, as one integer, as text.

use core::fmt;

/// A 48-bit Ethernet address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);

    /// The address as one integer (little-endian, the top two bytes zero): equal exactly
    /// when the addresses are, and compared in one instruction where one side is kept so.
    #[inline(always)]
    pub fn word(self) -> u64 {
        let [a, b, c, d, e, f] = self.0;
        u64::from_le_bytes([a, b, c, d, e, f, 0, 0])
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl core::str::FromStr for MacAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for b in out.iter_mut() {
            let p = parts
                .next()
                .ok_or_else(|| format!("MAC address `{s}`: too few octets"))?;
            if p.len() != 2 {
                return Err(format!(
                    "MAC address `{s}`: octet `{p}` is not two hex digits"
                ));
            }
            *b = u8::from_str_radix(p, 16)
                .map_err(|_| format!("MAC address `{s}`: bad octet `{p}`"))?;
        }
        if parts.next().is_some() {
            return Err(format!("MAC address `{s}`: too many octets"));
        }
        Ok(MacAddr(out))
    }
}
