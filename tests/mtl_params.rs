//! The MTL's MCA parameters are checked where the component reads them: a negative or
//! non-numeric `mtl_tigon_*` value (Open MPI's int variables took `abc` as 0 and a finalize
//! timeout of -1 as "no wait", without a word) makes MPI_Init fail with one line that names
//! the parameter, the value, the range and the default to use; values in range run.
//!
//! The agents pin lcores 0 and 1: nextest runs this binary in the `dpdk-pinned` group.

mod common;

use common::TIGON;
use common::mpi::{check_mtl_built, program};
use std::process::{Command, Stdio};

/// `tigon run -np 2 -- p2p_basic` with `OMPI_MCA_mtl_tigon_NAME=VALUE` (as `--mca` would pass
/// it to the ranks): exit success and output.
fn job_with(name: &str, value: &str) -> (bool, String) {
    check_mtl_built();
    let prog = program("p2p_basic");
    let o = Command::new(TIGON)
        .args(["run", "-np", "2", "--"])
        .arg(&prog)
        .env(format!("OMPI_MCA_mtl_tigon_{name}"), value)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("tigon run");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), text)
}

fn refused(name: &str, value: &str, range: &str) {
    let (ok, text) = job_with(name, value);
    let line = text
        .lines()
        .find(|l| l.contains(&format!("mtl_tigon_{name} = \"{value}\"")))
        .unwrap_or_default();
    assert!(
        !ok && line.contains(range) && line.contains(&format!("--mca mtl_tigon_{name} ")),
        "mtl_tigon_{name}={value} should fail MPI_Init naming the value, {range} and the fix:\n{text}"
    );
}

#[test]
fn finalize_timeout_negative_or_not_a_number() {
    refused("finalize_timeout_ms", "-1", "0 to 3600000");
    refused("finalize_timeout_ms", "abc", "0 to 3600000");
}

#[test]
fn nap_after_below_minus_one_or_not_a_number() {
    refused("nap_after_us", "-5", "-1 to 1000000");
    refused("nap_after_us", "20us", "-1 to 1000000");
}

#[test]
fn spin_after_send_negative_or_past_its_range() {
    refused("spin_after_send_ns", "-1", "0 to 100000");
    refused("spin_after_send_ns", "200000", "0 to 100000");
}

#[test]
fn priority_verbose_channel_threshold_out_of_range() {
    refused("priority", "500", "0 to 100");
    refused("verbose", "loud", "0 to 100");
    refused("channel_threshold", "-1", "0 to 1073741824");
}

#[test]
fn values_in_range_run() {
    for (name, value) in [
        ("finalize_timeout_ms", "0"),
        ("nap_after_us", "-1"),
        ("spin_after_send_ns", "0"),
    ] {
        let (ok, text) = job_with(name, value);
        assert!(
            ok && text.contains("OK p2p_basic"),
            "mtl_tigon_{name}={value}:\n{text}"
        );
    }
}
