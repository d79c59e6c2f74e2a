//! `tigon bench mpi`: one MPI program (`bench/mpi/*.c`, compiled with `mpicc` at run
//! time) run under tigon, under ob1/tcp and under ob1/vader, side by side.
//!
//! The program prints JSON lines (raw per-iteration timings where a distribution matters);
//! this module turns them into the seeds' quantities — LogP (seed 002 Fig. 3), bandwidth three
//! ways (seed 002 Fig. 9), processor availability (seed 001 Fig. 9–11), double buffering
//! (seed 000 Fig. 7), EMP's loop (seed 003 Table 2, Fig. 6) — with hdrhistogram percentiles,
//! tables, ratios tigon/tcp and the targets. Launching (agents for tigon) is the caller's.
//!
//! The rooms, in the order a run goes through them: `options` (transports, sizes, the
//! program's arguments) → `launch` (build the program, run it under mpirun) → `record`
//! (its JSON lines) → `summary` (one transport's quantities) → `targets` → `render`.

mod launch;
mod options;
mod record;
mod render;
mod summary;
mod targets;

pub use launch::{SOURCES, command_line, compile, ob1_command, run_program};
pub use options::{
    Opts, QUICK_SIZES, Transport, human_size, parse_only, parse_sizes, program_args,
};
pub use record::{Record, parse_lines};
pub use render::render;
pub use summary::{
    AvailRow, BwRow, CopyRow, DbufRow, EmpRow, LogpRow, MpiReport, Pct, TransportResult, pct,
    summarize,
};
pub use targets::{avail_at, dbuf_peak, targets};
