//! The component: the exported `mca_mtl_tigon_component`, its MCA parameters, selection
//! (attach to the node agent, or decline with a reason) and initialisation.

use crate::ffi::{
    self, Shared, c_name, mca_base_component_2_1_0_t, mca_mtl_base_component_2_0_0_t,
};
use crate::{module, report};
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int};
use std::path::PathBuf;
use std::ptr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
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

/// Everything a rank's MTL holds once attached.
pub struct Mtl {
    pub client: Client,
    /// Payloads up to this many bytes go through the channel's data buffers; longer ones are
    /// read and written in place by the agent.
    pub channel_max: u64,
    /// Sends already complete at the MPI level whose transfer is still in flight.
    pub detached_sends: AtomicUsize,
    /// A transfer failure has been reported to the user (once per process is enough).
    pub failure_reported: AtomicBool,
}

static MTL: AtomicPtr<Mtl> = AtomicPtr::new(ptr::null_mut());
/// Why the component cannot work although it was explicitly requested: selection went ahead
/// so that MPI_Init fails (in add_procs) instead of silently using another transport.
static UNUSABLE: Mutex<Option<String>> = Mutex::new(None);
static PROGRESS_REGISTERED: AtomicBool = AtomicBool::new(false);

/// The attached MTL, between selection and finalize.
pub fn mtl() -> Option<&'static Mtl> {
    let p = MTL.load(Ordering::Acquire);
    // SAFETY: `p` is null or came from `Box::into_raw` in `component_query`; it is freed only
    // by `detach`, at finalize or component close, when MPI forbids further calls into the MTL
    // (the progress callback is unregistered before).
    unsafe { p.as_ref() }
}

/// Why tigon cannot be used although it was requested (MPI_Init then fails).
pub fn unusable() -> Option<String> {
    UNUSABLE.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

fn detach() {
    let p = MTL.swap(ptr::null_mut(), Ordering::AcqRel);
    if !p.is_null() {
        // SAFETY: `p` came from `Box::into_raw` and the swap made this the only owner.
        drop(unsafe { Box::from_raw(p) });
    }
}

/// The component's MCA parameters.
pub struct Params {
    pub priority: i32,
    pub verbose: i32,
    pub socket: Option<PathBuf>,
    pub channel_threshold: i32,
    pub finalize_timeout: Duration,
    /// Spin this long before napping, when the MTL does the waiting; `None`: never nap.
    pub nap_after: Option<Duration>,
}

pub fn params() -> Params {
    // SAFETY: the shim returns a pointer to its static parameter block, valid for the life of
    // the process; Open MPI writes it only while registering variables (before any reader).
    let p = unsafe { &*ffi::tigon_params() };
    let socket = if p.socket.is_null() {
        None
    } else {
        // SAFETY: a non-null string variable is a NUL-terminated string owned by Open MPI's
        // variable system, alive until the variable is deregistered at component close.
        let s = unsafe { CStr::from_ptr(p.socket) };
        (!s.to_bytes().is_empty()).then(|| PathBuf::from(s.to_string_lossy().into_owned()))
    };
    Params {
        priority: p.priority,
        verbose: p.verbose,
        socket,
        channel_threshold: p.channel_threshold,
        finalize_timeout: Duration::from_millis(p.finalize_timeout_ms.max(0) as u64),
        nap_after: (p.nap_after_us >= 0).then(|| Duration::from_micros(p.nap_after_us as u64)),
    }
}

unsafe extern "C" fn component_register() -> c_int {
    // SAFETY: plain call into the shim, which registers variables of this component.
    unsafe { ffi::tigon_register_params() }
}

unsafe extern "C" fn component_open() -> c_int {
    // SAFETY: plain call into the shim (opens an opal_output stream).
    unsafe { ffi::tigon_output_open() };
    ffi::OMPI_SUCCESS
}

unsafe extern "C" fn component_close() -> c_int {
    // Selected elsewhere, or finalized: either way nothing uses the client any more.
    unregister_progress();
    detach();
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
    let p = params();
    report::set_trace(p.verbose >= 100);
    let socket = p
        .socket
        .clone()
        .unwrap_or_else(tigon_client::default_socket);
    match Client::attach(&socket) {
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
            let m = Box::new(Mtl {
                client,
                channel_max,
                detached_sends: AtomicUsize::new(0),
                failure_reported: AtomicBool::new(false),
            });
            detach(); // a second query (should not happen) replaces the first attachment
            MTL.store(Box::into_raw(m), Ordering::Release);
        }
        Err(e) => {
            let reason = format!("{e}");
            // SAFETY: plain calls into the shim reading MCA variables.
            let (mtl_asked, cm_asked) =
                unsafe { (ffi::tigon_mtl_requested(), ffi::tigon_pml_cm_requested()) };
            if !mtl_asked {
                let line = format!("mtl:tigon: not used: {reason}");
                if cm_asked || p.verbose >= 1 {
                    report::always(&line);
                }
                return ffi::OMPI_ERR_NOT_AVAILABLE;
            }
            report::show_help(
                "no agent",
                &format!(
                    "The tigon MTL was explicitly requested (--mca mtl tigon), but this process \
                     cannot use it: {reason}"
                ),
                &report::hostname(),
                &reason,
            );
            *UNUSABLE.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason);
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
    let addr = CString::new(m.client.addr().to_string()).expect("no NUL in an address");
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
    // SAFETY: `progress` is a plain function with the callback's signature, alive forever.
    let rc = unsafe { ffi::tigon_progress_register(Some(crate::request::progress)) };
    if rc != ffi::OMPI_SUCCESS {
        return ptr::null_mut();
    }
    PROGRESS_REGISTERED.store(true, Ordering::Release);
    // Waiting by sched_yield starves a waiting process on EEVDF kernels: when Open MPI would
    // yield, the MTL naps instead (the progress callback).
    if let Some(after) = params().nap_after
        // SAFETY: plain call into the shim (flips Open MPI's yield_when_idle before MPI_Init
        // applies it).
        && unsafe { ffi::tigon_take_over_yield() }
    {
        crate::request::nap_when_idle(after);
        report::verbose(
            10,
            &format!("waiting: spin {after:?}, then nap (no sched_yield)"),
        );
    }
    module::module_ptr()
}

fn unregister_progress() {
    if PROGRESS_REGISTERED.swap(false, Ordering::AcqRel) {
        // SAFETY: unregisters the callback registered in `component_init`.
        unsafe { ffi::tigon_progress_unregister(Some(crate::request::progress)) };
    }
}

/// Finalize: let sends that completed early finish their transfer, wait until every process
/// of the job got that far, then detach.
///
/// The fence matters: detaching closes this endpoint in the agent, which then stops
/// acknowledging. A process that detached right after receiving its last message could leave
/// that message's sender waiting for an acknowledgement until the peer timeout.
pub fn finalize() -> c_int {
    if let Some(m) = mtl() {
        let deadline = Instant::now() + params().finalize_timeout;
        while m.detached_sends.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
            if crate::request::progress_now() == 0 {
                std::thread::yield_now();
            }
        }
        let left = m.detached_sends.load(Ordering::Acquire);
        if left > 0 {
            report::always(&format!(
                "mtl:tigon: {left} send(s) still in flight at MPI_Finalize after {:?}; \
                 their receivers may not get them",
                params().finalize_timeout
            ));
        }
    }
    if mtl().is_some() {
        // SAFETY: plain call into the shim (PMIx fence; PMIx is up until after the PML is
        // finalized).
        let rc = unsafe { ffi::tigon_fence() };
        if rc != ffi::OMPI_SUCCESS {
            report::verbose(1, &format!("finalize fence failed ({rc})"));
        }
    }
    unregister_progress();
    detach();
    ffi::OMPI_SUCCESS
}

/// Converts a C string from Open MPI (may be null) for messages.
pub(crate) fn c_str(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the shim returns NUL-terminated strings owned by Open MPI that outlive this call.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}
