//! Building the benchmark program and running it under mpirun.

use super::options::Transport;
use super::record::{Record, parse_line};
use crate::report;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The benchmark program's sources (`bench/mpi/`): the binary carries them so a run needs no
/// source tree.
pub const SOURCES: [(&str, &str); 8] = [
    ("bench.h", include_str!("../../mpi/bench.h")),
    ("main.c", include_str!("../../mpi/main.c")),
    ("common.c", include_str!("../../mpi/common.c")),
    ("logp.c", include_str!("../../mpi/logp.c")),
    ("bandwidth.c", include_str!("../../mpi/bandwidth.c")),
    ("availability.c", include_str!("../../mpi/availability.c")),
    ("dbuf.c", include_str!("../../mpi/dbuf.c")),
    ("emp.c", include_str!("../../mpi/emp.c")),
];

/// Writes the program's sources under `dir`/tigon_bench_mpi_src and builds
/// `dir`/tigon_bench_mpi with `mpicc -O2` when a source changed or the binary is missing;
/// returns the binary.
pub fn compile(dir: &Path) -> Result<PathBuf, String> {
    let src = dir.join("tigon_bench_mpi_src");
    std::fs::create_dir_all(&src).map_err(|e| format!("{}: {e}", src.display()))?;
    let bin = dir.join("tigon_bench_mpi");
    let mut changed = !bin.exists();
    for (name, text) in SOURCES {
        let path = src.join(name);
        if std::fs::read_to_string(&path).is_ok_and(|s| s == text) {
            continue;
        }
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        changed = true;
    }
    if !changed {
        return Ok(bin);
    }
    let out = Command::new("mpicc")
        .args(["-O2", "-Wall", "-o"])
        .arg(&bin)
        .args(
            SOURCES
                .iter()
                .filter(|(name, _)| name.ends_with(".c"))
                .map(|(name, _)| src.join(name)),
        )
        .output()
        .map_err(|e| format!("mpicc: {e} (install libopenmpi-dev: `make setup`)"))?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&bin);
        return Err(format!(
            "mpicc in {} failed:\n{}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(bin)
}

/// `mpirun` for the ob1 transports: two ranks on this host.
pub fn ob1_command(t: Transport, program: &[String]) -> Command {
    let mut c = Command::new("mpirun");
    c.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "--bind-to",
        "none",
        "-np",
        "2",
        "--mca",
        "pml",
        "ob1",
    ]);
    match t {
        Transport::Vader => c.args(["--mca", "btl", "vader,self"]),
        _ => c.args([
            "--mca",
            "btl",
            "tcp,self",
            "--mca",
            "btl_tcp_if_include",
            "lo",
        ]),
    };
    c.args(program);
    c
}

/// A command line as one shell-like string (for the JSON and "reproduce" lines).
pub fn command_line(c: &Command) -> String {
    std::iter::once(c.get_program())
        .chain(c.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `cmd` (an mpirun of the program), showing its progress on stderr; gives up when the
/// program prints nothing for `stall`. Returns the records, and the error if it failed.
pub fn run_program(
    label: &str,
    mut cmd: Command,
    stall: Duration,
) -> (Vec<Record>, Option<String>, f64) {
    let t0 = Instant::now();
    let mut child = match cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            return (
                Vec::new(),
                Some(format!("mpirun: {e} (install openmpi-bin)")),
                0.0,
            );
        }
    };
    let stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let (mut recs, mut other) = (Vec::new(), Vec::new());
    let mut last = Instant::now();
    let mut what = String::from("starting");
    let mut error = None;
    loop {
        match rx.recv_timeout(Duration::from_millis(250)) {
            Ok(line) => {
                last = Instant::now();
                match parse_line(&line) {
                    Some(Record::Progress { msg }) => what = msg,
                    Some(Record::Error { msg }) => error = Some(msg),
                    Some(r) => recs.push(r),
                    None if !line.trim().is_empty() => other.push(line),
                    None => {}
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if last.elapsed() > stall {
                    let _ = child.kill();
                    error = Some(format!(
                        "no progress for {} s during {what}: killed",
                        stall.as_secs()
                    ));
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        report::progress(&format!(
            "bench mpi: {label} [{:.0} s] {what}",
            t0.elapsed().as_secs_f64()
        ));
    }
    let status = child.wait();
    let stderr = err_thread.join().unwrap_or_default();
    let done = recs.iter().any(|r| matches!(r, Record::Done {}));
    if error.is_none() && !done {
        let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        error = Some(format!(
            "mpirun ended ({}) before the program finished; last output:\n{}{}",
            status.map_or("?".into(), |s| s.to_string()),
            other
                .iter()
                .rev()
                .take(5)
                .rev()
                .map(|l| format!("{l}\n"))
                .collect::<String>(),
            tail.join("\n")
        ));
    }
    report::progress_done();
    (recs, error, t0.elapsed().as_secs_f64())
}
