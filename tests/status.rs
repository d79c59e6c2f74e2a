//! MPI says a single-completion call (MPI_Recv, MPI_Probe, MPI_Mprobe, MPI_Mrecv, MPI_Wait,
//! ...) never touches `status.MPI_ERROR`: only multiple-completion calls set it, when they
//! return MPI_ERR_IN_STATUS. One test per call runs `tests/mpi/status_error.c` under `tigon
//! run` (the MTL): the marker the program puts in MPI_ERROR must survive, and the source, tag
//! and count must be right. The program itself is checked against ob1 first.
//!
//! The agents pin lcores 0 and 1: nextest runs this binary in the `dpdk-pinned` group.

mod common;

use common::TIGON;
use common::mpi::{check_mtl_built, program};
use std::process::{Command, Stdio};

const CALLS: &[&str] = &[
    "Probe", "Iprobe", "Mprobe", "Improbe", "Mrecv", "Imrecv", "Recv", "Wait", "Test", "Sendrecv",
];

fn output(cmd: &mut Command) -> (bool, String) {
    let o = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), text)
}

/// `call` over the MTL: MPI_ERROR kept, and the program found nothing else wrong.
fn over_tigon(call: &str) {
    check_mtl_built();
    let prog = program("status_error");
    let (ok, text) = output(
        Command::new(TIGON)
            .args(["run", "-np", "2", "--"])
            .arg(&prog)
            .arg(call)
            .env("RUST_LOG", "warn"),
    );
    assert!(
        ok && text.contains(&format!("{call} MPI_ERROR kept")),
        "{call} over tigon:\n{text}"
    );
}

/// The program's expectations are Open MPI's own PML's: every call keeps the marker there.
#[test]
fn ob1_keeps_mpi_error_in_every_call() {
    let prog = program("status_error");
    for call in CALLS {
        let (ok, text) = output(
            Command::new("mpirun")
                .args(["--allow-run-as-root", "--oversubscribe", "-np", "2"])
                .args(["--mca", "pml", "ob1", "--mca", "btl", "self,vader"])
                .arg(&prog)
                .arg(call),
        );
        assert!(
            ok && text.contains(&format!("{call} MPI_ERROR kept")),
            "{call} over ob1:\n{text}"
        );
    }
}

#[test]
fn probe_keeps_mpi_error() {
    over_tigon("Probe");
}

#[test]
fn iprobe_keeps_mpi_error() {
    over_tigon("Iprobe");
}

#[test]
fn mprobe_keeps_mpi_error() {
    over_tigon("Mprobe");
}

#[test]
fn improbe_keeps_mpi_error() {
    over_tigon("Improbe");
}

#[test]
fn mrecv_keeps_mpi_error() {
    over_tigon("Mrecv");
}

#[test]
fn imrecv_then_wait_keeps_mpi_error() {
    over_tigon("Imrecv");
}

#[test]
fn recv_keeps_mpi_error() {
    over_tigon("Recv");
}

#[test]
fn wait_keeps_mpi_error() {
    over_tigon("Wait");
}

#[test]
fn test_keeps_mpi_error() {
    over_tigon("Test");
}

#[test]
fn sendrecv_keeps_mpi_error() {
    over_tigon("Sendrecv");
}
