//! `tigon peer`: a small client of an agent, for tests and measurements. Two peers find each
//! other's endpoint address through files in a shared directory.

use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tigon_client::{Client, Done, RecvInto};
use tigon_engine::matching::match_bits;
use tigon_engine::{Dest, MatchSpec, SendMode};

#[derive(Args)]
pub struct PeerArgs {
    /// Agent socket.
    #[arg(long)]
    socket: PathBuf,
    /// Directory where peers publish their addresses.
    #[arg(long)]
    dir: PathBuf,
    /// This peer's name (its address goes to DIR/NAME).
    #[arg(long)]
    name: String,
    /// The other peer's name.
    #[arg(long)]
    peer: Option<String>,
    /// MPI rank this peer claims in its messages.
    #[arg(long, default_value_t = 0)]
    rank: u32,
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// Send every size to the peer and receive the peer's, checking every byte.
    Exchange {
        /// Message sizes (bytes, with k/M suffixes).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "0,1,60,1400,1500,9000,32k,33k,100k,1M,4M,16M"
        )]
        sizes: Vec<String>,
        /// Rounds over all sizes.
        #[arg(long, default_value_t = 1)]
        rounds: u32,
        /// Post every receive of a round, and wait until the peer has too, before sending:
        /// messages then arrive expected (straight into their buffers) instead of unexpected.
        #[arg(long)]
        prepost: bool,
        /// Receive each message only once `iprobe` sees it: every message is unexpected when
        /// it arrives (eager ones wait in the agent's store, rendezvous ones as an RTS).
        #[arg(long, conflicts_with = "prepost")]
        late: bool,
    },
    /// Ping-pong: the `first` peer measures half round trips and bandwidth.
    Pingpong {
        #[arg(long, value_delimiter = ',', default_value = "8,1k,64k,1M,4M")]
        sizes: Vec<String>,
        #[arg(long, default_value_t = 1000)]
        iters: u32,
        #[arg(long)]
        first: bool,
    },
    /// Attach, post a large receive, and wait forever (to be killed).
    Hold,
    /// Attach, post a 16 MiB receive, and say it polls forever without ever taking what the
    /// agent lends it (to be killed holding leases).
    HoldLent,
    /// Attach, then write garbage into the request ring: the agent must disconnect us.
    Garbage,
    /// Attach, post a receive (and a 1 MiB send to `--peer`, if given, that nobody receives),
    /// print "posted", and report how they end when the agent goes away.
    Orphan,
}

fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (n, m) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 1024),
        Some(b'M') => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    n.parse::<usize>()
        .map(|v| v * m)
        .map_err(|_| format!("bad size `{s}`"))
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed ^ 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Publishes this endpoint's address with its node's incarnation (as the MTL does through
/// the modex), and reads the peer's.
fn publish_and_find(a: &PeerArgs, me: Dest) -> Result<Option<Dest>, String> {
    std::fs::create_dir_all(&a.dir).map_err(|e| e.to_string())?;
    let tmp = a.dir.join(format!(".{}.tmp", a.name));
    std::fs::write(&tmp, me.to_string()).map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, a.dir.join(&a.name)).map_err(|e| e.to_string())?;
    let Some(p) = &a.peer else { return Ok(None) };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(s) = std::fs::read_to_string(a.dir.join(p)) {
            return s.trim().parse().map(Some);
        }
        if Instant::now() > deadline {
            return Err(format!("peer `{p}` never published its address"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

const CTX: u32 = 1;

/// An out-of-band barrier through the address directory, like the PMIx fence of
/// MPI_Finalize: publishes DIR/NAME.LABEL and waits for DIR/PEER.LABEL. A peer that has
/// finished its part must not close its endpoint while the other side still waits for the
/// acknowledgement of its last frames.
fn fence(a: &PeerArgs, label: &str) -> Result<(), String> {
    let Some(p) = &a.peer else { return Ok(()) };
    std::fs::write(a.dir.join(format!("{}.{label}", a.name)), b"").map_err(|e| e.to_string())?;
    let theirs = a.dir.join(format!("{p}.{label}"));
    let deadline = Instant::now() + Duration::from_secs(120);
    while !theirs.exists() {
        if Instant::now() > deadline {
            return Err(format!("peer `{p}` never reached `{label}`"));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

pub fn run(a: PeerArgs) -> Result<(), String> {
    let c = Client::attach(&a.socket).map_err(|e| e.to_string())?;
    let peer = publish_and_find(&a, c.dest())?;
    let err = |e: tigon_client::Error| e.to_string();
    match &a.mode {
        Mode::Exchange {
            sizes,
            rounds,
            prepost,
            late,
        } => {
            let peer = peer.ok_or("--peer is required")?;
            let sizes: Vec<usize> = sizes
                .iter()
                .map(|s| parse_size(s))
                .collect::<Result<_, _>>()?;
            let (mut sent, mut got, mut bytes) = (0u64, 0u64, 0u64);
            let t = Instant::now();
            for r in 0..*rounds {
                let mut sends = Vec::new();
                let mut recvs = Vec::new();
                let post = |i: usize, n: usize| -> Result<_, String> {
                    let tag = (r as usize * sizes.len() + i) as i32;
                    let into = if (n as u64) <= c.data_size() {
                        RecvInto::Channel(n as u64)
                    } else {
                        RecvInto::Vec(vec![0; n])
                    };
                    let req = c.irecv(MatchSpec::mpi(CTX, ANY, tag), into).map_err(err)?;
                    Ok((req, n, tag))
                };
                if *prepost {
                    for (i, &n) in sizes.iter().enumerate() {
                        recvs.push(post(i, n)?);
                    }
                    fence(&a, &format!("posted{r}"))?;
                }
                for (i, &n) in sizes.iter().enumerate() {
                    let tag = (r as usize * sizes.len() + i) as i32;
                    if !*prepost && !*late {
                        recvs.push(post(i, n)?);
                    }
                    let data = pattern(((a.rank as u64) << 40) | tag as u64, n);
                    let s = if n as u64 <= c.data_size() {
                        c.isend(
                            peer,
                            match_bits(CTX, tag),
                            a.rank,
                            &data,
                            SendMode::Standard,
                        )
                    } else {
                        c.isend_vec(peer, match_bits(CTX, tag), a.rank, data, SendMode::Standard)
                    };
                    sends.push(s.map_err(err)?);
                }
                if *late {
                    for (i, &n) in sizes.iter().enumerate() {
                        let tag = (r as usize * sizes.len() + i) as i32;
                        let deadline = Instant::now() + Duration::from_secs(120);
                        let st = loop {
                            if let Some(st) =
                                c.iprobe(MatchSpec::mpi(CTX, ANY, tag)).map_err(err)?
                            {
                                break st;
                            }
                            if Instant::now() > deadline {
                                return Err(format!("message tag {tag} never showed up"));
                            }
                            std::thread::sleep(Duration::from_micros(100));
                        };
                        if st.len as usize != n {
                            return Err(format!("probe of tag {tag}: {} B, sent {n}", st.len));
                        }
                        recvs.push(post(i, n)?);
                    }
                }
                for (r, n, tag) in recvs {
                    match c.wait(r).map_err(err)? {
                        Done::Received { status, data } => {
                            let data = data.unwrap_or_default();
                            let want = pattern(((status.source as u64) << 40) | tag as u64, n);
                            if status.len as usize != n || data != want {
                                return Err(format!(
                                    "message tag {tag} ({n} B) from rank {} arrived corrupted",
                                    status.source
                                ));
                            }
                            got += 1;
                            bytes += n as u64;
                        }
                        d => return Err(format!("unexpected completion {d:?}")),
                    }
                }
                for s in sends {
                    c.wait(s).map_err(err)?;
                    sent += 1;
                }
            }
            let seconds = t.elapsed().as_secs_f64();
            fence(&a, "done")?;
            println!(
                "{{\"sent\": {sent}, \"received\": {got}, \"bytes\": {bytes}, \"seconds\": {seconds:.3}}}"
            );
        }
        Mode::Pingpong {
            sizes,
            iters,
            first,
        } => {
            let peer = peer.ok_or("--peer is required")?;
            for s in sizes {
                let n = parse_size(s)?;
                let data = vec![7u8; n];
                let mut lat = Vec::with_capacity(*iters as usize);
                let warm = (*iters / 10).max(2);
                for i in 0..(*iters + warm) {
                    let t = Instant::now();
                    let into = || {
                        if (n as u64) <= c.data_size() {
                            RecvInto::Channel(n as u64)
                        } else {
                            RecvInto::Vec(vec![0; n])
                        }
                    };
                    if *first {
                        let sr = c
                            .isend(peer, match_bits(CTX, 1), a.rank, &data, SendMode::Standard)
                            .map_err(err)?;
                        let rr = c.irecv(MatchSpec::mpi(CTX, ANY, 1), into()).map_err(err)?;
                        c.wait(rr).map_err(err)?;
                        c.wait(sr).map_err(err)?;
                    } else {
                        let rr = c.irecv(MatchSpec::mpi(CTX, ANY, 1), into()).map_err(err)?;
                        c.wait(rr).map_err(err)?;
                        let sr = c
                            .isend(peer, match_bits(CTX, 1), a.rank, &data, SendMode::Standard)
                            .map_err(err)?;
                        c.wait(sr).map_err(err)?;
                    }
                    if i >= warm {
                        lat.push(t.elapsed().as_nanos() as f64 / 2.0);
                    }
                }
                if *first {
                    lat.sort_by(f64::total_cmp);
                    let p50 = lat[lat.len() / 2] / 1000.0;
                    let mean = lat.iter().sum::<f64>() / lat.len() as f64;
                    let mbps = n as f64 / (mean / 1e9) / 1e6;
                    println!(
                        "{{\"size\": {n}, \"half_rtt_p50_us\": {p50:.2}, \"half_rtt_mean_us\": {:.2}, \"MB_per_s\": {mbps:.1}}}",
                        mean / 1000.0
                    );
                }
            }
            fence(&a, "done")?;
        }
        Mode::Hold | Mode::HoldLent => {
            let _r = c
                .irecv(
                    MatchSpec::mpi(CTX, ANY, 999),
                    RecvInto::Vec(vec![0; 16 << 20]),
                )
                .map_err(err)?;
            println!("holding");
            let lent = matches!(a.mode, Mode::HoldLent);
            loop {
                if lent {
                    c.polling();
                    // Not a sleep: with the kernel's timer slack it would outlast the
                    // agent's idea of polling.
                    std::thread::yield_now();
                } else {
                    c.progress();
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
        Mode::Garbage => {
            c.inject_garbage().map_err(|e| format!("injecting: {e}"))?;
            // The agent must hang up on us; any operation then fails.
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                c.progress();
                match c.irecv(MatchSpec::mpi(CTX, ANY, 1), RecvInto::Channel(8)) {
                    Err(e) => {
                        println!("disconnected: {e}");
                        return Ok(());
                    }
                    Ok(_) if Instant::now() > deadline => {
                        return Err("the agent kept serving a client that wrote garbage".into());
                    }
                    Ok(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        }
        Mode::Orphan => {
            let r = c
                .irecv(MatchSpec::mpi(CTX, ANY, 5), RecvInto::Channel(8))
                .map_err(err)?;
            let s = match peer {
                Some(p) => Some(
                    c.isend_vec(
                        p,
                        match_bits(CTX, 7),
                        a.rank,
                        vec![5; 1 << 20],
                        SendMode::Standard,
                    )
                    .map_err(err)?,
                ),
                None => None,
            };
            println!("posted");
            use std::io::Write;
            let _ = std::io::stdout().flush();
            let t = Instant::now();
            let res = c.wait(r);
            let ms = t.elapsed().as_millis();
            let send_failed = s.map(|s| c.wait(s).is_err());
            let after = c.irecv(MatchSpec::mpi(CTX, ANY, 6), RecvInto::Channel(8));
            let after_send = c.isend(
                c.addr(),
                match_bits(CTX, 6),
                a.rank,
                b"x",
                SendMode::Standard,
            );
            let reason = match &res {
                Err(e) => e.to_string(),
                Ok(_) => String::new(),
            };
            println!(
                "{}",
                serde_json::json!({
                    "pending_failed": res.is_err(),
                    "send_failed": send_failed,
                    "new_failed": after.is_err() && after_send.is_err(),
                    "ms": ms as u64,
                    "error": reason,
                })
            );
        }
    }
    Ok(())
}

const ANY: i32 = tigon_engine::ANY_SOURCE;
