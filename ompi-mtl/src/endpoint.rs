//! Peers: each process's tigon address travels through the modex as text
//! (`02:00:00:00:00:01/3`) and is kept in `proc->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_MTL]`.
//! Peers Open MPI did not pass to add_procs (`mpi_add_procs_cutoff`, dynamic processes) are
//! looked up the first time they are used.

use crate::ffi::{self, ompi_communicator_t, ompi_proc_t};
use crate::report::{self, c_str};
use std::os::raw::c_int;
use std::sync::Mutex;
use tigon_engine::EndpointAddr;
use tigon_engine::addr::text_wire;

/// What the MTL keeps per peer process.
pub struct Endpoint {
    pub addr: EndpointAddr,
}

/// Serialises lazy additions (two threads may meet the same new peer).
static ADDING: Mutex<()> = Mutex::new(());

fn proc_name(p: *const ompi_proc_t) -> String {
    // SAFETY: `p` is a live ompi_proc_t; the shim returns Open MPI's static name buffers.
    let (name, host) = unsafe { (ffi::tigon_proc_name(p), ffi::tigon_proc_host(p)) };
    format!("{} on {}", c_str(name), c_str(host))
}

/// Reads a peer's address from the modex.
fn lookup(p: *mut ompi_proc_t) -> Result<EndpointAddr, String> {
    let mut data: *mut std::ffi::c_void = std::ptr::null_mut();
    let mut size: usize = 0;
    // SAFETY: `p` is a live ompi_proc_t and the out-pointers are valid locals.
    let rc = unsafe { ffi::tigon_modex_recv(p, &mut data, &mut size) };
    if rc != ffi::OMPI_SUCCESS || data.is_null() {
        return Err(format!(
            "no tigon address in the modex (error {rc}): did that process select tigon?"
        ));
    }
    // SAFETY: the modex returned `size` bytes at `data`, malloc'd for us.
    let bytes = unsafe { std::slice::from_raw_parts(data as *const u8, size) }.to_vec();
    // SAFETY: `data` was allocated by the modex with malloc and is ours to free.
    unsafe { libc::free(data) };
    let text = String::from_utf8_lossy(&bytes);
    let text = text.trim_end_matches('\0');
    // Agents of one job must agree on the encapsulation: say so now, not by a timeout later.
    if let Some(m) = crate::state::mtl() {
        let (ours, theirs) = (text_wire(m.client.addr_text()), text_wire(text));
        if ours != theirs {
            return Err(format!(
                "its tigon agent runs --wire {theirs} ({text}), this process's runs --wire \
                 {ours}: every agent of a job must use the same --wire"
            ));
        }
    }
    text.parse::<EndpointAddr>()
}

fn add_one(p: *mut ompi_proc_t) -> c_int {
    // SAFETY: `p` is a live ompi_proc_t.
    if !unsafe { ffi::tigon_proc_endpoint(p) }.is_null() {
        return ffi::OMPI_SUCCESS;
    }
    match lookup(p) {
        Ok(addr) => {
            report::verbose(10, &format!("peer {}: {addr}", proc_name(p)));
            let ep = Box::into_raw(Box::new(Endpoint { addr }));
            // SAFETY: `p` is live; the slot takes ownership of the box until del_procs.
            unsafe { ffi::tigon_proc_set_endpoint(p, ep.cast()) };
            ffi::OMPI_SUCCESS
        }
        Err(why) => {
            let name = proc_name(p);
            report::show_help(
                "no endpoint",
                &format!("mtl:tigon: no tigon address for process {name}: {why}"),
                &name,
                &why,
            );
            ffi::OMPI_ERR_UNREACH
        }
    }
}

/// add_procs: resolves every process's address.
pub fn add_procs(procs: &[*mut ompi_proc_t]) -> c_int {
    let _g = ADDING.lock().unwrap_or_else(|p| p.into_inner());
    for &p in procs {
        let rc = add_one(p);
        if rc != ffi::OMPI_SUCCESS {
            return rc;
        }
    }
    ffi::OMPI_SUCCESS
}

/// del_procs: forgets the processes' addresses.
pub fn del_procs(procs: &[*mut ompi_proc_t]) -> c_int {
    let _g = ADDING.lock().unwrap_or_else(|p| p.into_inner());
    for &p in procs {
        // SAFETY: `p` is a live ompi_proc_t.
        let ep = unsafe { ffi::tigon_proc_endpoint(p) } as *mut Endpoint;
        if !ep.is_null() {
            // SAFETY: the slot held a box from `add_one`; clearing it first makes us its only
            // owner.
            unsafe {
                ffi::tigon_proc_set_endpoint(p, std::ptr::null_mut());
                drop(Box::from_raw(ep));
            }
        }
    }
    ffi::OMPI_SUCCESS
}

/// The address of `rank` in `comm` (its remote group for intercommunicators).
pub fn peer(comm: *mut ompi_communicator_t, rank: c_int) -> Result<EndpointAddr, c_int> {
    // SAFETY: `comm` is a live communicator and `rank` was validated by the MPI layer.
    let p = unsafe { ffi::tigon_comm_peer(comm, rank) };
    if p.is_null() {
        return Err(ffi::OMPI_ERR_BAD_PARAM);
    }
    // SAFETY: `p` is a live ompi_proc_t.
    let mut ep = unsafe { ffi::tigon_proc_endpoint(p) } as *const Endpoint;
    if ep.is_null() {
        let rc = add_procs(&[p]);
        if rc != ffi::OMPI_SUCCESS {
            return Err(rc);
        }
        // SAFETY: as above.
        ep = unsafe { ffi::tigon_proc_endpoint(p) } as *const Endpoint;
    }
    // SAFETY: a non-null slot holds an `Endpoint` box from `add_one`, freed only by del_procs,
    // which Open MPI calls once no communicator uses the process.
    unsafe { ep.as_ref() }
        .map(|e| e.addr)
        .ok_or(ffi::OMPI_ERR_UNREACH)
}
