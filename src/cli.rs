//! Checks of command-line values shared by the subcommands, and how the CLI ends when its
//! reader goes away. Each check's error is one line: clap prints it as
//! `invalid value 'V' for '--opt <X>': <range and fix>`.

/// `--loss`: a percentage.
pub fn parse_percent(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(v) if v <= 100 => Ok(v),
        _ => Err("a percentage of frames, 0 to 100 (e.g. --loss 5)".into()),
    }
}

/// `--mtu`: the two frame sizes the agents support.
pub fn parse_mtu(s: &str) -> Result<u16, String> {
    match s.parse::<u16>() {
        Ok(v @ (1500 | 9000)) => Ok(v),
        _ => Err("use 1500, or 9000 for jumbo frames".into()),
    }
}

/// `--nodes`: at least one (memif links two at most; Cluster::start says so).
pub fn parse_nodes(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(v) if (1..=MAX_NODES).contains(&v) => Ok(v),
        _ => Err(format!(
            "a number of emulated nodes, 1 to {MAX_NODES} (e.g. --nodes 2)"
        )),
    }
}

/// More emulated nodes than this on one machine is a mistake (each runs an agent).
pub const MAX_NODES: usize = 64;

/// `-np`: at least one rank.
pub fn parse_np(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(v) if v >= 1 => Ok(v),
        _ => Err("a number of MPI ranks, at least 1 (e.g. -np 2)".into()),
    }
}

/// `eprintln!` for a command that must go on whatever becomes of its stderr: `tigon run`
/// tears down the agents, namespaces and memory it made, and passes the program's status
/// on, also when its stderr is a pipe whose reader went away (`2>&1 | head -1`) or a full
/// disk. A message that cannot be written is dropped, where `eprintln!` panics (and a
/// broken pipe then ended the process before its clean-up: helper-found).
macro_rules! say {
    ($($a:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($a)*);
    }};
}
pub(crate) use say;

/// Output to a reader that went away (`tigon stats | head -1`): Rust ignores SIGPIPE, so
/// `println!` panics on the broken pipe (exit 101 and a panic message). SIGPIPE stays
/// ignored, since the CLI writes to agents' sockets and a vanished agent must be an error,
/// not a silent death; instead this hook ends the process the way SIGPIPE ends a C program,
/// quietly, when the panic is a write to stdout or stderr that found its pipe closed. Every
/// other panic goes to the default hook.
pub fn end_quietly_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if is_broken_pipe_print(msg) {
            tigon_shm::process::die_of_sigpipe();
        }
        default(info);
    }));
}

/// Whether a panic message is std's "failed printing to stdout: Broken pipe (os error 32)".
fn is_broken_pipe_print(msg: &str) -> bool {
    (msg.starts_with("failed printing to stdout") || msg.starts_with("failed printing to stderr"))
        && msg.contains(&format!("os error {}", libc::EPIPE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_their_ranges() {
        assert_eq!(parse_percent("0"), Ok(0));
        assert_eq!(parse_percent("100"), Ok(100));
        for bad in ["150", "-1", "5%", ""] {
            let e = parse_percent(bad).unwrap_err();
            assert!(e.contains("0 to 100"), "{bad}: {e}");
        }
        assert_eq!(parse_mtu("9000"), Ok(9000));
        assert!(parse_mtu("1400").unwrap_err().contains("1500"));
        assert_eq!(parse_nodes("3"), Ok(3));
        assert!(parse_nodes("0").unwrap_err().contains("1 to"));
        assert_eq!(parse_np("1"), Ok(1));
        assert!(parse_np("0").unwrap_err().contains("at least 1"));
    }

    #[test]
    fn broken_pipe_panics_are_recognised() {
        assert!(is_broken_pipe_print(
            "failed printing to stdout: Broken pipe (os error 32)"
        ));
        assert!(!is_broken_pipe_print(
            "failed printing to stdout: No space left on device (os error 28)"
        ));
        assert!(!is_broken_pipe_print("index out of bounds"));
    }
}
