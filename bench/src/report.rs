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
