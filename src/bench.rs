//! `tigon bench ...`: measurements printed as tables and JSON.

use clap::Args;

#[derive(Args)]
pub struct BenchArgs {
    /// Which benchmark: `engine`.
    pub which: String,
}

pub fn run(a: BenchArgs) -> Result<(), String> {
    Err(format!("unknown benchmark `{}`", a.which))
}
