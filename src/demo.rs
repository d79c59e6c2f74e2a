//! `tigon demo`: the port-level demo (replaced by the MPI demo once the MTL lands).

use clap::Args;

#[derive(Args)]
pub struct DemoArgs {}

pub fn run(_a: DemoArgs) -> Result<(), String> {
    Err("the demo is being built".into())
}
