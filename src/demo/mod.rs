//! `tigon demo`: NetPIPE (`NPopenmpi`) between two emulated nodes over tigon, and over Open
//! MPI's TCP path (loopback, and between two network namespaces over veth) and vader (the
//! one-host bound), interleaved runs side by side with medians and ratios ([`netpipe`]).
//!
//! `tigon demo --ports`: the port-level demo. Two processes exchange a checked stream of
//! frames of assorted sizes over a net_memif pair, then two processes in two network
//! namespaces do the same over a veth pair through net_af_packet; prints frames/s, Gbit/s
//! and lost frames for each fabric.

mod netpipe;
mod peers;

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
    /// NetPIPE: the agents' encapsulation (raw Ethernet or UDP/IPv4; default: ether, udp on
    /// the routed fabric), or `both`: tigon over each in every round, side by side with UDP's
    /// ratio to raw Ethernet.
    #[arg(long, value_enum)]
    pub wire: Option<DemoWire>,
    /// Largest frame (bytes, <= 9000).
    #[arg(long, default_value_t = 9000)]
    pub max: usize,
    /// NetPIPE: runs of each transport, interleaved (tigon, tcp loopback, tcp veth, vader,
    /// then again); the table shows medians.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub runs: u32,
    /// NetPIPE: where the emulated nodes' engines run (see `tigon run --layout`).
    #[arg(long, value_enum, default_value_t = crate::fabric::LayoutKind::Auto)]
    pub layout: crate::fabric::LayoutKind,
    /// NetPIPE over memif: the client node's port in memif's zero-copy mode (see `tigon run
    /// --memif-zero-copy`).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub memif_zero_copy: bool,
}

/// The encapsulations the NetPIPE demo runs tigon over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DemoWire {
    Ether,
    Udp,
    /// Both, interleaved in every round (raw Ethernet first).
    Both,
}

impl DemoWire {
    pub fn kinds(self) -> Vec<crate::fabric::WireKind> {
        use crate::fabric::WireKind;
        match self {
            DemoWire::Ether => vec![WireKind::Ether],
            DemoWire::Udp => vec![WireKind::Udp],
            DemoWire::Both => vec![WireKind::Ether, WireKind::Udp],
        }
    }
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
        netpipe::demo(&a)
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
