//! tigon's benchmarks. Each returns rows that [`report`] prints as a table and saves as JSON
//! under `target/bench/`.

pub mod dma;
pub mod engine;
pub mod host;
pub mod mpi;
pub mod plot;
pub mod report;
pub mod scale;
