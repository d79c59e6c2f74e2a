//! A request as the engine acts on it: the fields the client put in its request-ring slot
//! read once, checked, its buffer resolved (those bytes are [`Desc`]; a [`Request`] is what
//! they mean, as smoltcp's `Repr` is to its packets).

use super::desc::{
    Desc, FLAG_ABANDON, FLAG_ANY_SOURCE, FLAG_DIRECT, FLAG_LEASE, FLAG_SYNC, NO_DATA, Op,
};
use super::layout::Geometry;
use crate::addr::Dest;
#[cfg(test)]
use crate::addr::EndpointAddr;
use crate::matching::MatchSpec;

/// Where a request's payload is, resolved once from its descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// `len` bytes at `addr` in the client's own address space ([`FLAG_DIRECT`]).
    Direct { addr: u64, len: u64 },
    /// `len` bytes at byte `offset` of the channel region: a data buffer, which holds them.
    Buffer { offset: u64, len: u64 },
    /// A receive's data buffer, as `Buffer`, whose client may instead be lent the frame the
    /// payload arrived in ([`FLAG_LEASE`]).
    Lease { offset: u64, len: u64 },
}

/// What a client asks of the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    Send {
        /// The endpoint, and the incarnation of its node the client's address for it named.
        dest: Dest,
        match_bits: u64,
        /// The sender's rank, as the receiver will see it.
        rank: u32,
        /// MPI_Ssend: complete only once the receiver has matched it.
        sync: bool,
        payload: Payload,
    },
    Recv {
        spec: MatchSpec,
        payload: Payload,
    },
    /// Receive the message an MProbe took (`handle`).
    MRecv {
        handle: u64,
        payload: Payload,
    },
    Probe {
        spec: MatchSpec,
    },
    MProbe {
        spec: MatchSpec,
    },
    /// Cancel the client's request in descriptor `target`, or with `abandon`, stop touching
    /// its memory and let it go on ([`FLAG_ABANDON`]).
    Cancel {
        target: u32,
        abandon: bool,
    },
}

/// A descriptor the client submitted: its own tag and what it asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Submitted {
    /// Echoed in the completion: the client's tag for the request.
    pub user: u32,
    pub request: Request,
}

impl Request {
    /// What descriptor `d` asks, or why it asks nothing sensible. Only the fields its
    /// operation uses are checked (a probe's data buffer index may be anything).
    pub fn parse(d: &Desc, geo: &Geometry) -> Result<Request, String> {
        let op = Op::from_u8(d.op).ok_or_else(|| format!("unknown operation {}", d.op))?;
        let spec = || MatchSpec {
            bits: d.match_bits,
            mask: d.mask,
            source: (d.flags & FLAG_ANY_SOURCE == 0).then_some(d.rank),
        };
        Ok(match op {
            Op::Send => Request::Send {
                dest: Dest {
                    addr: d.peer.ok_or("send without destination")?,
                    incarnation: d.peer_incarnation,
                },
                match_bits: d.match_bits,
                rank: d.rank,
                sync: d.flags & FLAG_SYNC != 0,
                payload: Payload::of(d, geo)?,
            },
            Op::Recv => Request::Recv {
                spec: spec(),
                payload: Payload::of(d, geo)?.leased(d),
            },
            Op::MRecv => Request::MRecv {
                handle: d.handle,
                payload: Payload::of(d, geo)?.leased(d),
            },
            Op::Probe => Request::Probe { spec: spec() },
            Op::MProbe => Request::MProbe { spec: spec() },
            Op::Cancel => Request::Cancel {
                target: d.handle as u32,
                abandon: d.flags & FLAG_ABANDON != 0,
            },
        })
    }
}

impl Payload {
    /// A receive's data buffer the client takes leases for ([`FLAG_LEASE`]).
    fn leased(self, d: &Desc) -> Payload {
        match self {
            Payload::Buffer { offset, len } if d.flags & FLAG_LEASE != 0 => {
                Payload::Lease { offset, len }
            }
            p => p,
        }
    }

    /// The payload `d` names: the client's memory, or one of the channel's data buffers
    /// (which must exist and hold `d.len` bytes).
    fn of(d: &Desc, geo: &Geometry) -> Result<Payload, String> {
        if d.flags & FLAG_DIRECT != 0 {
            return Ok(Payload::Direct {
                addr: d.addr,
                len: d.len,
            });
        }
        if d.data_idx == NO_DATA || d.len > geo.data_size as u64 {
            return Err(format!(
                "{}-byte payload without a fitting data buffer",
                d.len
            ));
        }
        let offset = geo.data_buffer_off(d.data_idx).map_err(|e| e.to_string())?;
        Ok(Payload::Buffer {
            offset: offset as u64,
            len: d.len,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GEO: Geometry = Geometry {
        n_desc: 16,
        n_data: 4,
        data_size: 1024,
    };

    /// A receive through a data buffer may take a lease of its frame (FLAG_LEASE); a send,
    /// or a receive into the client's own memory, cannot.
    #[test]
    fn leases_only_for_receives_through_data_buffers() {
        let recv = Desc {
            op: Op::Recv as u8,
            flags: FLAG_LEASE,
            data_idx: 1,
            len: 100,
            ..Desc::default()
        };
        let at = (GEO.data_off() + 1024) as u64;
        let lease = Payload::Lease {
            offset: at,
            len: 100,
        };
        assert!(
            matches!(Request::parse(&recv, &GEO), Ok(Request::Recv { payload, .. }) if payload == lease)
        );
        let mrecv = Desc {
            op: Op::MRecv as u8,
            ..recv
        };
        assert!(
            matches!(Request::parse(&mrecv, &GEO), Ok(Request::MRecv { payload, .. }) if payload == lease)
        );
        let direct = Desc {
            flags: FLAG_LEASE | FLAG_DIRECT,
            ..recv
        };
        assert!(matches!(
            Request::parse(&direct, &GEO),
            Ok(Request::Recv {
                payload: Payload::Direct { .. },
                ..
            })
        ));
        let send = Desc {
            op: Op::Send as u8,
            peer: Some("02:00:00:00:00:01/4".parse().unwrap()),
            ..recv
        };
        assert!(matches!(
            Request::parse(&send, &GEO),
            Ok(Request::Send {
                payload: Payload::Buffer { .. },
                ..
            })
        ));
    }

    #[test]
    fn each_operation_with_its_buffer_resolved() {
        let peer: EndpointAddr = "02:00:00:00:00:01/4".parse().unwrap();
        let send = Desc {
            op: Op::Send as u8,
            flags: FLAG_SYNC,
            data_idx: 2,
            user: 7,
            len: 1000,
            match_bits: 0xabc,
            rank: 5,
            peer: Some(peer),
            peer_incarnation: 0x6a3f_09c1,
            ..Desc::default()
        };
        assert_eq!(
            Desc::parse(&send.emit()),
            send,
            "a request's bytes round-trip"
        );
        assert_eq!(
            Request::parse(&send, &GEO).unwrap(),
            Request::Send {
                dest: Dest {
                    addr: peer,
                    incarnation: 0x6a3f_09c1
                },
                match_bits: 0xabc,
                rank: 5,
                sync: true,
                payload: Payload::Buffer {
                    offset: (GEO.data_off() + 2 * 1024) as u64,
                    len: 1000
                },
            }
        );
        let recv = Desc {
            op: Op::Recv as u8,
            flags: FLAG_DIRECT | FLAG_ANY_SOURCE,
            data_idx: NO_DATA,
            len: 1 << 20,
            addr: 0x7000_0000,
            match_bits: 9,
            mask: 0xff,
            rank: 3,
            ..Desc::default()
        };
        assert_eq!(
            Request::parse(&recv, &GEO).unwrap(),
            Request::Recv {
                spec: MatchSpec {
                    bits: 9,
                    mask: 0xff,
                    source: None
                },
                payload: Payload::Direct {
                    addr: 0x7000_0000,
                    len: 1 << 20
                },
            }
        );
        // A probe names no buffer: whatever its data index says is not looked at.
        let probe = Desc {
            op: Op::Probe as u8,
            data_idx: 99,
            rank: 3,
            ..Desc::default()
        };
        assert!(matches!(
            Request::parse(&probe, &GEO).unwrap(),
            Request::Probe {
                spec: MatchSpec {
                    source: Some(3),
                    ..
                }
            }
        ));
    }

    #[test]
    fn bad_requests_say_what_is_wrong() {
        let cases: [(Desc, &str); 5] = [
            (
                Desc {
                    op: 42,
                    ..Desc::default()
                },
                "unknown operation 42",
            ),
            (
                Desc {
                    op: Op::Send as u8,
                    data_idx: 0,
                    ..Desc::default()
                },
                "send without destination",
            ),
            (
                Desc {
                    op: Op::Recv as u8,
                    data_idx: NO_DATA,
                    len: 10,
                    ..Desc::default()
                },
                "10-byte payload without a fitting data buffer",
            ),
            (
                Desc {
                    op: Op::Recv as u8,
                    data_idx: 0,
                    len: 1025,
                    ..Desc::default()
                },
                "1025-byte payload without a fitting data buffer",
            ),
            (
                Desc {
                    op: Op::MRecv as u8,
                    data_idx: 4,
                    len: 1,
                    ..Desc::default()
                },
                "data buffer index 4 out of range",
            ),
        ];
        for (d, why) in &cases {
            assert_eq!(Request::parse(d, &GEO).unwrap_err(), *why, "{d:?}");
        }
    }
}
