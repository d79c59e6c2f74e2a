//! The README's cluster guide is what these tests run, so it cannot rot:
//! - `scripts/guide-local.sh` (printed verbatim at the end of the guide) runs on a staged
//!   install: two nodes (namespaces joined by a veth pair), each prepared by the pre-start
//!   script and its agent started from its configuration as the systemd unit does, `tigon
//!   doctor` on each, NetPIPE across them with the MTL, `tigon stats` — whose counters the
//!   guide's table names;
//! - every command of the guide's `sh guide` blocks, and every `tigon` command and option,
//!   script, make target, environment variable, agent.json key and installed file its text
//!   names, exists (in the tree, in `tigon ... --help`, in a staged `scripts/install.sh`);
//! - the pre-start script's `--dry-run` on the example configuration, as the guide shows it;
//! - the systemd unit passes `systemd-analyze verify`;
//! - `docker/compose.yaml` is valid against the Compose Specification's schema and
//!   consistent with itself, its job's `mpirun` command runs against two local agents, and
//!   every `RUN` step of the Dockerfile is a script or make target that `make test` runs.
//!
//! Installs go to a temporary `--destdir`, never to the real /usr/local or /etc.
//!
//! The tests, by job, in `tests/guide/`: `text` (what the guide says), `install` (what it
//! installs), `docker` (the container files) and `run` (the guide's jobs, which start agents:
//! only they are in the `dpdk-pinned` nextest group). What they share: `files`, `staged`
//! (a staged install), `readme` (the guide's blocks and spans), `checks` (that what the guide
//! names exists), `compose` (docker/compose.yaml) and `job` (running a command and all it
//! starts).

mod common;

mod guide {
    mod checks;
    mod compose;
    mod files;
    mod job;
    mod readme;
    mod staged;

    mod docker;
    mod install;
    mod run;
    mod text;
}
