//! The module: the twelve calls of `mca_mtl_base_module_t`.
//!
//! Matching: context = `comm->c_contextid`, tag, and the sender's rank in the communicator
//! (`tigon_engine::matching`). Payloads up to the channel size are copied through the
//! shared-memory channel (a standard-mode send of that size is complete at once); longer ones
//! are read and written in place by the agent and complete when the agent says so.

use crate::ffi::{
    self, Shared, mca_mtl_base_module_t, mca_mtl_request_t, mca_pml_base_send_mode_t,
    ompi_communicator_t, ompi_message_t, ompi_proc_t, ompi_status_public_t, opal_convertor_t,
};
use crate::params::params;
use crate::report::trace;
use crate::request::{self, Kind, Request, State};
use crate::state::{self, Mtl, mtl};
use crate::{endpoint, message, report, wait};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use tigon_client::{RecvBuf, RecvInto};
use tigon_engine::matching::{match_bits, split_bits};
use tigon_engine::{Dest, MatchSpec, SendMode};

static MODULE: Shared<mca_mtl_base_module_t> = Shared::new(mca_mtl_base_module_t {
    // Context ids and tags are 32 bits each in tigon's match bits.
    mtl_max_contextid: i32::MAX,
    mtl_max_tag: i32::MAX,
    mtl_request_size: std::mem::size_of::<Request>(),
    mtl_flags: 0,
    mtl_add_procs: Some(add_procs),
    mtl_del_procs: Some(del_procs),
    mtl_finalize: Some(finalize),
    mtl_send: Some(send),
    mtl_isend: Some(isend),
    mtl_irecv: Some(irecv),
    mtl_iprobe: Some(iprobe),
    mtl_imrecv: Some(imrecv),
    mtl_improbe: Some(improbe),
    mtl_cancel: Some(cancel),
    mtl_add_comm: Some(add_comm),
    mtl_del_comm: Some(del_comm),
});

pub fn module_ptr() -> *mut mca_mtl_base_module_t {
    MODULE.get()
}

/// The attached MTL, or the error every call returns without one.
fn attached() -> Result<&'static Mtl, c_int> {
    mtl().ok_or(ffi::OMPI_ERR_UNREACH)
}

fn procs<'a>(n: usize, p: *mut *mut ompi_proc_t) -> &'a [*mut ompi_proc_t] {
    if n == 0 || p.is_null() {
        return &[];
    }
    // SAFETY: Open MPI passes an array of `n` process pointers, valid during the call.
    unsafe { std::slice::from_raw_parts(p, n) }
}

unsafe extern "C" fn add_procs(
    _mtl: *mut mca_mtl_base_module_t,
    n: usize,
    p: *mut *mut ompi_proc_t,
) -> c_int {
    if let Some(reason) = state::unusable() {
        report::always(&format!(
            "mtl:tigon: MPI_Init fails: tigon was requested but cannot be used: {reason}"
        ));
        return ffi::OMPI_ERR_UNREACH;
    }
    endpoint::add_procs(procs(n, p))
}

unsafe extern "C" fn del_procs(
    _mtl: *mut mca_mtl_base_module_t,
    n: usize,
    p: *mut *mut ompi_proc_t,
) -> c_int {
    endpoint::del_procs(procs(n, p))
}

unsafe extern "C" fn finalize(_mtl: *mut mca_mtl_base_module_t) -> c_int {
    finalize_mtl()
}

/// Finalize: let sends that completed early finish their transfer, wait until every process
/// of the job got that far, then detach.
///
/// The fence matters: detaching closes this endpoint in the agent, which then stops
/// acknowledging. A process that detached right after receiving its last message could leave
/// that message's sender waiting for an acknowledgement until the peer timeout.
fn finalize_mtl() -> c_int {
    if let Some(m) = mtl() {
        let deadline = Instant::now() + params().finalize_timeout;
        while m.detached_sends.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
            if request::progress_now() == 0 {
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
    request::unregister_progress();
    state::detach();
    ffi::OMPI_SUCCESS
}

unsafe extern "C" fn add_comm(
    _mtl: *mut mca_mtl_base_module_t,
    _comm: *mut ompi_communicator_t,
) -> c_int {
    ffi::OMPI_SUCCESS
}

unsafe extern "C" fn del_comm(
    _mtl: *mut mca_mtl_base_module_t,
    _comm: *mut ompi_communicator_t,
) -> c_int {
    ffi::OMPI_SUCCESS
}

/// (context, my rank) of a communicator.
fn comm_ids(comm: *mut ompi_communicator_t) -> (u32, u32) {
    // SAFETY: `comm` is a live communicator passed by the PML.
    unsafe { (ffi::tigon_comm_cid(comm), ffi::tigon_comm_rank(comm) as u32) }
}

fn send_mode(mode: mca_pml_base_send_mode_t) -> SendMode {
    if mode == ffi::MCA_PML_BASE_SEND_SYNCHRONOUS {
        SendMode::Synchronous
    } else {
        // Standard, buffered (the PML already copied into the attached buffer) and ready.
        SendMode::Standard
    }
}

/// A send's packed payload.
struct Packed {
    buf: *mut u8,
    len: usize,
    free_after: bool,
}

fn pack(conv: *mut opal_convertor_t) -> Result<Packed, c_int> {
    let mut buf: *mut std::ffi::c_void = std::ptr::null_mut();
    let (mut len, mut free_after) = (0usize, false);
    // SAFETY: `conv` is the PML's prepared convertor; the out-pointers are valid locals.
    let rc = unsafe { ffi::tigon_pack(conv, &mut buf, &mut len, &mut free_after) };
    if rc != ffi::OMPI_SUCCESS {
        return Err(rc);
    }
    Ok(Packed {
        buf: buf.cast(),
        len,
        free_after,
    })
}

impl Packed {
    fn bytes(&self) -> &[u8] {
        if self.len == 0 || self.buf.is_null() {
            return &[];
        }
        // SAFETY: pack returned `len` readable bytes at `buf`, valid until we free them or
        // the send completes (the caller's buffer is not modified during a send).
        unsafe { std::slice::from_raw_parts(self.buf, self.len) }
    }
    fn free(&self) {
        if self.free_after && !self.buf.is_null() {
            // SAFETY: the convertor malloc'd this bounce buffer for us.
            unsafe { libc::free(self.buf.cast()) };
        }
    }
}

/// How a send was started.
enum Started {
    /// Copied into the channel, standard mode: complete at the MPI level already.
    Detached,
    /// Completes through `ctx` (the request).
    Notified,
}

/// The arguments of a send call.
struct SendCall {
    comm: *mut ompi_communicator_t,
    dest: c_int,
    tag: c_int,
    conv: *mut opal_convertor_t,
    mode: mca_pml_base_send_mode_t,
}

/// Starts a send; the request `req` (kind Send or SendWait) completes through progress unless
/// the send is `Detached`.
fn start_send(m: &Mtl, call: SendCall, req: *mut Request, kind: Kind) -> Result<Started, c_int> {
    let SendCall {
        comm,
        dest,
        tag,
        conv,
        mode,
    } = call;
    // SAFETY: `req` points to request memory owned by this call until notified (a cancel of
    // the PML request reads its kind).
    unsafe { request::start(req.cast(), State::new(kind, std::ptr::null_mut(), 0, false)) };
    let (peer, on_host): (Dest, bool) = endpoint::peer(comm, dest)?;
    wait::touch_send(on_host);
    let (cid, me) = comm_ids(comm);
    let bits = match_bits(cid, tag);
    let mode = send_mode(mode);
    let data = pack(conv)?;
    let small = data.len as u64 <= m.channel_max;
    trace!(
        "send {req:p} to {dest} ({peer}) cid {cid} tag {tag} len {} mode {mode:?}",
        data.len
    );
    if small && mode == SendMode::Standard {
        // The client copies into the channel: the user's buffer is free again at once.
        m.detached_sends.fetch_add(1, Ordering::AcqRel);
        let r = m.client.isend(peer, bits, me, data.bytes(), mode);
        data.free();
        return match r.and_then(|r| m.client.notify(r, 0)) {
            Ok(()) => Ok(Started::Detached),
            Err(e) => {
                m.detached_sends.fetch_sub(1, Ordering::AcqRel);
                request::failure(m, &e);
                Err(ffi::OMPI_ERR_UNREACH)
            }
        };
    }
    // Counted until its completion (or failure to start): a wait on it may sleep.
    let bulk = if small { 0 } else { data.len };
    wait::bulk_started(bulk);
    let r = if small {
        let r = m.client.isend(peer, bits, me, data.bytes(), mode);
        data.free();
        r
    } else {
        // SAFETY: as above; the packed buffer (user's or bounce) stays valid until completion.
        unsafe {
            request::start(
                req.cast(),
                State::new(kind, data.buf, data.len, data.free_after),
            )
        };
        m.client
            .isend_raw(peer, bits, me, data.buf, data.len, mode)
            .inspect_err(|_| data.free())
    };
    let r = r.and_then(|r| {
        // SAFETY: the request is ours until notified; its completion checks this field.
        unsafe { (*req).st.op = Some(r) };
        m.client.notify(r, req as u64)
    });
    match r {
        Ok(()) => Ok(Started::Notified),
        Err(e) => {
            wait::bulk_over(bulk);
            request::failure(m, &e);
            Err(ffi::OMPI_ERR_UNREACH)
        }
    }
}

unsafe extern "C" fn send(
    _mtl: *mut mca_mtl_base_module_t,
    comm: *mut ompi_communicator_t,
    dest: c_int,
    tag: c_int,
    conv: *mut opal_convertor_t,
    mode: mca_pml_base_send_mode_t,
) -> c_int {
    let m = match attached() {
        Ok(m) => m,
        Err(rc) => return rc,
    };
    let mut req = Request {
        sup: mca_mtl_request_t {
            ompi_req: std::ptr::null_mut(),
            completion_callback: None,
        },
        st: State::new(Kind::SendWait, std::ptr::null_mut(), 0, false),
    };
    let p: *mut Request = &mut req;
    let call = SendCall {
        comm,
        dest,
        tag,
        conv,
        mode,
    };
    match start_send(m, call, p, Kind::SendWait) {
        Ok(Started::Detached) => ffi::OMPI_SUCCESS,
        Ok(Started::Notified) => {
            // SAFETY: `p` is our own stack request; completions only use shared access to its
            // state, and `done` is the last thing they write.
            let st = unsafe { &(*p).st };
            while !st.done.load(Ordering::Acquire) {
                // SAFETY: plain call into Open MPI's progress engine (runs our callback).
                unsafe { ffi::tigon_opal_progress() };
            }
            match st.error.load(Ordering::Relaxed) {
                e if e == ffi::MPI_SUCCESS as c_int => ffi::OMPI_SUCCESS,
                e => e,
            }
        }
        Err(rc) => rc,
    }
}

unsafe extern "C" fn isend(
    _mtl: *mut mca_mtl_base_module_t,
    comm: *mut ompi_communicator_t,
    dest: c_int,
    tag: c_int,
    conv: *mut opal_convertor_t,
    mode: mca_pml_base_send_mode_t,
    _blocking: bool,
    mtl_request: *mut mca_mtl_request_t,
) -> c_int {
    let m = match attached() {
        Ok(m) => m,
        Err(rc) => return rc,
    };
    let call = SendCall {
        comm,
        dest,
        tag,
        conv,
        mode,
    };
    match start_send(m, call, mtl_request.cast(), Kind::Send) {
        Ok(Started::Detached) => {
            // SAFETY: the PML set up `mtl_request` (ompi_req, callback) before calling us; it
            // is complete now and we do not touch it after the callback.
            unsafe {
                ffi::tigon_request_error(mtl_request, ffi::MPI_SUCCESS as c_int);
                ffi::tigon_request_callback(mtl_request);
            }
            ffi::OMPI_SUCCESS
        }
        Ok(Started::Notified) => ffi::OMPI_SUCCESS,
        Err(rc) => rc,
    }
}

/// Where a receive lands: (buffer, length, bounce buffer?).
fn recv_buf(conv: *mut opal_convertor_t) -> Result<(*mut u8, usize, bool), c_int> {
    let mut buf: *mut std::ffi::c_void = std::ptr::null_mut();
    let (mut len, mut free_after) = (0usize, false);
    // SAFETY: `conv` is the PML's prepared convertor; the out-pointers are valid locals.
    let rc = unsafe { ffi::tigon_recv_buf(conv, &mut buf, &mut len, &mut free_after) };
    if rc != ffi::OMPI_SUCCESS {
        return Err(rc);
    }
    if len > 0 && buf.is_null() {
        return Err(ffi::OMPI_ERR_OUT_OF_RESOURCE);
    }
    Ok((buf.cast(), len, free_after))
}

/// What to post: a receive matching a spec, or the message of an mprobe.
enum Target {
    Match(MatchSpec),
    Message(message::Taken),
}

static HOOK_MISSING_TOLD: AtomicBool = AtomicBool::new(false);

/// Posts a receive for the PML request `mtl_request`.
fn post_recv(
    m: &Mtl,
    target: Target,
    conv: *mut opal_convertor_t,
    mtl_request: *mut mca_mtl_request_t,
) -> c_int {
    let (buf, len, free_after) = match recv_buf(conv) {
        Ok(b) => b,
        Err(rc) => return rc,
    };
    wait::touch();
    let mut st = State::new(Kind::Recv, buf, len, free_after);
    st.convertor = conv;
    // SAFETY: the PML hands us its request for this receive; nothing else refers to it yet.
    let req = unsafe { request::start(mtl_request, st) };
    // MPI_Request_free of this receive while it is active must reach us (see request.rs).
    // SAFETY: the PML set up the request's ompi_req before calling us.
    if !unsafe { ffi::tigon_hook_request_free(mtl_request) }
        && !HOOK_MISSING_TOLD.swap(true, Ordering::Relaxed)
    {
        report::always(
            "mtl:tigon: cannot watch MPI_Request_free of receives (an unknown PML request \
             type): a receive freed while active may still write its buffer",
        );
    }
    // SAFETY: `buf` holds `len` writable bytes (the user's buffer or a bounce buffer) that the
    // PML keeps alive and untouched until this request completes; a free of the request
    // while active abandons it first (`tigon_request_freeing`: the client then copies no
    // lent fragment there).
    let direct = RecvInto::Raw(unsafe { RecvBuf::new(buf, len) });
    // Small receives go through a channel buffer when one is free, else straight into `buf`.
    let cap = if len as u64 <= m.channel_max {
        len as u64
    } else {
        u64::MAX
    };
    // An mprobed message already whole at the node is received before MPI_Imrecv returns,
    // as Open MPI's own PMLs do: a program that tests such a request once and drops it (with
    // its buffer) must not get its buffer written later.
    let mut now = false;
    // Counted until its completion (or failure to start): a wait on it may sleep.
    wait::bulk_started(len);
    let posted = match target {
        // A payload that comes through a channel buffer is copied from there straight into
        // `buf` when the receive completes (request.rs): one copy on this core.
        Target::Match(spec) => m.client.irecv_or_lease(spec, cap, direct),
        Target::Message(t) => {
            now = t.arrived;
            m.client.imrecv_or_lease(t.handle, cap, direct)
        }
    };
    let r = posted.and_then(|(r, channel)| {
        trace!("recv {req:p} len {len} channel {channel} now {now} -> {r:?}");
        // SAFETY: the request is ours until notified; cancel, abandon and the completion read
        // these fields later.
        unsafe {
            (*req).st.op = Some(r);
            (*req).st.direct = !channel;
        }
        if now {
            let result = m.client.wait(r);
            // SAFETY: `req` holds operation `r`, which nothing else completes (not notified).
            unsafe { request::complete(m, req as u64, r, result) };
            // A synchronous send this receive matched on this node completed with it.
            request::progress_now();
            return Ok(());
        }
        m.client.notify(r, req as u64)
    });
    match r {
        Ok(()) => ffi::OMPI_SUCCESS,
        Err(e) => {
            wait::bulk_over(len);
            // SAFETY: as above; nothing will complete this request.
            unsafe {
                (*req)
                    .st
                    .phase
                    .store(request::phase::IDLE, Ordering::Release)
            };
            if free_after {
                // SAFETY: the bounce buffer was malloc'd for this receive, which never started.
                unsafe { libc::free(buf.cast()) };
            }
            request::failure(m, &e);
            ffi::OMPI_ERR_UNREACH
        }
    }
}

unsafe extern "C" fn irecv(
    _mtl: *mut mca_mtl_base_module_t,
    comm: *mut ompi_communicator_t,
    src: c_int,
    tag: c_int,
    conv: *mut opal_convertor_t,
    mtl_request: *mut mca_mtl_request_t,
) -> c_int {
    let m = match attached() {
        Ok(m) => m,
        Err(rc) => return rc,
    };
    let (cid, _) = comm_ids(comm);
    trace!("irecv {mtl_request:p} cid {cid} src {src} tag {tag}");
    post_recv(
        m,
        Target::Match(MatchSpec::mpi(cid, src, tag)),
        conv,
        mtl_request,
    )
}

/// Fills a probe's `status` for the message `s` found (source, tag, length); nothing for
/// MPI_STATUS_IGNORE (null).
///
/// # Safety
/// `status` is null or a valid status from Open MPI.
unsafe fn probe_status(status: *mut ompi_status_public_t, s: &tigon_client::Status) {
    if status.is_null() {
        return;
    }
    let tag = split_bits(s.match_bits).1;
    // SAFETY: non-null, valid per this function's contract.
    unsafe {
        ffi::tigon_status_set(
            status,
            s.source as c_int,
            tag,
            ffi::MPI_SUCCESS as c_int,
            s.len as usize,
        )
    };
}

unsafe extern "C" fn iprobe(
    _mtl: *mut mca_mtl_base_module_t,
    comm: *mut ompi_communicator_t,
    src: c_int,
    tag: c_int,
    flag: *mut c_int,
    status: *mut ompi_status_public_t,
) -> c_int {
    let m = match attached() {
        Ok(m) => m,
        Err(rc) => return rc,
    };
    let (cid, _) = comm_ids(comm);
    match m.client.iprobe(MatchSpec::mpi(cid, src, tag)) {
        Ok(found) => {
            // SAFETY: Open MPI passes a valid `flag` and a valid (or null: MPI_STATUS_IGNORE)
            // status.
            unsafe {
                *flag = found.is_some() as c_int;
                if let Some(s) = &found {
                    probe_status(status, s);
                }
            }
            if found.is_none() {
                request::progress_now();
            }
            ffi::OMPI_SUCCESS
        }
        Err(e) => {
            request::failure(m, &e);
            ffi::OMPI_ERR_UNREACH
        }
    }
}

unsafe extern "C" fn improbe(
    _mtl: *mut mca_mtl_base_module_t,
    comm: *mut ompi_communicator_t,
    src: c_int,
    tag: c_int,
    matched: *mut c_int,
    msg: *mut *mut ompi_message_t,
    status: *mut ompi_status_public_t,
) -> c_int {
    let m = match attached() {
        Ok(m) => m,
        Err(rc) => return rc,
    };
    let (cid, _) = comm_ids(comm);
    match m.client.improbe(MatchSpec::mpi(cid, src, tag)) {
        Ok(Some((s, handle))) => {
            let taken = message::Taken {
                handle,
                arrived: s.received == s.len,
            };
            let rc = message::matched(comm, s.source as c_int, s.len, taken, msg);
            if rc != ffi::OMPI_SUCCESS {
                return rc;
            }
            // SAFETY: valid out-pointers from Open MPI (status may be MPI_STATUS_IGNORE).
            unsafe {
                *matched = 1;
                probe_status(status, &s);
            }
            ffi::OMPI_SUCCESS
        }
        Ok(None) => {
            // SAFETY: valid out-pointers from Open MPI.
            unsafe {
                *matched = 0;
                ffi::tigon_message_null(msg);
            }
            request::progress_now();
            ffi::OMPI_SUCCESS
        }
        Err(e) => {
            request::failure(m, &e);
            ffi::OMPI_ERR_UNREACH
        }
    }
}

unsafe extern "C" fn imrecv(
    _mtl: *mut mca_mtl_base_module_t,
    conv: *mut opal_convertor_t,
    msg: *mut *mut ompi_message_t,
    mtl_request: *mut mca_mtl_request_t,
) -> c_int {
    let m = match attached() {
        Ok(m) => m,
        Err(rc) => return rc,
    };
    let Some(taken) = message::take(msg) else {
        return ffi::OMPI_ERR_BAD_PARAM;
    };
    post_recv(m, Target::Message(taken), conv, mtl_request)
}

unsafe extern "C" fn cancel(
    _mtl: *mut mca_mtl_base_module_t,
    mtl_request: *mut mca_mtl_request_t,
    _flag: c_int,
) -> c_int {
    let m = match attached() {
        Ok(m) => m,
        Err(rc) => return rc,
    };
    // Deliver completions first: a receive that already matched is not cancelled.
    request::progress_now();
    // SAFETY: the PML passes one of its live requests whose MTL part we initialised when the
    // operation started (the user still holds it, so it has not been freed).
    let st = unsafe { &(*mtl_request.cast::<Request>()).st };
    if st.kind != Kind::Recv {
        return ffi::OMPI_SUCCESS; // sends are not cancelled (as in Open MPI's other MTLs)
    }
    let Some(r) = st.op else {
        return ffi::OMPI_SUCCESS;
    };
    match m.client.cancel(r) {
        // Cancelled: the receive completes (with `_cancelled` set) through progress.
        Ok(_) => ffi::OMPI_SUCCESS,
        // Already finished and handed back: nothing to cancel.
        Err(tigon_client::Error::BadRequest) => ffi::OMPI_SUCCESS,
        Err(e) => {
            request::failure(m, &e);
            ffi::OMPI_ERR_UNREACH
        }
    }
}
