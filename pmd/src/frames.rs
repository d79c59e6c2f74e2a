//! A checked stream of Ethernet frames between two DPDK processes: the sender numbers every
//! frame and fills it with a pattern derived from its sequence number; the receiver
//! re-derives and compares every byte, and counts lost, corrupted, duplicated and reordered
//! frames. Used by the fabric tests and by `tigon demo` (through [`cli_main`]).

use std::io::Write;
use std::time::{Duration, Instant};

use crate::eal::{Eal, Hugepages};
use crate::error::{Error, Result};
use crate::mbuf::Mbuf;
use crate::mempool::{DEFAULT_DATA_ROOM, Mempool};
use crate::port::{Port, PortConfig};

/// EtherType of test frames (IEEE 802 local experimental).
pub const ETHERTYPE: u16 = 0x88B5;
/// Ethernet header + magic + kind + pad + seq + len.
pub const HDR_LEN: usize = 14 + 4 + 1 + 3 + 8 + 4;
/// Smallest frame the stream produces (Ethernet minimum without FCS).
pub const MIN_FRAME: usize = 60;
const MAGIC: u32 = 0x5447_4e46; // "TGNF"
const KIND_DATA: u8 = 0;
const KIND_END: u8 = 1;
const KIND_DONE: u8 = 2;
const END_FRAMES: usize = 16;
/// How long the receiver replies once it stopped (see [`reply_done`]): the sender closes its
/// port only once it read a reply, as a memif client that disconnects makes the server stop
/// reading its ring at once, and the frames still queued there would be lost (seen under
/// load, when the ring held the last ~160 frames of the stream).
const REPLY_FOR: Duration = Duration::from_secs(1);

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Length of frame `seq` of a stream: uniform in `min..=max`, derived from `seed` and `seq`.
pub fn frame_len(seed: u64, seq: u64, min: usize, max: usize) -> usize {
    let span = (max.saturating_sub(min) + 1) as u64;
    min + (splitmix(seed ^ seq.wrapping_mul(0xA24B_AED4_963E_E407)) % span) as usize
}

fn fill_pattern(seed: u64, seq: u64, out: &mut [u8]) {
    let mut s = splitmix(seed.rotate_left(17) ^ seq) | 1;
    let mut chunks = out.chunks_exact_mut(8);
    for c in &mut chunks {
        // xorshift64: fast, and every word depends on the sequence number.
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        c.copy_from_slice(&s.to_le_bytes());
    }
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    let rem = chunks.into_remainder();
    let n = rem.len();
    rem.copy_from_slice(&s.to_le_bytes()[..n]);
}

fn header(buf: &mut [u8], src_mac: [u8; 6], kind: u8, seq: u64, len: usize) {
    buf[0..6].copy_from_slice(&[0xff; 6]);
    buf[6..12].copy_from_slice(&src_mac);
    buf[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
    buf[14..18].copy_from_slice(&MAGIC.to_be_bytes());
    buf[18] = kind;
    buf[19..22].fill(0);
    buf[22..30].copy_from_slice(&seq.to_le_bytes());
    buf[30..34].copy_from_slice(&(len as u32).to_le_bytes());
}

/// Writes data frame `seq` of `len` bytes (at least `MIN_FRAME`) into `buf`.
pub fn build_frame(buf: &mut Vec<u8>, src_mac: [u8; 6], seed: u64, seq: u64, len: usize) {
    let len = len.max(MIN_FRAME);
    buf.resize(len, 0);
    header(buf, src_mac, KIND_DATA, seq, len);
    fill_pattern(seed, seq, &mut buf[HDR_LEN..]);
}

/// What a received frame turned out to be.
#[derive(Debug, PartialEq, Eq)]
pub enum Check {
    /// An intact data frame.
    Data { seq: u64 },
    /// The sender's end-of-stream marker, carrying the number of data frames sent.
    End { sent: u64 },
    /// The receiver's reply once it stopped, carrying the number of data frames it got.
    Done { received: u64 },
    /// Not a frame of this stream (other EtherType, e.g. the kernel's IPv6 chatter).
    Foreign,
    /// A frame of this stream whose bytes are wrong.
    Corrupt(String),
}

/// Checks a whole received frame; `scratch` is reused between calls.
pub fn check_frame(frame: &[u8], seed: u64, scratch: &mut Vec<u8>) -> Check {
    if frame.len() < 14 || frame[12..14] != ETHERTYPE.to_be_bytes() {
        return Check::Foreign;
    }
    if frame.len() < HDR_LEN {
        return Check::Corrupt(format!("short frame of {} B", frame.len()));
    }
    if frame[14..18] != MAGIC.to_be_bytes() {
        return Check::Corrupt("bad magic".into());
    }
    let mut w8 = [0u8; 8];
    w8.copy_from_slice(&frame[22..30]);
    let seq = u64::from_le_bytes(w8);
    let mut w4 = [0u8; 4];
    w4.copy_from_slice(&frame[30..34]);
    let len = u32::from_le_bytes(w4) as usize;
    match frame[18] {
        KIND_END => return Check::End { sent: seq },
        KIND_DONE => return Check::Done { received: seq },
        KIND_DATA => {}
        k => return Check::Corrupt(format!("unknown kind {k}")),
    }
    if len != frame.len() {
        return Check::Corrupt(format!(
            "frame {seq}: {} B received, header says {len} B",
            frame.len()
        ));
    }
    scratch.resize(len, 0);
    fill_pattern(seed, seq, &mut scratch[HDR_LEN..]);
    if frame[HDR_LEN..] != scratch[HDR_LEN..] {
        let at = frame[HDR_LEN..]
            .iter()
            .zip(&scratch[HDR_LEN..])
            .position(|(a, b)| a != b)
            .unwrap_or(0)
            + HDR_LEN;
        return Check::Corrupt(format!("frame {seq} ({len} B): first wrong byte at {at}"));
    }
    Check::Data { seq }
}

/// Sender parameters.
#[derive(Clone, Debug)]
pub struct SendOpts {
    /// Data frames to send.
    pub count: u64,
    /// Smallest frame.
    pub min_len: usize,
    /// Largest frame.
    pub max_len: usize,
    /// Pattern and size seed (the receiver needs the same).
    pub seed: u64,
    /// Frames per tx burst.
    pub burst: usize,
    /// Give up when the port accepts nothing for this long.
    pub stall_timeout: Duration,
    /// After the end markers, wait this long at most for the receiver's reply before the
    /// caller may close the port.
    pub linger: Duration,
}

/// What the sender did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SendReport {
    /// Data frames the port accepted.
    pub sent: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Time from the first to the last tx burst.
    pub secs: f64,
    /// tx bursts that the port did not fully accept (backpressure).
    pub partial_bursts: u64,
    /// The port's count of failed transmissions (`oerrors`) at the end.
    pub oerrors: u64,
    /// The receiver replied that it stopped (within `linger`).
    pub peer_done: bool,
}

impl SendReport {
    /// One `SENT key=value ...` line (what `tigon-frames send` prints).
    pub fn to_line(&self) -> String {
        format!(
            "SENT sent={} bytes={} secs={:.6} partial_bursts={} oerrors={} peer_done={}",
            self.sent,
            self.bytes,
            self.secs,
            self.partial_bursts,
            self.oerrors,
            u8::from(self.peer_done)
        )
    }

    /// Parses a line made by `to_line`.
    pub fn parse(line: &str) -> Option<SendReport> {
        let rest = line.trim().strip_prefix("SENT ")?;
        let mut r = SendReport::default();
        for kv in rest.split_whitespace() {
            let (k, v) = kv.split_once('=')?;
            match k {
                "sent" => r.sent = v.parse().ok()?,
                "bytes" => r.bytes = v.parse().ok()?,
                "secs" => r.secs = v.parse().ok()?,
                "partial_bursts" => r.partial_bursts = v.parse().ok()?,
                "oerrors" => r.oerrors = v.parse().ok()?,
                "peer_done" => r.peer_done = v == "1",
                _ => {}
            }
        }
        Some(r)
    }
}

/// Sends `opts.count` data frames built in mbufs of `pool`, retrying each burst until the
/// port accepts every frame (so the port's own backpressure never loses a frame), then a
/// few end-of-stream markers.
pub fn send(port: &mut Port, pool: &Mempool, opts: &SendOpts) -> Result<SendReport> {
    let mac = port.mac().unwrap_or([2, 0, 0, 0, 0, 1]);
    let mut buf = Vec::with_capacity(opts.max_len.max(MIN_FRAME));
    let mut batch: Vec<Mbuf> = Vec::with_capacity(opts.burst);
    let mut rep = SendReport::default();
    let mut seq = 0u64;
    let start = Instant::now();
    let mut last_progress = Instant::now();
    while seq < opts.count || !batch.is_empty() {
        while batch.len() < opts.burst.max(1) && seq < opts.count {
            let len = frame_len(opts.seed, seq, opts.min_len, opts.max_len);
            build_frame(&mut buf, mac, opts.seed, seq, len);
            let mut m = match pool.alloc() {
                Ok(m) => m,
                // Mbufs still queued in the port: send what we have, then retry.
                Err(Error::PoolExhausted { .. }) if !batch.is_empty() => break,
                Err(e) => {
                    if last_progress.elapsed() > opts.stall_timeout {
                        return Err(e);
                    }
                    std::thread::yield_now();
                    continue;
                }
            };
            if let Err(e) = m.extend_from_slice(|| pool.alloc(), &buf) {
                drop(m);
                if matches!(e, Error::PoolExhausted { .. }) && !batch.is_empty() {
                    break;
                }
                return Err(e);
            }
            rep.bytes += buf.len() as u64;
            batch.push(m);
            seq += 1;
        }
        let offered = batch.len();
        let n = port.tx_burst(0, &mut batch);
        rep.sent += n as u64;
        if n < offered {
            rep.partial_bursts += 1;
        }
        if n > 0 {
            last_progress = Instant::now();
        } else {
            if last_progress.elapsed() > opts.stall_timeout {
                return Err(Error::LinkDown {
                    port: port.name().to_string(),
                    waited_ms: opts.stall_timeout.as_millis() as u64,
                });
            }
            std::thread::yield_now();
        }
    }
    rep.secs = start.elapsed().as_secs_f64();
    rep.peer_done = finish(port, pool, mac, rep.sent, opts)?;
    rep.oerrors = port.stats().map_or(0, |s| s.oerrors);
    Ok(rep)
}

/// The end of a stream: `END_FRAMES` end markers, 1 ms apart, each retried until the port
/// takes it (they queue behind the data: a full ring would drop a marker sent once, and the
/// receiver would stop only at its idle timeout), then the receiver's reply. The receiver
/// stops at the first marker it reads, replies and closes, so its reply or its link going
/// down (memif: the server's disconnect) ends this early; otherwise no marker taken for
/// `stall_timeout`, or no reply `linger` after the last marker. True if the reply came.
fn finish(
    port: &mut Port,
    pool: &Mempool,
    mac: [u8; 6],
    sent: u64,
    opts: &SendOpts,
) -> Result<bool> {
    let (mut rx, mut frame, mut scratch) = (Vec::with_capacity(32), Vec::new(), Vec::new());
    let mut marker: Vec<Mbuf> = Vec::with_capacity(1);
    let (mut markers, mut last, mut paced) = (0, Instant::now(), None);
    loop {
        port.rx_burst(0, &mut rx, 32);
        for m in rx.drain(..) {
            m.read_into(&mut frame);
            if let Check::Done { .. } = check_frame(&frame, 0, &mut scratch) {
                return Ok(true);
            }
        }
        if paced.is_none_or(|t: Instant| t.elapsed() >= Duration::from_millis(1)) {
            paced = Some(Instant::now());
            if !port.link().is_ok_and(|l| l.up) {
                return Ok(false);
            }
        }
        // The next marker once the one before is 1 ms old (retried at once while the port
        // refuses it: the ring drains as fast as the receiver reads).
        if markers < END_FRAMES && (marker.len() == 1 || last.elapsed() >= Duration::from_millis(1))
        {
            if marker.is_empty() {
                marker.push(small_frame(pool, mac, KIND_END, sent)?);
            }
            if port.tx_burst(0, &mut marker) > 0 {
                markers += 1;
                last = Instant::now();
            }
        }
        let waited = last.elapsed();
        if (markers < END_FRAMES && waited > opts.stall_timeout)
            || (markers == END_FRAMES && waited > opts.linger)
        {
            return Ok(false);
        }
        std::thread::yield_now();
    }
}

/// A minimal frame of this stream of `kind`, carrying `seq`.
fn small_frame(pool: &Mempool, mac: [u8; 6], kind: u8, seq: u64) -> Result<Mbuf> {
    let mut m = pool.alloc()?;
    let mut b = [0u8; MIN_FRAME];
    header(&mut b, mac, kind, seq, MIN_FRAME);
    m.extend_from_slice(|| pool.alloc(), &b)?;
    Ok(m)
}

/// Tells the sender that the receiver stopped, so that it may close its port: a reply every
/// millisecond until the link goes down (memif: the sender closed) or for `REPLY_FOR` at
/// most (af_packet's link stays up); `received` is what the receiver got. Replying until
/// the sender is gone, not a few times, keeps the reply readable: a memif client that
/// learns of the server's disconnect before reading its ring finds it empty.
pub fn reply_done(port: &mut Port, pool: &Mempool, received: u64) -> Result<()> {
    let mac = port.mac().unwrap_or([2, 0, 0, 0, 0, 2]);
    let since = Instant::now();
    while since.elapsed() < REPLY_FOR && port.link().is_ok_and(|l| l.up) {
        let mut v = vec![small_frame(pool, mac, KIND_DONE, received)?];
        port.tx_burst(0, &mut v);
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Receiver parameters.
#[derive(Clone, Debug)]
pub struct RecvOpts {
    /// Data frames the sender will send.
    pub count: u64,
    /// Pattern seed (as the sender's).
    pub seed: u64,
    /// Fail when no frame arrives within this time of starting.
    pub start_timeout: Duration,
    /// Stop when no frame arrived for this long after the first (lost end markers).
    pub idle_timeout: Duration,
}

/// What the receiver saw.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecvReport {
    /// Data frames expected.
    pub expected: u64,
    /// Distinct intact data frames received.
    pub received: u64,
    /// expected - received.
    pub lost: u64,
    /// Frames of the stream with wrong bytes.
    pub corrupted: u64,
    /// Data frames received more than once.
    pub duplicates: u64,
    /// Data frames that arrived after a later one.
    pub reordered: u64,
    /// Frames of other protocols (ignored).
    pub foreign: u64,
    /// Bytes of intact data frames.
    pub bytes: u64,
    /// Time from the first to the last data frame.
    pub secs: f64,
    /// The port's `imissed` counter (frames the driver knows it dropped; DPDK 22.11's
    /// af_packet does not count its socket ring's overflows here).
    pub imissed: u64,
    /// The receiver stopped because the stream went idle: neither every frame nor the
    /// sender's end marker arrived.
    pub stopped_idle: bool,
    /// The lowest sequence number that never arrived (`expected` when none is missing): says
    /// whether a loss was at the stream's start, middle or tail.
    pub first_lost: u64,
}

impl RecvReport {
    /// Frames per second over the receive window.
    pub fn frames_per_sec(&self) -> f64 {
        if self.secs > 0.0 {
            self.received as f64 / self.secs
        } else {
            0.0
        }
    }

    /// Gbit/s of frame bytes (Ethernet header included, no FCS/preamble).
    pub fn gbit_per_sec(&self) -> f64 {
        if self.secs > 0.0 {
            self.bytes as f64 * 8.0 / self.secs / 1e9
        } else {
            0.0
        }
    }

    /// One `RESULT key=value ...` line (what `tigon-frames recv` prints).
    pub fn to_line(&self) -> String {
        format!(
            "RESULT expected={} received={} lost={} corrupted={} duplicates={} reordered={} \
             foreign={} bytes={} secs={:.6} imissed={} stopped_idle={} first_lost={}",
            self.expected,
            self.received,
            self.lost,
            self.corrupted,
            self.duplicates,
            self.reordered,
            self.foreign,
            self.bytes,
            self.secs,
            self.imissed,
            u8::from(self.stopped_idle),
            self.first_lost
        )
    }

    /// Parses a line made by `to_line`.
    pub fn parse(line: &str) -> Option<RecvReport> {
        let rest = line.trim().strip_prefix("RESULT ")?;
        let mut r = RecvReport::default();
        for kv in rest.split_whitespace() {
            let (k, v) = kv.split_once('=')?;
            match k {
                "secs" => r.secs = v.parse().ok()?,
                _ => {
                    let v: u64 = v.parse().ok()?;
                    match k {
                        "expected" => r.expected = v,
                        "received" => r.received = v,
                        "lost" => r.lost = v,
                        "corrupted" => r.corrupted = v,
                        "duplicates" => r.duplicates = v,
                        "reordered" => r.reordered = v,
                        "foreign" => r.foreign = v,
                        "bytes" => r.bytes = v,
                        "imissed" => r.imissed = v,
                        "stopped_idle" => r.stopped_idle = v == 1,
                        "first_lost" => r.first_lost = v,
                        _ => {}
                    }
                }
            }
        }
        Some(r)
    }
}

/// Receives and checks frames until all `opts.count` arrived, the end marker arrives, or
/// the stream goes idle. Yields the CPU whenever a burst is empty (machines with fewer
/// cores than pollers).
pub fn receive(port: &mut Port, opts: &RecvOpts) -> Result<RecvReport> {
    let n = usize::try_from(opts.count)
        .map_err(|_| Error::InvalidArgument("frame count too large".into()))?;
    let mut seen = vec![false; n];
    let mut rep = RecvReport {
        expected: opts.count,
        ..Default::default()
    };
    let mut mbufs: Vec<Mbuf> = Vec::with_capacity(64);
    let (mut frame, mut scratch) = (Vec::new(), Vec::new());
    let start = Instant::now();
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let mut last_rx = Instant::now();
    let mut max_seq: Option<u64> = None;
    let mut reported = 0;
    let mut done = false;
    while !done {
        if port.rx_burst(0, &mut mbufs, 64) == 0 {
            match first {
                Some(_) if last_rx.elapsed() > opts.idle_timeout => {
                    rep.stopped_idle = true;
                    break;
                }
                None if start.elapsed() > opts.start_timeout => {
                    return Err(Error::LinkDown {
                        port: port.name().to_string(),
                        waited_ms: opts.start_timeout.as_millis() as u64,
                    });
                }
                _ => std::thread::yield_now(),
            }
            continue;
        }
        last_rx = Instant::now();
        for m in mbufs.drain(..) {
            m.read_into(&mut frame);
            drop(m);
            match check_frame(&frame, opts.seed, &mut scratch) {
                Check::Data { seq } if (seq as usize) < n => {
                    let now = Instant::now();
                    first.get_or_insert(now);
                    last = now;
                    if seen[seq as usize] {
                        rep.duplicates += 1;
                        continue;
                    }
                    seen[seq as usize] = true;
                    rep.received += 1;
                    rep.bytes += frame.len() as u64;
                    if max_seq.is_some_and(|m| seq < m) {
                        rep.reordered += 1;
                    }
                    max_seq = Some(max_seq.map_or(seq, |m| m.max(seq)));
                    if rep.received == opts.count {
                        done = true;
                    }
                }
                Check::Data { seq } => {
                    rep.corrupted += 1;
                    log::error!("frame with out-of-range sequence number {seq}");
                }
                Check::End { .. } => done = true,
                // A reply of another stream's receiver on the same wire: not ours.
                Check::Done { .. } | Check::Foreign => rep.foreign += 1,
                Check::Corrupt(why) => {
                    rep.corrupted += 1;
                    if reported < 10 {
                        reported += 1;
                        log::error!("corrupted frame: {why}");
                    }
                }
            }
        }
    }
    rep.lost = rep.expected - rep.received;
    rep.first_lost = seen
        .iter()
        .position(|s| !s)
        .map_or(opts.count, |i| i as u64);
    rep.secs = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
    rep.imissed = port.stats().map_or(0, |s| s.imissed);
    Ok(rep)
}

const USAGE: &str = "usage: tigon-frames send|recv --dev DEVARGS [--lcore N] [--prefix P] \
    [--count N] [--min B] [--max B] [--seed S] [--data-room B] [--tx-data-room B] [--pool N] \
    [--mtu M] [--no-huge] [--timeout SECS] [--idle SECS]";

/// `tigon-frames` (and `tigon frames`): one end of a checked frame stream. The receiver
/// prints `READY` once its port is started and a `RESULT ...` line at the end; the sender
/// prints `SENT sent=.. bytes=.. secs=..`.
pub fn cli_main(args: &[String]) -> std::result::Result<(), String> {
    let mut it = args.iter();
    let role = it.next().ok_or(USAGE)?.clone();
    let (mut dev, mut lcore, mut prefix) = (None, "0".to_string(), None);
    let (mut count, mut min, mut max, mut seed) = (100_000u64, 60usize, 9000usize, 1u64);
    let (mut data_room, mut pool_size, mut mtu) = (DEFAULT_DATA_ROOM, 8191u32, None);
    let mut tx_data_room = None;
    let (mut no_huge, mut timeout, mut idle) = (false, 60u64, 10u64);
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .ok_or(format!("{a} needs a value\n{USAGE}"))
        };
        let bad = |e: std::num::ParseIntError| format!("{a}: {e}");
        match a.as_str() {
            "--dev" => dev = Some(val()?),
            "--lcore" => lcore = val()?,
            "--prefix" => prefix = Some(val()?),
            "--count" => count = val()?.parse().map_err(bad)?,
            "--min" => min = val()?.parse().map_err(bad)?,
            "--max" => max = val()?.parse().map_err(bad)?,
            "--seed" => seed = val()?.parse().map_err(bad)?,
            "--data-room" => data_room = val()?.parse().map_err(bad)?,
            "--tx-data-room" => tx_data_room = Some(val()?.parse().map_err(bad)?),
            "--pool" => pool_size = val()?.parse().map_err(bad)?,
            "--mtu" => mtu = Some(val()?.parse().map_err(bad)?),
            "--timeout" => timeout = val()?.parse().map_err(bad)?,
            "--idle" => idle = val()?.parse().map_err(bad)?,
            "--no-huge" => no_huge = true,
            _ => return Err(format!("unknown argument `{a}`\n{USAGE}")),
        }
    }
    let dev = dev.ok_or(format!("--dev is required\n{USAGE}"))?;
    if min < MIN_FRAME || max < min {
        return Err(format!(
            "frame sizes must satisfy {MIN_FRAME} <= min <= max"
        ));
    }
    let prefix = prefix.unwrap_or_else(|| format!("tigon-frames-{}", std::process::id()));
    let mut b = Eal::builder()
        .lcores(lcore)
        .file_prefix(prefix)
        .in_memory(true)
        .no_pci(true)
        .log_level("warning");
    if no_huge {
        b = b.hugepages(Hugepages::Off);
    }
    let eal = b.init().map_err(|e| e.to_string())?;
    let pool = Mempool::new(&eal, "frames", pool_size, data_room).map_err(|e| e.to_string())?;
    let cfg = PortConfig {
        mtu,
        ..Default::default()
    };
    let mut port = Port::open(&eal, &dev, &pool, &cfg).map_err(|e| e.to_string())?;
    let out = std::io::stdout();
    match role.as_str() {
        "recv" => {
            println!("READY");
            let _ = out.lock().flush();
            let rep = receive(
                &mut port,
                &RecvOpts {
                    count,
                    seed,
                    start_timeout: Duration::from_secs(timeout),
                    idle_timeout: Duration::from_secs(idle),
                },
            )
            .map_err(|e| e.to_string())?;
            println!("{}", rep.to_line());
            let _ = out.lock().flush();
            reply_done(&mut port, &pool, rep.received).map_err(|e| e.to_string())?;
        }
        "send" => {
            port.wait_link_up(Duration::from_secs(timeout))
                .map_err(|e| e.to_string())?;
            let tx_pool = match tx_data_room {
                Some(room) if room != data_room => {
                    Mempool::new(&eal, "frames_tx", pool_size, room).map_err(|e| e.to_string())?
                }
                _ => pool.clone(),
            };
            let rep = send(
                &mut port,
                &tx_pool,
                &SendOpts {
                    count,
                    min_len: min,
                    max_len: max,
                    seed,
                    burst: 32,
                    stall_timeout: Duration::from_secs(timeout),
                    linger: Duration::from_secs(idle),
                },
            )
            .map_err(|e| e.to_string())?;
            println!("{}", rep.to_line());
        }
        r => return Err(format!("unknown role `{r}`\n{USAGE}")),
    }
    let _ = out.lock().flush();
    // Close the port (memif: disconnects the peer cleanly) before the EAL goes.
    drop(port);
    drop(pool);
    drop(eal);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_detect_corruption() {
        let (mut buf, mut scratch) = (Vec::new(), Vec::new());
        for seq in 0..200 {
            let len = frame_len(7, seq, 60, 9000);
            assert!((60..=9000).contains(&len));
            build_frame(&mut buf, [2, 0, 0, 0, 0, 1], 7, seq, len);
            assert_eq!(check_frame(&buf, 7, &mut scratch), Check::Data { seq });
            let i = HDR_LEN + (seq as usize * 31) % (len - HDR_LEN);
            buf[i] ^= 0x40;
            assert!(matches!(
                check_frame(&buf, 7, &mut scratch),
                Check::Corrupt(_)
            ));
        }
        let mut other = buf.clone();
        other[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        assert_eq!(check_frame(&other, 7, &mut scratch), Check::Foreign);
    }

    #[test]
    fn report_line_parses_back() {
        let r = RecvReport {
            expected: 10,
            received: 9,
            lost: 1,
            corrupted: 0,
            duplicates: 0,
            reordered: 2,
            foreign: 3,
            bytes: 12345,
            secs: 0.5,
            imissed: 4,
            stopped_idle: true,
            first_lost: 7,
        };
        assert_eq!(RecvReport::parse(&r.to_line()), Some(r));
    }
}
