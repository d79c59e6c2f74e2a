// Records the build's git revision so `tigon --version` names the exact tree it came from.
use std::process::Command;

fn main() {
    let rev = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=TIGON_GIT_REV={rev}");
    println!("cargo:rerun-if-changed=.git/HEAD");
}
