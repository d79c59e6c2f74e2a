//! `tigon soak`, shortened: stress jobs of 15 s across two emulated nodes on a wire that drops
//! 5 % of the frames, a rank SIGKILLed every 10 s while the other job runs on. It must count
//! the messages of the jobs that completed, lose none, report the agents' memory, and say
//! "passed" with exit status 0. (`make soak` runs it for 10 minutes; not part of `make test`.)
//!
//! The agents pin lcores 0 and 1: nextest runs this binary in the `dpdk-pinned` group.

mod common;

use common::TIGON;
use std::process::{Command, Stdio};

#[test]
fn short_soak_loses_nothing() {
    let o = Command::new(TIGON)
        .args([
            "soak",
            "--seconds",
            "40",
            "--kill-every",
            "10",
            "--jobs",
            "2",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("tigon soak");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    let text = format!("exit {:?}\n--- stdout\n{out}\n--- stderr\n{err}", o.status);
    assert!(
        o.status.success() && out.contains("tigon soak: passed"),
        "{text}"
    );
    let kills = err.matches(": killed rank pid ").count();
    assert!(kills >= 2, "expected a rank killed every 10 s: {text}");
    let messages = out
        .lines()
        .find_map(|l| l.strip_prefix("messages: "))
        .unwrap_or_else(|| panic!("no messages line: {text}"));
    let nums: Vec<u64> = messages
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    // sent, received, lost, damaged
    assert!(
        nums.len() == 4 && nums[0] > 0 && nums[0] == nums[1] && nums[2] == 0 && nums[3] == 0,
        "{text}"
    );
    // One line per agent process: one hosting both nodes with the shared layout (fewer than
    // 2 CPUs per node), else one per node.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let agents = if cpus < 4 { 1 } else { 2 };
    assert_eq!(out.matches(" RSS: start ").count(), agents, "{text}");
    // Jobs ended both ways: completed (counted above) and killed (what they received before).
    let completed: u64 = out
        .split(" jobs ran to completion")
        .next()
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
        .unwrap_or(0);
    assert!(
        completed >= 2,
        "expected jobs that ran to completion: {text}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("jobs that lost a rank: ") && l.ends_with(", 0 damaged")),
        "{text}"
    );
    // The wire did drop frames, and the agents made up for them.
    assert!(
        out.lines()
            .filter(|l| l.starts_with("agent ") && l.contains(" retransmits, "))
            .all(|l| !l.contains(" 0 retransmits") && !l.contains(" 0 dropped")),
        "{text}"
    );
}
