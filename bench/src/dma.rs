//! `tigon bench dma`: CPU memcpy against a dmadev for 64 B … 4 MiB — throughput, CPU time per
//! byte on the submitting core, and the crossover size above which offloading a copy costs the
//! engine core less than doing it. The agent's `--dma-threshold` defaults to that crossover.
//!
//! The submitting core's time is the thread's CPU clock (CLOCK_THREAD_CPUTIME_ID), so
//! a dmadev whose copies run on another core (dma_skeleton's worker thread here; IOAT/DSA
//! hardware on real nodes) shows what it saves the engine core.

use crate::report;
use serde::Serialize;
use std::time::Instant;
use tigon_pmd::{DmaDev, Eal, ExtMem};

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub size: usize,
    pub copies: u64,
    pub cpu_gbytes_per_s: f64,
    pub cpu_ns_per_copy: f64,
    pub dma_gbytes_per_s: f64,
    /// Time the submitting core spent per offloaded copy (enqueue, submit, poll).
    pub dma_submitter_ns_per_copy: f64,
    pub cpu_ns_per_byte: f64,
    pub dma_submitter_ns_per_byte: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub command: String,
    pub device: String,
    pub driver: String,
    pub rows: Vec<Row>,
    /// Smallest size from which the dmadev costs the submitting core less than memcpy.
    pub crossover: Option<usize>,
    pub note: String,
}

use tigon_shm::signals::thread_cpu_ns;

pub const SIZES: [usize; 9] = [64, 256, 1024, 4096, 16384, 65536, 262_144, 1 << 20, 4 << 20];

/// Runs the comparison on dmadev `devargs` (EAL initialised by the caller with IOVA as VA).
pub fn run(eal: &Eal, devargs: &str, budget_bytes: u64) -> Result<Report, String> {
    let mut dev = DmaDev::open(eal, devargs, 1024).map_err(|e| e.to_string())?;
    let max = *SIZES.last().expect("sizes");
    let src = ExtMem::new(eal, max).map_err(|e| e.to_string())?;
    let dst = ExtMem::new(eal, max).map_err(|e| e.to_string())?;
    src.fill(0, max, 0x5a).map_err(|e| e.to_string())?;
    let cpu_src = vec![0x5au8; max];
    let mut cpu_dst = vec![0u8; max];
    let mut rows = Vec::new();
    for &size in &SIZES {
        let copies = (budget_bytes / size as u64).clamp(16, 200_000);
        report::progress(&format!("bench dma: {size} B x {copies}"));
        // CPU.
        let (t, c0) = (Instant::now(), thread_cpu_ns());
        for i in 0..copies {
            let off = (i as usize * 64) % (max - size + 1);
            cpu_dst[..size].copy_from_slice(&cpu_src[off..off + size]);
            std::hint::black_box(&cpu_dst);
        }
        let cpu_wall = t.elapsed().as_secs_f64();
        let cpu_cpu = (thread_cpu_ns() - c0) as f64;
        // dmadev: keep the ring busy, poll completions.
        let (t, c0) = (Instant::now(), thread_cpu_ns());
        let (mut sent, mut done) = (0u64, 0u64);
        while done < copies {
            while sent < copies && dev.burst_capacity() > 0 {
                match dev.copy(&src, 0, &dst, 0, size as u32, false) {
                    Ok(_) => sent += 1,
                    Err(_) => break,
                }
            }
            dev.submit().map_err(|e| e.to_string())?;
            let c = dev.completed(64);
            if c.has_error {
                return Err(format!("dmadev {devargs}: a copy failed"));
            }
            done += c.count as u64;
            if c.count == 0 {
                std::thread::yield_now();
            }
        }
        let dma_wall = t.elapsed().as_secs_f64();
        let dma_cpu = (thread_cpu_ns() - c0) as f64;
        let bytes = (copies * size as u64) as f64;
        rows.push(Row {
            size,
            copies,
            cpu_gbytes_per_s: bytes / cpu_wall / 1e9,
            cpu_ns_per_copy: cpu_cpu / copies as f64,
            dma_gbytes_per_s: bytes / dma_wall / 1e9,
            dma_submitter_ns_per_copy: dma_cpu / copies as f64,
            cpu_ns_per_byte: cpu_cpu / bytes,
            dma_submitter_ns_per_byte: dma_cpu / bytes,
        });
    }
    report::progress_done();
    // Verify the device really copied.
    let mut check = vec![0u8; 4096];
    dst.read_at(0, &mut check).map_err(|e| e.to_string())?;
    if check.iter().any(|&b| b != 0x5a) {
        return Err("dmadev copies did not land".into());
    }
    let crossover = rows
        .iter()
        .find(|r| r.dma_submitter_ns_per_copy < r.cpu_ns_per_copy)
        .map(|r| r.size);
    let driver = dev.driver_name();
    Ok(Report {
        command: format!("tigon bench dma --dma {devargs}"),
        device: devargs.into(),
        note: if driver.contains("skeleton") {
            "dma_skeleton copies with a software thread on another core: its throughput is a CPU's, \
             but the submitting core's time per copy is what offloading saves the engine"
                .into()
        } else {
            String::new()
        },
        driver,
        rows,
        crossover,
    })
}

pub fn render(r: &Report) -> String {
    let rows: Vec<Vec<String>> = r
        .rows
        .iter()
        .map(|x| {
            vec![
                x.size.to_string(),
                x.copies.to_string(),
                format!("{:.2}", x.cpu_gbytes_per_s),
                format!("{:.2}", x.dma_gbytes_per_s),
                format!("{:.0}", x.cpu_ns_per_copy),
                format!("{:.0}", x.dma_submitter_ns_per_copy),
                format!("{:.3}", x.cpu_ns_per_byte),
                format!("{:.3}", x.dma_submitter_ns_per_byte),
            ]
        })
        .collect();
    let mut s = report::table(
        &[
            "bytes",
            "copies",
            "cpu GB/s",
            "dma GB/s",
            "cpu ns/copy",
            "dma ns/copy*",
            "cpu ns/B",
            "dma ns/B*",
        ],
        &rows,
    );
    s.push_str(&format!(
        "\n* time of the submitting core\ndevice: {} ({})\ncrossover: {}\n{}\nreproduce: {}",
        r.device,
        r.driver,
        r.crossover.map_or(
            "none (the CPU is cheaper at every size)".into(),
            |c| format!("{c} B")
        ),
        r.note,
        r.command
    ));
    s
}
