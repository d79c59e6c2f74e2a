//! What the fuzz targets share: the two-engine harness of `engine_rx` ([`duet`]), the reading
//! of a fuzz input as a sequence of small fields ([`Input`]), and the seed inputs
//! `scripts/fuzz.sh` starts each target's corpus from ([`seeds`]), built by the engine's own
//! emit functions and engines so the fuzzer starts past the first checks.

pub mod duet;
pub mod seeds;

/// A fuzz input read front to back as bytes and little-endian integers; past its end every
/// read gives `None`, so a target stops at the first field that is not there.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    pub fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.data.split_first()?;
        self.data = rest;
        Some(b)
    }

    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes([self.u8()?, self.u8()?]))
    }

    /// The next `n` bytes, or as many as are left.
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (b, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        b
    }
}

/// Appends `frame` as one length-prefixed record (u16 LE length, then the bytes): the form
/// [`Input::u16`] and [`Input::bytes`] read back.
pub fn put_record(out: &mut Vec<u8>, frame: &[u8]) {
    out.extend_from_slice(&(frame.len() as u16).to_le_bytes());
    out.extend_from_slice(frame);
}
