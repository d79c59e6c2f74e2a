//! `mca_mtl_tigon.so`: the Open MPI 4.1 MTL component of tigon. Each rank attaches to its
//! node's agent (`tigon agent`) through `tigon-client`; the cm PML then hands every MPI
//! point-to-point operation to this component, which forwards it to the agent's engine.
//!
//! Layout (as Open MPI's own components), each file importing only those after it:
//! [`component`] (the exported `mca_mtl_tigon_component`, selection and init) →
//! [`module`] (the twelve calls, and finalize) → [`request`] (completions and progress),
//! [`endpoint`] (peer addresses through the modex), [`message`] (matched probes) →
//! [`state`] (the attached client), [`params`] (MCA parameters) → [`report`] (show_help,
//! output, C strings) → [`ffi`] (bindgen over Open MPI's devel headers plus the C shim in
//! `csrc/`).
//!
//! Use: put `mca_mtl_tigon.so` (see `tests/common` for the copy the tests make) and
//! `help-mtl-tigon.txt` in a directory and run
//! `mpirun --mca mca_base_component_path <dir>:/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
//! --mca pml cm --mca mtl tigon ...`.

#![deny(clippy::undocumented_unsafe_blocks)]

mod component;
mod endpoint;
pub mod ffi;
mod message;
mod module;
mod params;
mod report;
mod request;
mod state;
mod wait;

pub use component::mca_mtl_tigon_component;
pub use request::Request;
