//! Smoke run of `tigon bench mpi` over ob1/vader only (no agents): the embedded C program
//! compiles with mpicc, runs every measurement, and its output becomes the JSON report and
//! the plots. Timings are not checked — they are the benchmark's to report, not a test's.

use std::process::Command;

#[test]
fn bench_mpi_quick_vader_produces_report_and_plots() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-mpi-smoke");
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(env!("CARGO_BIN_EXE_tigon"))
        .args([
            "bench",
            "mpi",
            "--quick",
            "--only",
            "vader",
            "--sizes",
            "0,1K,64K",
            "--budget-ms",
            "5",
        ])
        // Results go to $CARGO_TARGET_DIR/bench: keep them out of the real target/bench.
        .env("CARGO_TARGET_DIR", &dir)
        .output()
        .expect("run tigon bench mpi");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tigon bench mpi failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for heading in [
        "LogP over ob1/vader",
        "bandwidth, MB/s",
        "processor availability",
        "double buffering",
        "EMP Table 2",
        "targets",
    ] {
        assert!(stdout.contains(heading), "no {heading:?} in:\n{stdout}");
    }
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("bench/mpi.json")).expect("mpi.json"),
    )
    .expect("valid JSON");
    assert_eq!(json["bench"], "mpi");
    let t = &json["results"]["transports"][0];
    assert_eq!(t["transport"], "vader");
    assert!(t["error"].is_null(), "{}", t["error"]);
    let sizes: Vec<u64> = t["logp"]
        .as_array()
        .expect("logp rows")
        .iter()
        .map(|r| r["size"].as_u64().expect("size"))
        .collect();
    assert_eq!(sizes, [0, 1024, 65536]);
    for k in ["bandwidth", "availability", "double_buffering", "emp"] {
        assert!(!t[k].as_array().expect(k).is_empty(), "no {k} rows");
    }
    // Without a tigon run the comparisons are "not measured", never failures.
    assert!(
        json["targets"]
            .as_array()
            .expect("targets")
            .iter()
            .all(|t| t["met"].is_null())
    );
    for f in [
        "mpi_latency",
        "mpi_bandwidth",
        "mpi_availability",
        "mpi_double_buffering",
        "mpi_emp",
    ] {
        for ext in ["svg", "png"] {
            let p = dir.join(format!("bench/{f}.{ext}"));
            assert!(
                std::fs::metadata(&p).is_ok_and(|m| m.len() > 1000),
                "{}",
                p.display()
            );
        }
    }
}
