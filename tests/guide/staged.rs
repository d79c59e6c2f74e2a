//! The build and a staged install: `scripts/install.sh` into a scratch root.

use super::files::repo;
use crate::common::{TIGON, TestDir};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>`, where cargo put `tigon` and `libmca_mtl_tigon.so`.
pub fn profile_dir() -> PathBuf {
    Path::new(TIGON)
        .parent()
        .expect("tigon lives in target/<profile>")
        .to_path_buf()
}

/// The built component (`cargo nextest run --workspace` builds it; built here when only this
/// package's tests were built).
pub fn built_mtl() -> PathBuf {
    let so = profile_dir().join("libmca_mtl_tigon.so");
    if !so.exists() {
        let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        c.args(["build", "-j2", "-p", "tigon-ompi-mtl", "--lib"]);
        if profile_dir().file_name().is_some_and(|n| n == "release") {
            c.arg("--release");
        }
        c.env(
            "CARGO_TARGET_DIR",
            profile_dir().parent().expect("target dir"),
        );
        let st = c.status().expect("running cargo build -p tigon-ompi-mtl");
        assert!(st.success(), "cargo build -p tigon-ompi-mtl failed");
    }
    assert!(so.exists(), "{} missing", so.display());
    so
}

/// `scripts/install.sh --from target/<profile> --destdir <temp>`: the files a node gets,
/// under a scratch root (removed on drop).
pub struct Staged {
    pub dir: TestDir,
}

impl Staged {
    pub fn new(name: &str) -> Staged {
        built_mtl();
        let dir = TestDir::new(name);
        let o = Command::new("bash")
            .arg(repo("scripts/install.sh"))
            .arg("--from")
            .arg(profile_dir())
            .arg("--destdir")
            .arg(dir.join("root"))
            .output()
            .expect("running scripts/install.sh");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "scripts/install.sh failed:\n{err}");
        println!(
            "scripts/install.sh --destdir {}:\n{err}",
            dir.join("root").display()
        );
        Staged { dir }
    }
    /// Where the installed `abs` (e.g. `/usr/local/bin/tigon`) is.
    pub fn path(&self, abs: &str) -> PathBuf {
        self.dir.join("root").join(abs.trim_start_matches('/'))
    }
    pub fn root(&self) -> String {
        self.dir.join("root").display().to_string()
    }
    /// `text` with the installed paths moved into the staged root.
    pub fn relocate(&self, text: &str) -> String {
        let r = self.root();
        text.replace("/usr/local/", &format!("{r}/usr/local/"))
            .replace("/etc/tigon/", &format!("{r}/etc/tigon/"))
    }
}
