//! `tigon demo`: NetPIPE (`NPopenmpi`) between two emulated nodes over tigon, and over Open
//! MPI's TCP path, side by side: latency at 1, 8 and 64 B and bandwidth at 64 KiB, 1 MiB and
//! 4 MiB.
//!
//! `tigon demo --ports`: the port-level demo. Two processes exchange a checked stream of
//! frames of assorted sizes over a net_memif pair, then two processes in two network
//! namespaces do the same over a veth pair through net_af_packet; prints frames/s, Gbit/s
//! and lost frames for each fabric.

use std::time::Duration;

use clap::Args;
use tigon_pmd::JUMBO_DATA_ROOM;
use tigon_pmd::frames::{RecvReport, SendReport};
use tigon_pmd::testbed::{Endpoint, Stream, VethPair, unique_tag};

#[derive(Args)]
pub struct DemoArgs {
    /// The port-level demo (frames over memif and af_packet) instead of NetPIPE.
    #[arg(long)]
    pub ports: bool,
    /// NetPIPE: largest message (bytes).
    #[arg(long, default_value_t = 4 << 20)]
    pub upper: usize,
    /// NetPIPE: fabric between the two emulated nodes.
    #[arg(long, value_enum, default_value_t = crate::fabric::FabricKind::Memif)]
    pub fabric: crate::fabric::FabricKind,
    /// Frames per fabric.
    #[arg(long, default_value_t = 200_000)]
    pub frames: u64,
    /// Smallest frame (bytes, >= 60).
    #[arg(long, default_value_t = 60)]
    pub min: usize,
    /// NetPIPE: the agents' encapsulation (raw Ethernet or UDP/IPv4).
    #[arg(long, value_enum, default_value_t = crate::fabric::WireKind::Ether)]
    pub wire: crate::fabric::WireKind,
    /// Largest frame (bytes, <= 9000).
    #[arg(long, default_value_t = 9000)]
    pub max: usize,
}

/// Arguments both ends of a stream share.
fn stream_args(a: &DemoArgs, dev: &str, lcore: &str, prefix: &str) -> Vec<String> {
    [
        "--dev",
        dev,
        "--lcore",
        lcore,
        "--prefix",
        prefix,
        "--count",
        &a.frames.to_string(),
        "--min",
        &a.min.to_string(),
        "--max",
        &a.max.to_string(),
        // Single-segment jumbo mbufs on both ends: what a tuned user would run.
        "--data-room",
        &JUMBO_DATA_ROOM.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn stream(recv: Endpoint, send: Endpoint) -> Result<Stream, String> {
    let program = std::env::current_exe().map_err(|e| format!("locating tigon: {e}"))?;
    Ok(Stream {
        program,
        prefix_args: vec!["frames".into()],
        receiver: recv,
        sender: send,
        timeout: Duration::from_secs(600),
    })
}

fn with_role(role: &str, mut rest: Vec<String>) -> Vec<String> {
    rest.insert(0, role.into());
    rest
}

fn memif(a: &DemoArgs, tag: &str) -> Result<(RecvReport, SendReport), String> {
    let sock = format!("/tmp/tigon-demo-{tag}.sock");
    let dev = |role: &str| format!("net_memif0,role={role},socket={sock}");
    let s = stream(
        Endpoint {
            netns: None,
            args: with_role(
                "recv",
                stream_args(a, &dev("server"), "0", &format!("demo-mr-{tag}")),
            ),
        },
        Endpoint {
            netns: None,
            args: with_role(
                "send",
                stream_args(a, &dev("client"), "1", &format!("demo-ms-{tag}")),
            ),
        },
    )?;
    let r = s.run_until(&tigon_shm::signals::terminating);
    let _ = std::fs::remove_file(&sock);
    r
}

fn af_packet(a: &DemoArgs, tag: &str) -> Result<(RecvReport, SendReport), String> {
    let veth = VethPair::new(tag, 9000)?;
    // 9216-byte ring frames hold a 9014-byte frame plus the TPACKET header.
    let dev =
        |ifc: &str| format!("net_af_packet0,iface={ifc},framesz=9216,blocksz=36864,framecnt=2048");
    let s = stream(
        Endpoint {
            netns: Some(veth.ns_b.name().into()),
            args: with_role(
                "recv",
                stream_args(a, &dev(&veth.b), "0", &format!("demo-ar-{tag}")),
            ),
        },
        Endpoint {
            netns: Some(veth.ns_a.name().into()),
            args: with_role(
                "send",
                stream_args(a, &dev(&veth.a), "1", &format!("demo-as-{tag}")),
            ),
        },
    )?;
    s.run_until(&tigon_shm::signals::terminating)
}

fn row(name: &str, r: &Result<(RecvReport, SendReport), String>) {
    match r {
        Ok((got, sent)) => println!(
            "{name:<10} {:>10} {:>10} {:>8} {:>9} {:>12.0} {:>8.2}",
            sent.sent,
            got.received,
            got.lost,
            got.corrupted,
            got.frames_per_sec(),
            got.gbit_per_sec()
        ),
        Err(e) => println!("{name:<10} failed: {e}"),
    }
}

/// Runs the demo; returns the exit code (130 after Ctrl-C / SIGTERM, with everything it
/// started stopped and its scratch removed).
pub fn run(a: DemoArgs) -> Result<i32, String> {
    if a.min < tigon_pmd::frames::MIN_FRAME || a.max > 9000 || a.min > a.max {
        return Err(format!(
            "--min {} --max {}: frame sizes must satisfy 60 <= min <= max <= 9000",
            a.min, a.max
        ));
    }
    crate::run::launcher_setup()?;
    let r = if a.ports {
        ports_demo(&a)
    } else {
        netpipe_demo(&a)
    };
    if tigon_shm::signals::terminating() {
        eprintln!("tigon demo: interrupted");
        return Ok(crate::run::INTERRUPTED);
    }
    r.map(|()| 0)
}

fn ports_demo(a: &DemoArgs) -> Result<(), String> {
    let tag = unique_tag();
    println!(
        "tigon demo: {} frames of {}..={} B per fabric, checked byte by byte (2 processes \
         each, lcores 0 and 1)",
        a.frames, a.min, a.max
    );
    eprintln!("memif: two processes, one memif socket ...");
    let m = memif(a, &tag);
    eprintln!("af_packet: two network namespaces joined by a veth pair (MTU 9000) ...");
    if tigon_shm::signals::terminating() {
        return Err("interrupted".into());
    }
    let p = af_packet(a, &tag);
    println!();
    println!(
        "{:<10} {:>10} {:>10} {:>8} {:>9} {:>12} {:>8}",
        "fabric", "sent", "received", "lost", "corrupt", "frames/s", "Gbit/s"
    );
    row("memif", &m);
    row("af_packet", &p);
    println!(
        "(Gbit/s counts frame bytes incl. the Ethernet header; lost = sent - received; \
         af_packet may lose frames in the kernel when the receiver's ring is full)"
    );
    for (name, r) in [("memif", &m), ("af_packet", &p)] {
        match r {
            Err(e) => return Err(format!("{name}: {e}")),
            Ok((got, _)) if got.corrupted > 0 || got.duplicates > 0 => {
                return Err(format!("{name}: {} corrupted frames", got.corrupted));
            }
            Ok(_) => {}
        }
    }
    Ok(())
}

/// One NetPIPE result line: message size, Mbit/s, one-way time in seconds.
#[derive(Debug, Clone, Copy)]
pub struct NpPoint {
    pub bytes: usize,
    pub mbps: f64,
    pub secs: f64,
}

/// Reads NetPIPE's `-o` output.
pub fn parse_netpipe(text: &str) -> Vec<NpPoint> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some(NpPoint {
                bytes: f.next()?.parse().ok()?,
                mbps: f.next()?.parse().ok()?,
                secs: f.next()?.parse().ok()?,
            })
        })
        .collect()
}

fn at(points: &[NpPoint], bytes: usize) -> Option<NpPoint> {
    points.iter().copied().find(|p| p.bytes == bytes)
}

/// Runs one NetPIPE job (its output into `out`, mpirun's into `out`.log), as `tigon run`
/// waits for its jobs: stopped on Ctrl-C / SIGTERM, no rank left behind.
fn run_netpipe(
    mut cmd: std::process::Command,
    out: &std::path::Path,
    what: &str,
    keep: &[u32],
) -> Result<Vec<NpPoint>, String> {
    eprintln!("{what} ...");
    let log = out.with_extension("log");
    let f = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let f2 = f.try_clone().map_err(|e| e.to_string())?;
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(f)
        .stderr(f2)
        .spawn()
        .map_err(|e| format!("{what}: {e} (install openmpi-bin, netpipe-openmpi)"))?;
    let st = crate::run::wait_job(&mut child, keep)?;
    if tigon_shm::signals::terminating() {
        return Err(format!("{what}: interrupted"));
    }
    if !st.success() {
        return Err(format!(
            "{what} failed ({st}):\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        ));
    }
    let text =
        std::fs::read_to_string(out).map_err(|e| format!("{what}: {}: {e}", out.display()))?;
    let pts = parse_netpipe(&text);
    if pts.is_empty() {
        return Err(format!("{what}: NetPIPE wrote no results"));
    }
    Ok(pts)
}

fn netpipe_demo(a: &DemoArgs) -> Result<(), String> {
    use crate::fabric::{Cluster, ClusterOpts};
    let np_args = |out: &std::path::Path| -> Vec<String> {
        ["NPopenmpi", "-u", &a.upper.to_string(), "-p", "0", "-o"]
            .iter()
            .map(|s| s.to_string())
            .chain([out.display().to_string()])
            .collect()
    };
    println!(
        "tigon demo: NetPIPE between two emulated nodes ({:?}), over tigon and over Open MPI's TCP path",
        a.fabric
    );
    let opts = ClusterOpts {
        nodes: 2,
        fabric: a.fabric,
        loss: 0,
        dma: false,
        mtu: 9000,
        wire: a.wire,
        agent_args: Vec::new(),
        layout: crate::fabric::LayoutKind::Auto,
    };
    let cluster = Cluster::start(&opts)?;
    let t_out = cluster.dir.join("np-tigon.out");
    let cmd = crate::run::mpirun_command(&cluster, 2, &[], &np_args(&t_out))?;
    let keep = cluster.agent_pids();
    let tigon = run_netpipe(cmd, &t_out, "NetPIPE over tigon (pml cm, mtl tigon)", &keep);
    if tigon_shm::signals::terminating() {
        return Err("interrupted".into());
    }
    let stats = tigon_client::agent_stats(&cluster.nodes[0].socket).ok();
    let tcp_out = cluster.dir.join("np-tcp.out");
    let mut cmd = std::process::Command::new("mpirun");
    cmd.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "--bind-to",
        "none",
        "-np",
        "2",
    ])
    .args([
        "--mca",
        "pml",
        "ob1",
        "--mca",
        "btl",
        "self,tcp",
        "--mca",
        "btl_tcp_if_include",
        "lo",
    ])
    .args(["--mca", "mpi_yield_when_idle", "1"])
    // Each rank dies with mpirun, as under `tigon run`.
    .arg(std::env::current_exe().map_err(|e| format!("locating tigon: {e}"))?)
    .args([
        "rank-exec",
        "--owner",
        &std::process::id().to_string(),
        "--",
    ])
    .args(np_args(&tcp_out));
    tigon_shm::process::die_with_parent(&mut cmd, libc::SIGTERM);
    let tcp = run_netpipe(cmd, &tcp_out, "NetPIPE over ob1/tcp (loopback)", &keep);
    let (tigon, tcp) = (tigon?, tcp?);
    drop(cluster);
    println!();
    println!(
        "{:<22} {:>14} {:>14} {:>8}",
        "", "tigon", "ob1/tcp", "ratio"
    );
    for b in [1usize, 8, 64] {
        let (x, y) = (at(&tigon, b), at(&tcp, b));
        let f = |p: Option<NpPoint>| p.map_or("-".into(), |p| format!("{:.2} us", p.secs * 1e6));
        let r = match (x, y) {
            (Some(x), Some(y)) => format!("{:.2}", x.secs / y.secs),
            _ => "-".into(),
        };
        println!(
            "{:<22} {:>14} {:>14} {:>8}",
            format!("latency {b} B"),
            f(x),
            f(y),
            r
        );
    }
    for b in [64 << 10, 1 << 20, 4 << 20] {
        if b > a.upper {
            continue;
        }
        let (x, y) = (at(&tigon, b), at(&tcp, b));
        let f = |p: Option<NpPoint>| p.map_or("-".into(), |p| format!("{:.0} Mb/s", p.mbps));
        let r = match (x, y) {
            (Some(x), Some(y)) => format!("{:.2}", x.mbps / y.mbps),
            _ => "-".into(),
        };
        let label = if b >= 1 << 20 {
            format!("bandwidth {} MiB", b >> 20)
        } else {
            format!("bandwidth {} KiB", b >> 10)
        };
        println!("{:<22} {:>14} {:>14} {:>8}", label, f(x), f(y), r);
    }
    println!(
        "(latency: NetPIPE's one-way time, ratio < 1 is better for tigon; bandwidth: ratio > 1 is better)"
    );
    if let Some(s) = stats {
        println!(
            "agent 0: {} frames sent, {} received, {} retransmits",
            s["frames"]["tx"], s["frames"]["rx"], s["retransmits"]
        );
    }
    println!(
        "reproduce: make demo   (or: tigon run -np 2 -- NPopenmpi -u {} -p 0)",
        a.upper
    );
    Ok(())
}
