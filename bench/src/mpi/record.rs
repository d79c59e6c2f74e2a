//! The program's output: one JSON record per line.

use serde::Deserialize;

/// One JSON line of the program.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Record {
    Hello {
        ns_per_unit: f64,
        #[serde(default)]
        host: String,
    },
    Progress {
        msg: String,
    },
    Rtt {
        size: usize,
        half_rtt_ns: Vec<u64>,
    },
    Gap {
        size: usize,
        n: u64,
        total_ns: f64,
    },
    SendOvh {
        size: usize,
        n: u64,
        d_ns: f64,
        total_ns: f64,
        call_ns: Vec<u64>,
    },
    RecvOvh {
        size: usize,
        n: u64,
        d_ns: f64,
        total_ns: f64,
        call_ns: Vec<u64>,
    },
    Bw {
        kind: String,
        size: usize,
        bytes: f64,
        total_ns: f64,
    },
    Avail {
        size: usize,
        poll: u64,
        quiet_ns: f64,
        comm_ns: f64,
        rounds: u64,
        #[serde(default)]
        truncated: u64,
    },
    Dbuf {
        regime: String,
        bsize: usize,
        n: u64,
        bytes: f64,
        total_ns: f64,
        #[serde(rename = "producer_Bps")]
        producer_bps: f64,
        #[serde(rename = "consumer_Bps")]
        consumer_bps: f64,
        /// 1: both ranks may run only on the same one CPU.
        #[serde(default)]
        one_cpu: u64,
    },
    Emp {
        compute_us: f64,
        n: u64,
        batch: u64,
        total_ns: f64,
        compute_ns: f64,
        bytes: f64,
        isend_ns: Vec<u64>,
        irecv_ns: Vec<u64>,
        waitall_ns: Vec<u64>,
    },
    Done {},
    Error {
        msg: String,
    },
}

/// Parses the program's stdout; lines that are not records (e.g. Open MPI's own warnings)
/// are returned separately.
pub fn parse_lines(text: &str) -> (Vec<Record>, Vec<String>) {
    let (mut recs, mut other) = (Vec::new(), Vec::new());
    for l in text.lines() {
        match parse_line(l) {
            Some(r) => recs.push(r),
            None if !l.trim().is_empty() => other.push(l.to_string()),
            None => {}
        }
    }
    (recs, other)
}

pub(super) fn parse_line(l: &str) -> Option<Record> {
    let l = l.trim();
    if !l.starts_with("{\"t\":") {
        return None;
    }
    serde_json::from_str(l).ok()
}
