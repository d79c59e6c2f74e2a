//! The guide's jobs run: `scripts/guide-local.sh` (printed verbatim at the end of the
//! README's guide) on a staged install — two nodes (namespaces joined by a veth pair), each
//! prepared by the pre-start script and its agent started from its configuration as the
//! systemd unit does, `tigon doctor` on each, NetPIPE across them with the MTL, `tigon stats`
//! whose counters the guide's table names; and docker/compose.yaml's job `mpirun` against two
//! local agents. These start agents on lcores 0 and 1: the `dpdk-pinned` nextest group.
//!
//! Installs go to a temporary `--destdir`, never to the real /usr/local or /etc.

use super::compose::{compose, strings, volumes};
use super::files::{OMPI_DIR, read, repo};
use super::job::Job;
use super::readme::{guide, spans};
use super::staged::{Staged, built_mtl};
use crate::common::{TestDir, memif_pair};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

#[test]
fn guide_local_two_agents_one_job() {
    let staged = Staged::new("guide-run");
    let log = staged.dir.join("guide-local.log");
    let mut cmd = Command::new("bash");
    cmd.arg(repo("scripts/guide-local.sh"))
        .env("TIGON_PREFIX", staged.path("/usr/local"))
        .env("TIGON_MTL_DIR", staged.path(OMPI_DIR));
    let mut job = Job::spawn(cmd, log);
    let st = job.wait(Duration::from_secs(480), String::new);
    let out = job.output();
    println!("{out}");
    assert!(st.success(), "scripts/guide-local.sh failed ({st})");

    // Each node's doctor passed, the job ran to its largest message, the script finished.
    assert_eq!(
        out.matches("this node can run tigon (").count(),
        2,
        "doctor on each node"
    );
    assert!(
        out.lines()
            .any(|l| l.contains(" 1048576 bytes ") && l.contains("Mbps")),
        "NetPIPE reached 1 MiB"
    );
    assert!(out.ends_with("== guide-local: done\n"));

    // Both agents' stats: the job's traffic, nothing failed; and every counter the guide's
    // table explains exists.
    let stats = |n: u32| -> Value {
        let head = format!("== node{n}: tigon stats\n");
        let from = &out[out.find(&head).expect("stats printed") + head.len()..];
        let end = from.find("\n== ").map_or(from.len(), |e| e + 1);
        serde_json::from_str(&from[..end]).expect("tigon stats prints JSON")
    };
    let g = guide();
    let table = &g[g.find("### 6.").expect("section 6: tigon stats")..];
    for n in [1, 2] {
        let s = stats(n);
        assert_eq!(s["messages"]["failed"], 0, "node{n}: {s}");
        assert_eq!(s["peers"], 1, "node{n}: {s}");
        assert!(
            s["messages"]["rendezvous"].as_u64() > Some(0),
            "node{n}: {s}"
        );
        assert!(s["frames"]["rx"].as_u64() > Some(0), "node{n}: {s}");
        for row in table.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = row.split('|').collect();
            let mut prefix = String::new();
            let mut names: Vec<String> = Vec::new();
            for c in spans(cells[1]) {
                let full = if let Some(rest) = c.strip_prefix('.') {
                    format!("{prefix}.{rest}")
                } else {
                    prefix = c.split('.').next().unwrap_or("").to_string();
                    c.trim_end_matches(".*").to_string()
                };
                names.push(full);
            }
            if cells[1].contains("`drops.*`") {
                // The meaning column names the kinds of drops.
                names.extend(
                    spans(cells[2])
                        .into_iter()
                        .filter(|w| w.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
                        .map(|w| format!("drops.{w}")),
                );
            }
            for name in names {
                let ptr = format!("/{}", name.replace('.', "/"));
                assert!(
                    s.pointer(&ptr).is_some(),
                    "the guide's stats table names `{name}`, which tigon stats does not print: {s}"
                );
            }
        }
    }

    // Nothing left behind: the namespaces and the script's scratch directory are gone.
    let first = out.lines().next().expect("output");
    let ns: Vec<&str> = first
        .split("namespaces ")
        .nth(1)
        .and_then(|r| r.split(", joined").next())
        .expect("the namespaces line")
        .split_whitespace()
        .collect();
    let list = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns");
    let list = String::from_utf8_lossy(&list.stdout);
    for n in ns {
        assert!(
            !list.lines().any(|l| l.split_whitespace().next() == Some(n)),
            "namespace {n} left behind"
        );
    }
    let work = out
        .split("--config ")
        .nth(1)
        .and_then(|r| r.split("/node1/").next())
        .expect("the script's scratch directory");
    assert!(!Path::new(work).exists(), "{work} left behind");
}

#[test]
fn compose_job_runs_against_two_local_agents() {
    let c = compose();
    let job = &c["services"]["job"];
    let args = [strings(&job["entrypoint"]), strings(&job["command"])].concat();
    let dir = TestDir::new("guide-compose");
    let (a, b) = memif_pair(&dir, &[]);
    // The job's command line, with the node containers' sockets (in the job's volumes) and
    // its output file moved here; the component is not installed in Open MPI's directory
    // here, so mpirun is told where it is.
    let comp = dir.join("ompi");
    std::fs::create_dir_all(&comp).expect("mkdir");
    std::fs::copy(built_mtl(), comp.join("mca_mtl_tigon.so")).expect("copy");
    std::fs::copy(
        repo("ompi-mtl/help-mtl-tigon.txt"),
        comp.join("help-mtl-tigon.txt"),
    )
    .expect("copy");
    let vols = volumes(job);
    let out_file = dir.join("np.out");
    let mut argv: Vec<String> = Vec::new();
    for arg in &args {
        let mut arg = arg.clone();
        for (at, vol) in &vols {
            let agent = if vol.starts_with("node1") { &a } else { &b };
            let sock = agent.socket.to_str().expect("utf-8");
            arg = arg.replace(&format!("{at}/agent.sock"), sock);
        }
        if arg.starts_with("/results/") {
            arg = out_file.display().to_string();
        }
        argv.push(arg);
        if argv.len() == 1 {
            argv.extend([
                "--mca".into(),
                "mca_base_component_path".into(),
                format!("{}:{OMPI_DIR}", comp.display()),
            ]);
        }
    }
    assert!(
        !argv.iter().any(|x| x.contains("/nodes/")),
        "every socket moved: {argv:?}"
    );
    println!("$ {}", argv.join(" "));
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]).current_dir(&dir.path);
    let mut job = Job::spawn(cmd, dir.join("job.log"));
    let st = job.wait(Duration::from_secs(420), || {
        format!(
            "agent a: {:?}\nagent b: {:?}",
            tigon_client::agent_stats(&a.socket),
            tigon_client::agent_stats(&b.socket)
        )
    });
    let out = job.output();
    println!("{out}");
    assert!(
        st.success(),
        "the compose job's mpirun failed ({st})\nagent a:\n{}\nagent b:\n{}",
        a.log_tail(),
        b.log_tail()
    );
    let np = read(&out_file);
    assert!(
        np.lines()
            .any(|l| l.split_whitespace().next() == Some("1048576")),
        "NetPIPE's output reaches 1 MiB:\n{np}"
    );
    for x in [&a, &b] {
        let s = x.stats();
        assert_eq!(s["messages"]["failed"], 0, "{s}");
        assert!(s["messages"]["rendezvous"].as_u64() > Some(0), "{s}");
    }
}
