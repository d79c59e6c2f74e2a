//! The component: the exported `mca_mtl_tigon_component`, selection (attach to the node
//! agent, or decline with a reason) and initialisation, which hands Open MPI the module.

use crate::ffi::{
    self, Shared, c_name, mca_base_component_2_1_0_t, mca_mtl_base_component_2_0_0_t,
};
use crate::params::{checked, params};
use crate::state::{self, Mtl, mtl};
use crate::{module, report, request, wait};
use std::ffi::CString;
use std::os::raw::c_int;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use tigon_client::Client;

/// The component structure Open MPI looks up by name after `dlopen`ing the .so.
#[unsafe(no_mangle)]
pub static mca_mtl_tigon_component: Shared<mca_mtl_base_component_2_0_0_t> =
    Shared::new(mca_mtl_base_component_2_0_0_t {
        mtl_version: mca_base_component_2_1_0_t {
            // MCA_MTL_BASE_VERSION_2_0_0 = OMPI_MCA_BASE_VERSION_2_1_0("mtl", 2, 0, 0)
            mca_major_version: ffi::MCA_BASE_VERSION_MAJOR as c_int,
            mca_minor_version: ffi::MCA_BASE_VERSION_MINOR as c_int,
            mca_release_version: ffi::MCA_BASE_VERSION_RELEASE as c_int,
            mca_project_name: c_name("ompi"),
            mca_project_major_version: ffi::OMPI_MAJOR_VERSION as c_int,
            mca_project_minor_version: ffi::OMPI_MINOR_VERSION as c_int,
            mca_project_release_version: ffi::OMPI_RELEASE_VERSION as c_int,
            mca_type_name: c_name("mtl"),
            mca_type_major_version: 2,
            mca_type_minor_version: 0,
            mca_type_release_version: 0,
            mca_component_name: c_name("tigon"),
            mca_component_major_version: 0,
            mca_component_minor_version: 1,
            mca_component_release_version: 0,
            mca_open_component: Some(component_open),
            mca_close_component: Some(component_close),
            mca_query_component: Some(component_query),
            mca_register_component_params: Some(component_register),
            mca_component_flags: 0,
            reserved: [0; 28],
        },
        mtl_data: ffi::mca_base_component_data_2_0_0_t {
            param_field: 0, // MCA_BASE_METADATA_PARAM_NONE: not checkpoint ready
            reserved: [0; 32],
        },
        mtl_init: Some(component_init),
    });

unsafe extern "C" fn component_register() -> c_int {
    // SAFETY: plain call into the shim, which registers variables of this component.
    unsafe { ffi::tigon_register_params() }
}

unsafe extern "C" fn component_open() -> c_int {
    // SAFETY: plain call into the shim (opens an opal_output stream).
    unsafe { ffi::tigon_output_open(params().verbose) };
    ffi::OMPI_SUCCESS
}

unsafe extern "C" fn component_close() -> c_int {
    // Selected elsewhere, or finalized: either way nothing uses the client any more.
    request::unregister_progress();
    state::detach();
    // SAFETY: plain call into the shim.
    unsafe { ffi::tigon_output_close() };
    ffi::OMPI_SUCCESS
}

/// Selection: attach to the node agent. No agent: decline with a one-line reason (another
/// transport takes over), unless tigon was explicitly requested.
unsafe extern "C" fn component_query(
    module: *mut *mut ffi::mca_base_module_t,
    priority: *mut c_int,
) -> c_int {
    let (p, problems) = checked();
    report::set_trace(p.verbose >= 100);
    let socket = p
        .socket
        .clone()
        .unwrap_or_else(tigon_client::default_socket);
    // A refused MCA parameter: the component does not start (with the value's default in
    // its place it would do something else than asked), and says why whatever the verbosity.
    let attached = if problems.is_empty() {
        Client::attach(&socket).map_err(|e| e.to_string())
    } else {
        Err(problems.join("; "))
    };
    match attached {
        Ok(client) => {
            let data = client.data_size();
            let channel_max = match p.channel_threshold {
                t if t > 0 => (t as u64).min(data),
                _ => data,
            };
            report::verbose(
                10,
                &format!(
                    "attached to the agent at {}: endpoint {}, eager limit {} B, channel buffers {} B",
                    socket.display(),
                    client.addr(),
                    client.eager_limit(),
                    data
                ),
            );
            // A second query (should not happen) replaces the first attachment.
            state::attach(Mtl {
                client,
                channel_max,
                detached_sends: AtomicUsize::new(0),
                failure_reported: AtomicBool::new(false),
            });
        }
        Err(reason) => {
            // SAFETY: plain calls into the shim reading MCA variables.
            let (mtl_asked, cm_asked) =
                unsafe { (ffi::tigon_mtl_requested(), ffi::tigon_pml_cm_requested()) };
            if !mtl_asked {
                let line = format!("mtl:tigon: not used: {reason}");
                if cm_asked || p.verbose >= 1 || !problems.is_empty() {
                    report::always(&line);
                }
                return ffi::OMPI_ERR_NOT_AVAILABLE;
            }
            report::show_help(
                if problems.is_empty() {
                    "no agent"
                } else {
                    "bad parameter"
                },
                &format!(
                    "The tigon MTL was explicitly requested (--mca mtl tigon), but this process \
                     cannot use it: {reason}"
                ),
                &report::hostname(),
                &reason,
            );
            state::set_unusable(reason);
        }
    }
    // SAFETY: Open MPI passes valid out-pointers to query functions.
    unsafe {
        *module = module::module_ptr().cast();
        *priority = p.priority;
    }
    ffi::OMPI_SUCCESS
}

unsafe extern "C" fn component_init(
    _enable_progress_threads: bool,
    _enable_mpi_threads: bool,
) -> *mut ffi::mca_mtl_base_module_t {
    let Some(m) = mtl() else {
        // Explicitly requested without an agent: selected anyway so that add_procs fails
        // MPI_Init with the reason printed at query time.
        return module::module_ptr();
    };
    let addr = CString::new(m.client.addr_text()).expect("no NUL in an address");
    let bytes = addr.as_bytes();
    // SAFETY: `bytes` is valid for its length during the call; the modex copies it.
    let rc = unsafe { ffi::tigon_modex_send(bytes.as_ptr().cast(), bytes.len()) };
    if rc != ffi::OMPI_SUCCESS {
        report::always(&format!(
            "mtl:tigon: publishing this endpoint's address through the modex failed ({rc})"
        ));
        return ptr::null_mut();
    }
    // SAFETY: plain call into the shim (stores the informational eager_limit variable).
    unsafe { ffi::tigon_set_eager_limit(m.client.eager_limit().min(i32::MAX as u64) as c_int) };
    if request::register_progress() != ffi::OMPI_SUCCESS {
        return ptr::null_mut();
    }
    // Ranks poll; they yield between polls where Open MPI asks (mpi_yield_when_idle, which
    // opal_progress does), and sleep on the channel only after a long idle (the progress
    // callback), so an idle job costs no processor and a busy one no wake-up.
    // SAFETY: plain call into the shim (reads Open MPI's yield setting).
    let yielding = unsafe { ffi::tigon_yield_when_idle() };
    tigon_client::set_wait_policy(yielding, params().nap_after);
    // SAFETY: plain call into the shim (reads the runtime's count of local processes).
    let local = unsafe { ffi::tigon_local_ranks() }.max(1) as usize;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let spins = wait::spin_after_send_pays(yielding, local, cpus);
    wait::set_spin_after_send(params().spin_after_send, spins);
    if let Some(after) = params().nap_after {
        wait::nap_when_idle(after, yielding);
    }
    report::verbose(
        10,
        &format!(
            "waiting: poll{}, sleep after {:?} idle; {local} ranks on this host, {cpus} CPUs \
             here: poll {:?} after a send to this host{}",
            if yielding { " and sched_yield" } else { "" },
            params().nap_after,
            params().spin_after_send,
            if spins { "" } else { " (off)" }
        ),
    );
    module::module_ptr()
}
