//! Terminal tables, a progress line, and JSON files under `target/bench/`.

use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Prints `msg` over the current terminal line (a progress indicator on stderr).
pub fn progress(msg: &str) {
    let mut e = std::io::stderr();
    let _ = write!(e, "\r\x1b[2K{msg}");
    let _ = e.flush();
}

pub fn progress_done() {
    let mut e = std::io::stderr();
    let _ = write!(e, "\r\x1b[2K");
    let _ = e.flush();
}

/// Formats rows of cells as an aligned table with a header.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut w: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < w.len() {
                w[i] = w[i].max(c.len());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:>width$}", width = w[i]))
            .collect::<Vec<_>>()
            .join("  ")
    };
    let mut out = line(header.to_vec());
    out.push('\n');
    out.push_str(
        &w.iter()
            .map(|n| "-".repeat(*n))
            .collect::<Vec<_>>()
            .join("  "),
    );
    for r in rows {
        out.push('\n');
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

/// Where benchmark results go: `$CARGO_TARGET_DIR/bench` or `target/bench`.
pub fn out_dir() -> PathBuf {
    let base = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"));
    base.join("bench")
}

/// Writes `value` as pretty JSON to `dir/name.json`; returns the path.
pub fn save_json<T: Serialize>(dir: &Path, name: &str, value: &T) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let p = dir.join(format!("{name}.json"));
    std::fs::write(
        &p,
        serde_json::to_string_pretty(value).map_err(std::io::Error::other)?,
    )?;
    Ok(p)
}

/// Human units: 1.23 M, 4.56 k.
pub fn si(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.2} G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2} M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.2} k", v / 1e3)
    } else {
        format!("{v:.1}")
    }
}

/// A benchmark's goal, printed as met or not met: a report, never an assertion.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// What is compared, with the threshold, e.g. "4 MiB bandwidth >= 1.2x ob1/tcp".
    pub name: String,
    /// The measured value in the threshold's terms (a ratio, a percentage, µs).
    pub value: Option<f64>,
    pub threshold: f64,
    /// None when it could not be measured in this run (a transport failed or was left out).
    pub met: Option<bool>,
    /// The numbers behind `value`, for a reader.
    pub detail: String,
}

impl Target {
    /// `value <= threshold` (`at_most`) or `value >= threshold`.
    pub fn check(
        name: impl Into<String>,
        value: Option<f64>,
        threshold: f64,
        at_most: bool,
        detail: String,
    ) -> Target {
        let met = value.map(|v| {
            if at_most {
                v <= threshold
            } else {
                v >= threshold
            }
        });
        Target {
            name: name.into(),
            value,
            threshold,
            met,
            detail,
        }
    }
}

/// The targets as lines: "met" / "NOT met" / "not measured", then what was measured.
pub fn render_targets(targets: &[Target]) -> String {
    let w = targets.iter().map(|t| t.name.len()).max().unwrap_or(0);
    targets
        .iter()
        .map(|t| {
            let verdict = match t.met {
                Some(true) => "met",
                Some(false) => "NOT met",
                None => "not measured",
            };
            format!("  {:<w$}  {verdict:<12}  {}", t.name, t.detail)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What every `target/bench/<bench>.json` holds: the same envelope around each bench's own
/// results, so that `tigon bench mpi|dma|engine` report alike.
#[derive(Debug, Serialize)]
pub struct Envelope<'a, T: Serialize> {
    pub bench: &'a str,
    /// The command that reproduces the run.
    pub command: String,
    /// The tigon build (git revision).
    pub tigon: &'a str,
    /// Seconds since the epoch when the results were saved.
    pub unix_time: u64,
    pub cpus: usize,
    pub targets: &'a [Target],
    pub results: &'a T,
}

/// Saves `results` in the common envelope as `dir/<bench>.json`.
pub fn save_report<T: Serialize>(
    dir: &Path,
    bench: &str,
    command: String,
    tigon: &str,
    targets: &[Target],
    results: &T,
) -> std::io::Result<PathBuf> {
    let env = Envelope {
        bench,
        command,
        tigon,
        unix_time: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        targets,
        results,
    };
    save_json(dir, bench, &env)
}
