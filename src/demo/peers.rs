//! The peers tigon is compared with in the NetPIPE demo, as `mpirun` commands: Open MPI's
//! TCP path on loopback, its TCP path between two network namespaces joined by a veth pair
//! (one rank in each, as two hosts would run it), and vader (shared memory: the one-host
//! bound). Every rank is started through `tigon rank-exec`, so none outlives its mpirun.

use std::path::{Path, PathBuf};
use std::process::Command;
use tigon_bench::mpi::Transport;
use tigon_pmd::testbed::{VethPair, unique_tag};

/// The address of each end of the TCP veth pair (inside its own namespace).
const VETH_ADDRS: [&str; 2] = ["10.72.0.1", "10.72.0.2"];
const VETH_SUBNET: &str = "10.72.0.0/24";

/// Open MPI's options for ob1 between the namespaces, yielding when idle as tigon's ranks do.
fn ob1(cmd: &mut Command, btl: &str) {
    cmd.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "--bind-to",
        "none",
        "-np",
        "2",
    ])
    .args(["--mca", "pml", "ob1", "--mca", "btl", btl])
    .args(["--mca", "mpi_yield_when_idle", "1"]);
}

/// `tigon rank-exec --owner PID --` before the program: each rank dies with its mpirun.
fn rank_exec(cmd: &mut Command) -> Result<(), String> {
    cmd.arg(std::env::current_exe().map_err(|e| format!("locating tigon: {e}"))?)
        .args([
            "rank-exec",
            "--owner",
            &std::process::id().to_string(),
            "--",
        ]);
    Ok(())
}

/// Open MPI's session directory under `dir` (the demo's scratch directory, removed with
/// it): mpirun leaves it behind when a run is interrupted, as `tigon run` does (run.rs).
fn session_dir(cmd: &mut Command, dir: &Path) {
    cmd.args(["--mca", "orte_tmpdir_base"]).arg(dir);
}

/// ob1/tcp between two ranks on loopback (the benchmarks' command), yielding when idle.
pub fn tcp_loopback(program: &[String], dir: &Path) -> Result<Command, String> {
    ob1_local(Transport::Tcp, program, dir)
}

/// ob1/vader: two ranks over shared memory (the benchmarks' command), yielding when idle.
pub fn vader(program: &[String], dir: &Path) -> Result<Command, String> {
    ob1_local(Transport::Vader, program, dir)
}

fn ob1_local(t: Transport, program: &[String], dir: &Path) -> Result<Command, String> {
    let mut cmd = tigon_bench::mpi::ob1_command(t, &[]);
    cmd.args(["--mca", "mpi_yield_when_idle", "1"]);
    session_dir(&mut cmd, dir);
    rank_exec(&mut cmd)?;
    cmd.args(program);
    tigon_shm::process::die_with_parent(&mut cmd, libc::SIGTERM);
    Ok(cmd)
}

/// Two network namespaces joined by veth (MTU 9000, as tigon's fabric), each end with an
/// address; mpirun runs in the first and starts the second rank's daemon in the other
/// through an rsh agent that enters it. Torn down on drop.
pub struct TcpVeth {
    pair: VethPair,
    agent: PathBuf,
    dir: PathBuf,
}

impl TcpVeth {
    /// Sets the pair up; the rsh agent script goes into `dir`.
    pub fn new(dir: &Path) -> Result<TcpVeth, String> {
        let pair = VethPair::new(&unique_tag(), 9000)?;
        for (ns, ifc, addr) in [
            (pair.ns_a.name(), &pair.a, VETH_ADDRS[0]),
            (pair.ns_b.name(), &pair.b, VETH_ADDRS[1]),
        ] {
            let st = Command::new("ip")
                .args(["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", ifc])
                .status()
                .map_err(|e| format!("ip: {e}"))?;
            if !st.success() {
                return Err(format!("ip -n {ns} addr add {addr}/24 dev {ifc} failed"));
            }
        }
        // Open MPI's rsh launcher runs `AGENT HOST COMMAND...` as it would run ssh.
        let agent = dir.join("tcp-veth-rsh.sh");
        let script = format!(
            "#!/bin/sh\nhost=$1; shift\ncase \"$host\" in\n  {a}) ns={na};;\n  {b}) ns={nb};;\n  \
             *) echo \"tcp-veth-rsh: no namespace for $host\" >&2; exit 1;;\nesac\n\
             exec ip netns exec \"$ns\" sh -c \"$*\"\n",
            a = VETH_ADDRS[0],
            b = VETH_ADDRS[1],
            na = pair.ns_a.name(),
            nb = pair.ns_b.name(),
        );
        std::fs::write(&agent, script).map_err(|e| format!("{}: {e}", agent.display()))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| e.to_string())?;
        Ok(TcpVeth {
            pair,
            agent,
            dir: dir.to_path_buf(),
        })
    }

    /// ob1/tcp with one rank in each namespace.
    pub fn command(&self, program: &[String]) -> Result<Command, String> {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.pair.ns_a.name(), "mpirun"]);
        ob1(&mut cmd, "self,tcp");
        cmd.args(["--host", &VETH_ADDRS.join(",")])
            .args(["--mca", "plm_rsh_agent"])
            .arg(&self.agent)
            .args(["--mca", "oob_tcp_if_include", VETH_SUBNET])
            .args(["--mca", "btl_tcp_if_include", VETH_SUBNET]);
        session_dir(&mut cmd, &self.dir);
        rank_exec(&mut cmd)?;
        cmd.args(program);
        // `ip netns exec` becomes mpirun (exec), which keeps the parent-death signal.
        tigon_shm::process::die_with_parent(&mut cmd, libc::SIGTERM);
        Ok(cmd)
    }
}
