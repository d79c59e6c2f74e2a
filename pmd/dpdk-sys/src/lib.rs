//! Raw bindings to the system DPDK (22.11), generated at build time, plus `tigon_*` exports of
//! DPDK's static-inline fast path (rx/tx burst, mbuf helpers, dmadev enqueue/complete,
//! `rte_errno`). Safe wrappers live in `tigon-pmd`; nothing else should use this crate.
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code
)]
#![allow(clippy::all)]
#![allow(unnecessary_transmutes, unsafe_op_in_unsafe_fn)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
