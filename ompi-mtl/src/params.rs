//! The component's MCA parameters (registered by the C shim), checked where they are read.
//!
//! The numbers are registered as strings and parsed here: an int variable of Open MPI turns
//! `abc` into 0 without a word, and took `-1` for a finalize timeout (no wait at all). A
//! value that is not a number, or out of its range, is refused with one line naming the
//! parameter, the value, the range and the fix; selection then fails (see `component_query`).

use crate::ffi;
use std::ffi::{CStr, c_char};
use std::path::PathBuf;
use std::time::Duration;

/// The component's MCA parameters.
#[derive(Debug, PartialEq)]
pub struct Params {
    pub priority: i32,
    pub verbose: i32,
    pub socket: Option<PathBuf>,
    pub channel_threshold: i32,
    pub finalize_timeout: Duration,
    /// Poll (or yield, with mpi_yield_when_idle) this long without activity before sleeping on
    /// the channel; `None`: never sleep.
    pub nap_after: Option<Duration>,
    /// Where waits yield: poll this long after a send to a process of this host before
    /// yielding (see `request::spin_after_send`).
    pub spin_after_send: Duration,
}

/// The raw values, as Open MPI's variable system holds them.
struct Raw<'a> {
    priority: &'a str,
    verbose: &'a str,
    socket: &'a str,
    channel_threshold: &'a str,
    finalize_timeout_ms: &'a str,
    nap_after_us: &'a str,
    spin_after_send_ns: &'a str,
}

/// A number of MCA parameter `mtl_tigon_NAME` in `lo..=hi`, or the line that says what is
/// wrong; `default` when unset (empty).
fn number(
    name: &str,
    raw: &str,
    lo: i32,
    hi: i32,
    unit: &str,
    default: i32,
) -> Result<i32, String> {
    let v = raw.trim();
    if v.is_empty() {
        return Ok(default);
    }
    match v.parse::<i64>() {
        Ok(n) if (lo as i64..=hi as i64).contains(&n) => Ok(n as i32),
        _ => Err(format!(
            "MCA parameter mtl_tigon_{name} = \"{raw}\": use a whole number from {lo} to {hi}{unit} (e.g. --mca mtl_tigon_{name} {default}, the default)"
        )),
    }
}

fn check(r: &Raw) -> (Params, Vec<String>) {
    let mut problems = Vec::new();
    let mut num = |name, raw, lo, hi, unit, default| {
        number(name, raw, lo, hi, unit, default).unwrap_or_else(|e| {
            problems.push(e);
            default
        })
    };
    let priority = num("priority", r.priority, 0, 100, "", 30);
    let verbose = num("verbose", r.verbose, 0, 100, "", 0);
    let channel_threshold = num(
        "channel_threshold",
        r.channel_threshold,
        0,
        1 << 30,
        " bytes",
        0,
    );
    let finalize_ms = num(
        "finalize_timeout_ms",
        r.finalize_timeout_ms,
        0,
        3_600_000,
        " ms",
        30_000,
    );
    let nap_us = num(
        "nap_after_us",
        r.nap_after_us,
        -1,
        1_000_000,
        " µs (-1: never sleep)",
        1000,
    );
    let spin_ns = num(
        "spin_after_send_ns",
        r.spin_after_send_ns,
        0,
        100_000,
        " ns (0: yield at once)",
        600,
    );
    let params = Params {
        priority,
        verbose,
        socket: (!r.socket.is_empty()).then(|| PathBuf::from(r.socket)),
        channel_threshold,
        finalize_timeout: Duration::from_millis(finalize_ms as u64),
        nap_after: (nap_us >= 0).then(|| Duration::from_micros(nap_us as u64)),
        spin_after_send: Duration::from_nanos(spin_ns as u64),
    };
    (params, problems)
}

/// A string variable's value ("" when null).
///
/// # Safety
/// `p` is null or a NUL-terminated string alive for the returned lifetime.
unsafe fn text<'a>(p: *const c_char) -> std::borrow::Cow<'a, str> {
    if p.is_null() {
        return "".into();
    }
    // SAFETY: per this function's contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy()
}

/// The parameters' values, and one line per value that is refused (its default is used in
/// its place: the component does not start with one, see `component_query`).
pub fn checked() -> (Params, Vec<String>) {
    // SAFETY: the shim returns a pointer to its static parameter block, valid for the life of
    // the process; Open MPI writes it only while registering variables (before any reader).
    let p = unsafe { &*ffi::tigon_params() };
    // SAFETY: each field is null or a NUL-terminated string owned by Open MPI's variable
    // system (or the shim's static default), alive until the variable is deregistered at
    // component close; the values are copied out below before this function returns.
    let (priority, verbose, socket, channel, finalize, nap, spin) = unsafe {
        (
            text(p.priority),
            text(p.verbose),
            text(p.socket),
            text(p.channel_threshold),
            text(p.finalize_timeout_ms),
            text(p.nap_after_us),
            text(p.spin_after_send_ns),
        )
    };
    check(&Raw {
        priority: &priority,
        verbose: &verbose,
        socket: &socket,
        channel_threshold: &channel,
        finalize_timeout_ms: &finalize,
        nap_after_us: &nap,
        spin_after_send_ns: &spin,
    })
}

/// The parameters' current values (a refused value reads as its default).
pub fn params() -> Params {
    checked().0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw<'a>(finalize: &'a str, nap: &'a str, verbose: &'a str) -> Raw<'a> {
        Raw {
            priority: "30",
            verbose,
            socket: "",
            channel_threshold: "0",
            finalize_timeout_ms: finalize,
            nap_after_us: nap,
            spin_after_send_ns: "",
        }
    }

    #[test]
    fn defaults_and_good_values() {
        let (p, problems) = check(&raw("30000", "", "0"));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(p.finalize_timeout, Duration::from_secs(30));
        // Ranks poll: sleeping comes only after a long idle (issue 15: >= 1 ms).
        assert_eq!(p.nap_after, Some(Duration::from_millis(1)));
        // A rank that sent to its host waits the agent's delivery time before it yields.
        assert_eq!(p.spin_after_send, Duration::from_nanos(600));
        let (p, _) = check(&raw("30000", "20", "0"));
        assert_eq!(p.nap_after, Some(Duration::from_micros(20)));
        let (p, problems) = check(&Raw {
            spin_after_send_ns: "0",
            ..raw("30000", "", "0")
        });
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(p.spin_after_send, Duration::ZERO);
        let (p, problems) = check(&Raw {
            spin_after_send_ns: "-5",
            ..raw("30000", "", "0")
        });
        assert!(
            problems.len() == 1 && problems[0].contains("mtl_tigon_spin_after_send_ns = \"-5\""),
            "{problems:?}"
        );
        assert_eq!(p.spin_after_send, Duration::from_nanos(600));
        let (p, problems) = check(&raw(" 0 ", "-1", "100"));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            (p.finalize_timeout, p.nap_after, p.verbose),
            (Duration::ZERO, None, 100)
        );
    }

    #[test]
    fn negative_and_non_numeric_values_are_refused_by_name() {
        let (p, problems) = check(&raw("-1", "abc", "1e3"));
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(
            problems[0].contains("mtl_tigon_verbose = \"1e3\"") && problems[0].contains("0 to 100"),
            "{problems:?}"
        );
        assert!(
            problems[1].contains("mtl_tigon_finalize_timeout_ms = \"-1\"")
                && problems[1].contains("0 to 3600000")
                && problems[1].contains("--mca mtl_tigon_finalize_timeout_ms 30000"),
            "{problems:?}"
        );
        assert!(
            problems[2].contains("mtl_tigon_nap_after_us = \"abc\""),
            "{problems:?}"
        );
        // What is refused reads as its default, never as 0 or "no wait".
        assert_eq!(p.finalize_timeout, Duration::from_secs(30));
    }
}
