//! The repository's files.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// Open MPI's own component directory (Debian 12), where scripts/install.sh puts the MTL.
pub const OMPI_DIR: &str = "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3";

pub fn repo(p: &str) -> PathBuf {
    Path::new(ROOT).join(p)
}

pub fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

pub fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
