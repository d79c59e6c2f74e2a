//! One-machine fabrics for tests and the demo: network namespaces joined by a veth pair
//! (torn down by Drop, even when a test fails), and a runner that starts a receiving and a
//! sending `tigon-frames` process and collects their reports.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::frames::{RecvReport, SendReport};

/// A short tag unique to this process and call, `PID-N` (interface names are limited to 15
/// bytes): namespaces, interfaces and scratch directories named with it carry their owner's
/// pid, so that a later sweep (`make clean-netns`, the next `tigon run`) removes only those
/// whose owner is dead.
pub fn unique_tag() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{}-{:x}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The owner's pid in a name that ends in a [`unique_tag`] after a few letters (`tgA1234-0`,
/// `tva1234-1`, `1234-0`): the decimal digits after the letters, which a `-` must follow.
pub fn tag_owner(name: &str) -> Option<u32> {
    let rest = name.trim_start_matches(|c: char| c.is_ascii_alphabetic());
    let (pid, _) = rest.split_once('-')?;
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running `ip {}`: {e} (install iproute2)", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A network namespace, deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// `ip netns add name` (needs root).
    pub fn new(name: &str) -> Result<Netns, String> {
        ip(&["netns", "add", name])?;
        let ns = Netns { name: name.into() };
        ip(&["-n", name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            eprintln!("warning: {e}");
        }
    }
}

/// Two namespaces joined by a veth pair: end `a` lives in `ns_a`, end `b` in `ns_b`.
#[derive(Debug)]
pub struct VethPair {
    /// Interface name in `ns_a`.
    pub a: String,
    /// Interface name in `ns_b`.
    pub b: String,
    /// Namespace of `a` (dropped after the link).
    pub ns_a: Netns,
    /// Namespace of `b`.
    pub ns_b: Netns,
}

impl VethPair {
    /// Creates namespaces `tgA<tag>` / `tgB<tag>` and a veth pair `tva<tag>` / `tvb<tag>`
    /// with the given MTU, up, IPv6 off (no router solicitations on the wire).
    pub fn new(tag: &str, mtu: u16) -> Result<VethPair, String> {
        let ns_a = Netns::new(&format!("tgA{tag}"))?;
        let ns_b = Netns::new(&format!("tgB{tag}"))?;
        let (a, b) = (format!("tva{tag}"), format!("tvb{tag}"));
        if a.len() > 15 {
            return Err(format!("interface name `{a}` is longer than 15 bytes"));
        }
        ip(&["link", "add", &a, "type", "veth", "peer", "name", &b])?;
        // From here on, deleting the namespaces deletes the interfaces in them; until the
        // moves succeed, delete the link ourselves.
        let pair = VethPair { a, b, ns_a, ns_b };
        let setup = || -> Result<(), String> {
            ip(&["link", "set", &pair.a, "netns", pair.ns_a.name()])?;
            ip(&["link", "set", &pair.b, "netns", pair.ns_b.name()])?;
            for (ns, ifc) in [(&pair.ns_a, &pair.a), (&pair.ns_b, &pair.b)] {
                let _ = Command::new("ip")
                    .args(["netns", "exec", ns.name(), "sysctl", "-qw"])
                    .arg(format!("net.ipv6.conf.{ifc}.disable_ipv6=1"))
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
                ip(&[
                    "-n",
                    ns.name(),
                    "link",
                    "set",
                    ifc,
                    "mtu",
                    &mtu.to_string(),
                    "up",
                ])?;
            }
            Ok(())
        };
        if let Err(e) = setup() {
            let _ = ip(&["link", "del", &pair.a]);
            return Err(e);
        }
        Ok(pair)
    }
}

/// Kernel counters of a veth pair, read from sysfs inside the namespaces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VethCounters {
    /// Frames `a` transmitted.
    pub a_tx_packets: u64,
    /// Frames `a` dropped on transmit.
    pub a_tx_dropped: u64,
    /// Frames that reached `b`.
    pub b_rx_packets: u64,
    /// Frames `b` dropped on receive.
    pub b_rx_dropped: u64,
}

fn counter(ns: &str, ifc: &str, name: &str) -> u64 {
    Command::new("ip")
        .args(["netns", "exec", ns, "cat"])
        .arg(format!("/sys/class/net/{ifc}/statistics/{name}"))
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(0)
}

impl VethPair {
    /// The kernel's counters for the `a` → `b` direction (0 where unreadable).
    pub fn counters(&self) -> VethCounters {
        VethCounters {
            a_tx_packets: counter(self.ns_a.name(), &self.a, "tx_packets"),
            a_tx_dropped: counter(self.ns_a.name(), &self.a, "tx_dropped"),
            b_rx_packets: counter(self.ns_b.name(), &self.b, "rx_packets"),
            b_rx_dropped: counter(self.ns_b.name(), &self.b, "rx_dropped"),
        }
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        // Deleting one end deletes both; the namespaces go right after (field drop order).
        let _ = ip(&["-n", self.ns_a.name(), "link", "del", &self.a]);
    }
}

/// A child process killed (by its own pid) and reaped on drop if still running.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// One end of a stream: where and how to run it.
#[derive(Clone, Debug, Default)]
pub struct Endpoint {
    /// Run inside this network namespace (`ip netns exec`).
    pub netns: Option<String>,
    /// Arguments after the program (and its prefix arguments).
    pub args: Vec<String>,
}

/// A receiver/sender pair of `tigon-frames` processes.
#[derive(Clone, Debug)]
pub struct Stream {
    /// The program (`tigon-frames`, or `tigon` with `prefix_args = ["frames"]`).
    pub program: PathBuf,
    /// Arguments before the role.
    pub prefix_args: Vec<String>,
    /// The receiving end (`recv ...`).
    pub receiver: Endpoint,
    /// The sending end (`send ...`).
    pub sender: Endpoint,
    /// Give up when the whole exchange takes longer.
    pub timeout: Duration,
}

fn spawn(s: &Stream, end: &Endpoint) -> Result<Guard, String> {
    let mut cmd = match &end.netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(&s.program);
            c
        }
        None => Command::new(&s.program),
    };
    cmd.args(&s.prefix_args)
        .args(&end.args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    // Killed with the process that runs the stream, even by SIGKILL (Guard covers the rest).
    tigon_shm::process::die_with_parent(&mut cmd, libc::SIGKILL);
    cmd.spawn()
        .map(Guard)
        .map_err(|e| format!("starting {}: {e}", s.program.display()))
}

fn lines_of(child: &mut Guard) -> Result<mpsc::Receiver<String>, String> {
    let out = child.0.stdout.take().ok_or("child has no stdout pipe")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    Ok(rx)
}

fn wait_exit(
    child: &mut Guard,
    deadline: Instant,
    what: &str,
    stop: &dyn Fn() -> bool,
) -> Result<(), String> {
    loop {
        if stop() {
            return Err(format!("{what}: interrupted"));
        }
        match child.0.try_wait() {
            Ok(Some(st)) if st.success() => return Ok(()),
            Ok(Some(st)) => return Err(format!("{what} failed ({st}); see its stderr above")),
            Ok(None) if Instant::now() > deadline => {
                return Err(format!("{what} did not finish in time"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting for {what}: {e}")),
        }
    }
}

impl Stream {
    /// Starts the receiver, waits for its `READY`, runs the sender to completion, then
    /// collects both reports. Both processes are killed if anything fails.
    pub fn run(&self) -> Result<(RecvReport, SendReport), String> {
        self.run_until(&|| false)
    }

    /// [`Stream::run`], given up (both processes killed) as soon as `stop` returns true, e.g.
    /// on Ctrl-C.
    pub fn run_until(&self, stop: &dyn Fn() -> bool) -> Result<(RecvReport, SendReport), String> {
        let deadline = Instant::now() + self.timeout;
        let mut recv = spawn(self, &self.receiver)?;
        let recv_lines = lines_of(&mut recv)?;
        let ready_by = Instant::now() + Duration::from_secs(60);
        loop {
            if stop() {
                return Err("interrupted".into());
            }
            match recv_lines.recv_timeout(Duration::from_millis(100)) {
                Ok(l) if l.trim() == "READY" => break,
                Ok(_) => continue,
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline.min(ready_by) => {
                }
                Err(_) => {
                    let st = recv.0.try_wait().ok().flatten();
                    return Err(format!(
                        "receiver never became ready (exit status: {st:?}); see its stderr above"
                    ));
                }
            }
        }
        let mut send = spawn(self, &self.sender)?;
        let mut send_out = send.0.stdout.take().ok_or("sender has no stdout pipe")?;
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = send_out.read_to_string(&mut s);
            s
        });
        wait_exit(&mut send, deadline, "sender", stop)?;
        let send_text = reader.join().unwrap_or_default();
        let sent = send_text
            .lines()
            .find_map(SendReport::parse)
            .ok_or_else(|| format!("sender printed no SENT line: {send_text:?}"))?;
        wait_exit(&mut recv, deadline, "receiver", stop)?;
        // The reader thread ends at EOF; its last lines may still be on their way.
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match recv_lines.recv_timeout(left.max(Duration::from_secs(1))) {
                Ok(l) => {
                    if let Some(r) = RecvReport::parse(&l) {
                        return Ok((r, sent));
                    }
                }
                Err(_) => return Err("receiver printed no RESULT line".into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_name_their_owner() {
        let t = unique_tag();
        assert_eq!(tag_owner(&t), Some(std::process::id()));
        assert_eq!(tag_owner(&format!("tgA{t}")), Some(std::process::id()));
        assert_eq!(tag_owner("tgN1234-01"), Some(1234));
        assert_eq!(tag_owner("tgAg77-0"), Some(77));
        // Not a tag: hex digits after the pid, no dash, nothing before the dash.
        assert_eq!(tag_owner("tgA1f30"), None);
        assert_eq!(tag_owner("tgA12"), None);
        assert_eq!(tag_owner("tgA-3"), None);
        assert_eq!(tag_owner("tgA12x-3"), None);
    }
}
