//! `tigon soak` (`make soak`): two emulated nodes on a veth wire that drops 5 % of the frames,
//! several MPI jobs of the stress program (`tests/mpi/stress.c`, carried in the binary) across
//! them at once, and every 30 s one rank of one job SIGKILLed: that job ends, a new one takes
//! its place, and the others must keep running. At the end it prints the messages the jobs
//! that ran to completion sent and received, the lost ones (must be 0), the agents' memory
//! (RSS) at the start, after warm-up and at the end (must not grow past warm-up), and exits
//! non-zero on any loss, damaged message, failed job or growth.

use crate::fabric::{Cluster, ClusterOpts, FabricKind};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct SoakArgs {
    /// How long, in seconds (at least 30).
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(30..))]
    pub seconds: u64,
    /// Percent of the frames the wire drops, 0 to 100.
    #[arg(long, default_value_t = 5, value_parser = crate::cli::parse_percent)]
    pub loss: u32,
    /// Jobs running at once (2 ranks each, one per node).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(2..=16))]
    pub jobs: u64,
    /// Seconds between two rank kills (at least 5).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(5..))]
    pub kill_every: u64,
    /// How long each job runs if no kill ends it, in seconds (at least 5): jobs end and start
    /// all the time, by completing and by losing a rank.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(5..))]
    pub job_seconds: u64,
    /// RSS growth of an agent after warm-up that counts as a leak, in percent.
    #[arg(long, default_value_t = 10, value_parser = crate::cli::parse_percent)]
    pub max_growth: u32,
}

/// The stress program's source, compiled with mpicc where the run needs it.
const STRESS_C: &str = include_str!("../tests/mpi/stress.c");

/// How long a job may overrun its end before it counts as hung (a lost message never lets
/// its round finish).
const GRACE: Duration = Duration::from_secs(120);

/// One MPI job of the stress program.
struct Job {
    id: usize,
    mpirun: Child,
    log: PathBuf,
    ends_at: Instant,
    killed: bool,
}

/// What the jobs reported, and what went wrong.
#[derive(Debug, Default, PartialEq)]
pub struct Tally {
    pub completed: u64,
    pub killed: u64,
    pub failed: Vec<String>,
    /// Messages of the jobs that ran to completion.
    pub sent: u64,
    pub received: u64,
    pub bad: u64,
    /// Messages the jobs that lost a rank received before the kill (intact, damaged).
    pub killed_received: u64,
    pub killed_bad: u64,
}

/// One line of the stress program: (rank, final?, sent, received, bad).
fn report_line(l: &str) -> Option<(u32, bool, [u64; 3])> {
    let rest = l.strip_prefix("stress rank ")?;
    let (who, counts) = rest.split_once(": sent ")?;
    let (rank, progress) = match who.split_once(" at ") {
        Some((r, _)) => (r, true),
        None => (who, false),
    };
    let nums: Vec<u64> = counts
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    Some((rank.parse().ok()?, !progress, nums.try_into().ok()?))
}

/// Each rank's last report in a job's output (final or progress).
fn last_reports(text: &str) -> std::collections::BTreeMap<u32, (bool, [u64; 3])> {
    text.lines()
        .filter_map(report_line)
        .map(|(r, fin, c)| (r, (fin, c)))
        .collect()
}

impl Tally {
    /// Adds a completed job: each of its two ranks' final `stress rank R: sent S received V
    /// bad B`; an error if one is missing.
    pub fn add_completed(&mut self, text: &str) -> Result<(), String> {
        let last = last_reports(text);
        let finals: Vec<&[u64; 3]> = last.values().filter(|(f, _)| *f).map(|(_, c)| c).collect();
        if finals.len() != 2 {
            return Err(format!("{} final rank report(s), not 2", finals.len()));
        }
        for c in finals {
            self.sent += c[0];
            self.received += c[1];
            self.bad += c[2];
        }
        self.completed += 1;
        Ok(())
    }

    /// Adds a job that lost a rank to a kill: what its ranks had received by their last
    /// report (messages in flight at the kill are not losses).
    pub fn add_killed(&mut self, text: &str) {
        for (_, c) in last_reports(text).values() {
            self.killed_received += c[1];
            self.killed_bad += c[2];
        }
        self.killed += 1;
    }

    /// Messages that were sent by a completed job but not received intact by it.
    pub fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.received + self.bad)
    }
}

/// An agent's resident memory in KiB (VmRSS), 0 if unreadable.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Whether `end` KiB grew past `warm` KiB by more than `pct` percent.
pub fn grew(warm: u64, end: u64, pct: u32) -> bool {
    end * 100 > warm * (100 + pct as u64)
}

fn compile(dir: &Path) -> Result<PathBuf, String> {
    let src = dir.join("stress.c");
    let bin = dir.join("stress");
    std::fs::write(&src, STRESS_C).map_err(|e| format!("{}: {e}", src.display()))?;
    let o = std::process::Command::new("mpicc")
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .map_err(|e| format!("mpicc: {e} (apt-get install libopenmpi-dev)"))?;
    if !o.status.success() {
        return Err(format!(
            "mpicc stress.c: {}",
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    Ok(bin)
}

fn start_job(cluster: &Cluster, bin: &Path, id: usize, until: Instant) -> Result<Job, String> {
    let secs = until
        .saturating_duration_since(Instant::now())
        .as_secs_f64();
    let program = [
        bin.display().to_string(),
        format!("{secs:.1}"),
        id.to_string(),
    ];
    let mut cmd = crate::run::mpirun_command(cluster, 2, &[], &program)?;
    let log = cluster.dir.join(format!("job{id}.log"));
    let f = std::fs::File::create(&log).map_err(|e| e.to_string())?;
    let f2 = f.try_clone().map_err(|e| e.to_string())?;
    let mpirun = cmd
        .stdin(Stdio::null())
        .stdout(f)
        .stderr(f2)
        .spawn()
        .map_err(|e| format!("starting mpirun: {e}"))?;
    Ok(Job {
        id,
        mpirun,
        log,
        ends_at: until,
        killed: false,
    })
}

/// The running ranks (processes of `bin`) under `pid`.
fn ranks_of(pid: u32, bin: &Path) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        let kids: String = tasks
            .flatten()
            .map(|t| std::fs::read_to_string(t.path().join("children")).unwrap_or_default())
            .collect::<Vec<_>>()
            .join(" ");
        for k in kids
            .split_whitespace()
            .filter_map(|k| k.parse::<u32>().ok())
        {
            if std::fs::read_link(format!("/proc/{k}/exe")).is_ok_and(|e| e == bin) {
                out.push(k);
            }
            todo.push(k);
        }
    }
    out
}

pub fn run(a: SoakArgs) -> Result<i32, String> {
    crate::run::launcher_setup()?;
    let cluster = Cluster::start(&ClusterOpts {
        nodes: 2,
        fabric: FabricKind::Veth,
        loss: a.loss,
        dma: false,
        mtu: 9000,
        wire: crate::fabric::WireKind::Ether,
        agent_args: Vec::new(),
        layout: crate::fabric::LayoutKind::Auto,
        memif_zero_copy: false,
    })?;
    let bin = compile(&cluster.dir)?;
    let agents = cluster.agent_pids();
    let rss_start: Vec<u64> = agents.iter().map(|&p| rss_kib(p)).collect();
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs(a.seconds);
    // Warm-up: pools, channels and the unexpected store reach their working size.
    let warm_at = t0 + Duration::from_secs((a.seconds / 5).clamp(10, 60));
    let mut rss_warm: Option<Vec<u64>> = None;
    eprintln!(
        "tigon soak: {} s, {} jobs of 2 ranks across 2 nodes (each for up to {} s), {}% wire loss, a rank killed every {} s",
        a.seconds, a.jobs, a.job_seconds, a.loss, a.kill_every
    );
    let mut tally = Tally::default();
    let mut next_id = 0;
    let mut jobs: Vec<Job> = Vec::new();
    let mut next_kill = t0 + Duration::from_secs(a.kill_every);
    let mut victim = 0usize;
    let mut last_report = t0;
    while !tigon_shm::signals::terminating() {
        let now = Instant::now();
        // Keep `jobs` jobs running until the last minute of the soak (a job started later
        // would be too short to matter).
        let starting = now + Duration::from_secs(5) < end;
        while starting && (jobs.len() as u64) < a.jobs {
            let until = end.min(now + Duration::from_secs(a.job_seconds));
            jobs.push(start_job(&cluster, &bin, next_id, until)?);
            next_id += 1;
        }
        // Reap the jobs that ended.
        let mut i = 0;
        while i < jobs.len() {
            let st = jobs[i].mpirun.try_wait().map_err(|e| e.to_string())?;
            let hung = st.is_none() && now > jobs[i].ends_at + GRACE;
            if st.is_none() && !hung {
                i += 1;
                continue;
            }
            let mut j = jobs.swap_remove(i);
            if hung {
                let _ = j.mpirun.kill();
                let _ = j.mpirun.wait();
            }
            // Its ranks, if mpirun left any (adopted by this process); not the other jobs'.
            let mut keep = agents.clone();
            keep.extend(jobs.iter().map(|j| j.mpirun.id()));
            crate::run::reap_orphans(&keep);
            let text = std::fs::read_to_string(&j.log).unwrap_or_default();
            if j.killed {
                tally.add_killed(&text);
            } else if hung {
                tally.failed.push(format!(
                    "job {} hung {} s past its end:\n{text}",
                    j.id,
                    GRACE.as_secs()
                ));
            } else if !st.is_some_and(|s| s.success()) {
                tally
                    .failed
                    .push(format!("job {} failed ({st:?}):\n{text}", j.id));
            } else if let Err(e) = tally.add_completed(&text) {
                tally.failed.push(format!("job {}: {e}:\n{text}", j.id));
            }
        }
        // A rank killed while the others keep running.
        if now >= next_kill && now + Duration::from_secs(5) < end && !jobs.is_empty() {
            next_kill += Duration::from_secs(a.kill_every);
            let j = victim % jobs.len();
            victim += 1;
            let ranks = ranks_of(jobs[j].mpirun.id(), &bin);
            if let Some(&r) = ranks.get(victim % 2).or(ranks.first()) {
                tigon_shm::process::signal(r, libc::SIGKILL);
                jobs[j].killed = true;
                eprintln!(
                    "tigon soak: {:>4} s: killed rank pid {r} of job {}",
                    t0.elapsed().as_secs(),
                    jobs[j].id
                );
            }
        }
        if rss_warm.is_none() && now >= warm_at {
            rss_warm = Some(agents.iter().map(|&p| rss_kib(p)).collect());
        }
        if now.duration_since(last_report) >= Duration::from_secs(60) {
            last_report = now;
            eprintln!(
                "tigon soak: {:>4} s: {} jobs completed, {} killed, {} running",
                t0.elapsed().as_secs(),
                tally.completed,
                tally.killed,
                jobs.len()
            );
        }
        if jobs.is_empty() && now + Duration::from_secs(5) >= end {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let rss_end: Vec<u64> = agents.iter().map(|&p| rss_kib(p)).collect();
    let stats: Vec<String> = cluster
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let s = tigon_client::agent_stats(&n.socket).unwrap_or_default();
            format!(
                "agent {i}: {} frames sent, {} retransmits, {} dropped by the wire's loss rule",
                s["frames"]["tx"],
                s["retransmits"],
                n.dropped().unwrap_or(0)
            )
        })
        .collect();
    for j in &mut jobs {
        let _ = j.mpirun.kill();
        let _ = j.mpirun.wait();
    }
    crate::run::reap_orphans(&agents);
    drop(cluster);
    if tigon_shm::signals::terminating() {
        eprintln!("tigon soak: interrupted");
        return Ok(crate::run::INTERRUPTED);
    }
    let rss_warm = rss_warm.unwrap_or_else(|| rss_start.clone());
    let mut verdict = Vec::new();
    println!(
        "tigon soak: {} s, {}% loss: {} jobs ran to completion, {} lost a rank to a kill (as planned), {} failed",
        a.seconds,
        a.loss,
        tally.completed,
        tally.killed,
        tally.failed.len()
    );
    println!(
        "messages: sent {}, received {}, lost {}, damaged {}",
        tally.sent,
        tally.received,
        tally.lost(),
        tally.bad
    );
    println!(
        "jobs that lost a rank: {} messages received intact before the kill, {} damaged",
        tally.killed_received, tally.killed_bad
    );
    for s in &stats {
        println!("{s}");
    }
    for (i, ((s, w), e)) in rss_start.iter().zip(&rss_warm).zip(&rss_end).enumerate() {
        let grown = grew(*w, *e, a.max_growth);
        println!(
            "agent {i} RSS: start {} KiB, after warm-up {w} KiB, end {e} KiB{}",
            s,
            if grown { "  GREW" } else { "" }
        );
        if grown {
            verdict.push(format!("agent {i} grew from {w} to {e} KiB after warm-up"));
        }
    }
    if tally.lost() > 0 {
        verdict.push(format!("{} messages lost", tally.lost()));
    }
    if tally.bad + tally.killed_bad > 0 {
        verdict.push(format!("{} messages damaged", tally.bad + tally.killed_bad));
    }
    if tally.completed == 0 {
        verdict.push("no job ran to completion".into());
    }
    for f in &tally.failed {
        eprintln!("{f}");
        verdict.push(f.lines().next().unwrap_or("").to_string());
    }
    if verdict.is_empty() {
        println!("tigon soak: passed");
        Ok(0)
    } else {
        println!("tigon soak: FAILED: {}", verdict.join("; "));
        Ok(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_takes_each_ranks_last_report() {
        let mut t = Tally::default();
        let done = "noise\nstress rank 0 at 1 s: sent 8 received 8 bad 0\n\
                    stress rank 1 at 1 s: sent 8 received 8 bad 0\n\
                    stress rank 0: sent 80 received 80 bad 0\n\
                    stress rank 1: sent 80 received 80 bad 0\n";
        t.add_completed(done).unwrap();
        assert_eq!(
            (t.completed, t.sent, t.received, t.lost()),
            (1, 160, 160, 0)
        );
        let lossy =
            "stress rank 0: sent 8 received 7 bad 0\nstress rank 1: sent 8 received 6 bad 1\n";
        t.add_completed(lossy).unwrap();
        assert_eq!((t.lost(), t.bad), (2, 1));
        // A job whose rank died has no final report: not a completed job.
        let cut = "stress rank 0 at 3 s: sent 24 received 24 bad 0\nstress rank 1: sent 8 received 8 bad 0\n";
        assert!(t.add_completed(cut).is_err());
        assert_eq!(t.completed, 2);
        t.add_killed(cut);
        assert_eq!((t.killed, t.killed_received, t.killed_bad), (1, 32, 0));
    }

    #[test]
    fn growth_past_the_allowance_is_caught() {
        assert!(!grew(100_000, 110_000, 10));
        assert!(grew(100_000, 110_001, 10));
        assert!(!grew(100_000, 90_000, 10));
    }
}
