//! Peers: each process's tigon address travels through the modex as text
//! (`02:00:00:00:00:01/3`) and is kept in `proc->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_MTL]`.
//! Peers Open MPI did not pass to add_procs (`mpi_add_procs_cutoff`, dynamic processes) are
//! looked up the first time they are used.
//!
//! add_procs opens nothing: it reads each address from the modex (local data once Open MPI
//! has exchanged it) and keeps it in the process's own endpoint slot, packed into the
//! pointer-sized word itself: the endpoint id, and the index of its node in a table of the
//! nodes this process knows (the node's MAC, or IP and port, and the incarnation of its
//! agent's engine, shared by all the processes of that node): no allocation and no message
//! per process. The engine connects to a peer node on the first message to it; the
//! incarnation goes with every send, so that an agent still holding a session with an
//! earlier start of that node knows it restarted (see `tigon_engine::Dest`).

use crate::ffi::{self, ompi_communicator_t, ompi_proc_t};
use crate::report::{self, c_str};
use std::collections::HashMap;
use std::os::raw::c_int;
use std::sync::{Mutex, OnceLock};
use tigon_engine::addr::text_wire;
use tigon_engine::{Dest, EndpointAddr, MacAddr};

const _: () = assert!(
    size_of::<usize>() >= 8,
    "an address is packed into a pointer-sized slot"
);

/// Nodes per segment of the node table, and segments: 1,048,576 node incarnations.
const SEG: usize = 1024;
const SEGS: usize = 1024;

/// The nodes this process knows, each once per incarnation: a node's name for the engine
/// (MAC, or IP and port) and its incarnation. Append-only in segments that never move, so
/// that a send reads its destination's entry without a lock (two atomic loads); written
/// under `ADDING`.
static NODES: [OnceLock<Segment>; SEGS] = [const { OnceLock::new() }; SEGS];

/// A node's name for the engine and its incarnation.
type Node = (MacAddr, u32);
/// `SEG` entries of the node table, each written once.
type Segment = Box<[OnceLock<Node>]>;

/// Which index each known node incarnation has in `NODES` (under `ADDING`).
static INDEX: Mutex<Option<HashMap<Node, u32>>> = Mutex::new(None);

/// The index of `d`'s node in `NODES`, added if new (the caller holds `ADDING`).
fn node_index(d: Dest) -> Result<u32, String> {
    let mut g = INDEX.lock().unwrap_or_else(|p| p.into_inner());
    let index = g.get_or_insert_with(HashMap::new);
    let key = (d.addr.mac, d.incarnation);
    if let Some(&i) = index.get(&key) {
        return Ok(i);
    }
    let i = index.len();
    if i >= SEG * SEGS {
        return Err(format!("more than {} peer nodes", SEG * SEGS));
    }
    let seg = NODES[i / SEG].get_or_init(|| (0..SEG).map(|_| OnceLock::new()).collect());
    let _ = seg[i % SEG].set(key);
    index.insert(key, i as u32);
    Ok(i as u32)
}

/// Set in a slot's word when the process runs on this host (Open MPI's locality): it may
/// share this process's CPU, and wait on it for what this process sends (see
/// `request::spin_after_send`).
const ON_HOST: usize = 1 << 62;

/// An address as the word kept in a process's endpoint slot: 1 + its node's index in
/// `NODES`, then the endpoint id (never 0); [`ON_HOST`] for a process on this host.
fn pack(d: Dest, on_host: bool) -> Result<usize, String> {
    let host = if on_host { ON_HOST } else { 0 };
    Ok(((node_index(d)? as usize + 1) << 16) | d.addr.ep as usize | host)
}

/// The address a slot's word names (None: not a word `pack` made).
fn unpack(w: usize) -> Option<Dest> {
    let i = ((w & !ON_HOST) >> 16).checked_sub(1)?;
    let &(mac, incarnation) = NODES.get(i / SEG)?.get()?.get(i % SEG)?.get()?;
    Some(Dest {
        addr: EndpointAddr::new(mac, w as u16),
        incarnation,
    })
}

/// What add_procs needs of Open MPI's processes: the MTL's slot in each, and the modex.
/// (A trait so that the unit tests can run add_procs over fake processes.)
pub(crate) trait Procs {
    type P: Copy;
    /// The word in the process's MTL endpoint slot (0: none yet).
    fn slot(&self, p: Self::P) -> usize;
    fn set_slot(&self, p: Self::P, w: usize);
    /// The address text the process published (a local read once the modex is exchanged).
    fn modex(&self, p: Self::P) -> Result<String, String>;
    /// "name on host", for messages.
    fn name(&self, p: Self::P) -> String;
    /// Whether the process runs on this host.
    fn on_this_host(&self, p: Self::P) -> bool;
}

/// Open MPI's processes.
struct Ompi;

impl Procs for Ompi {
    type P = *mut ompi_proc_t;
    fn slot(&self, p: Self::P) -> usize {
        // SAFETY: `p` is a live ompi_proc_t.
        unsafe { ffi::tigon_proc_endpoint(p) as usize }
    }
    fn set_slot(&self, p: Self::P, w: usize) {
        // SAFETY: `p` is live; the slot is the MTL's own, and Open MPI never dereferences it
        // (it holds a packed address, not a pointer).
        unsafe { ffi::tigon_proc_set_endpoint(p, w as *mut std::ffi::c_void) };
    }
    fn modex(&self, p: Self::P) -> Result<String, String> {
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
        let bytes = unsafe { std::slice::from_raw_parts(data as *const u8, size) };
        let text = String::from_utf8_lossy(bytes)
            .trim_end_matches('\0')
            .to_string();
        // SAFETY: `data` was allocated by the modex with malloc and is ours to free.
        unsafe { libc::free(data) };
        Ok(text)
    }
    fn name(&self, p: Self::P) -> String {
        // SAFETY: `p` is a live ompi_proc_t; the shim returns Open MPI's static name buffers.
        let (name, host) = unsafe { (ffi::tigon_proc_name(p), ffi::tigon_proc_host(p)) };
        format!("{} on {}", c_str(name), c_str(host))
    }
    fn on_this_host(&self, p: Self::P) -> bool {
        // SAFETY: `p` is a live ompi_proc_t; the shim reads its locality flags.
        unsafe { ffi::tigon_proc_on_this_host(p) != 0 }
    }
}

/// Serialises lazy additions (two threads may meet the same new peer).
static ADDING: Mutex<()> = Mutex::new(());

/// Reads a peer's address from the modex.
fn lookup<T: Procs>(t: &T, p: T::P) -> Result<Dest, String> {
    let text = t.modex(p)?;
    // Agents of one job must agree on the encapsulation: say so now, not by a timeout later.
    if let Some(m) = crate::state::mtl() {
        let (ours, theirs) = (text_wire(m.client.addr_text()), text_wire(&text));
        if ours != theirs {
            return Err(format!(
                "its tigon agent runs --wire {theirs} ({text}), this process's runs --wire \
                 {ours}: every agent of a job must use the same --wire"
            ));
        }
    }
    let a = text.parse::<Dest>()?;
    if a.addr == EndpointAddr::new(MacAddr([0; 6]), 0) {
        return Err(format!("`{text}` is not a tigon address"));
    }
    Ok(a)
}

/// Records every process's address (see the module doc); stops at the first that has none.
pub(crate) fn add_procs_in<T: Procs>(t: &T, procs: &[T::P]) -> c_int {
    let _g = ADDING.lock().unwrap_or_else(|p| p.into_inner());
    for &p in procs {
        if t.slot(p) != 0 {
            continue;
        }
        match lookup(t, p).and_then(|d| pack(d, t.on_this_host(p))) {
            Ok(w) => t.set_slot(p, w),
            Err(why) => {
                let name = t.name(p);
                let line = format!("mtl:tigon: no tigon address for process {name}: {why}");
                report::show_help("no endpoint", &line, &name, &why);
                // MPI_Init fails right after this, and ORTE's show_help forwarding can lose a
                // message when several ranks fail at once (mpirun then prints "Data unpack had
                // inadequate space in show_help.c" and nothing of ours): the one line on the
                // rank's own stderr always reaches the user.
                report::always(&line);
                return ffi::OMPI_ERR_UNREACH;
            }
        }
    }
    ffi::OMPI_SUCCESS
}

/// add_procs: resolves every process's address.
pub fn add_procs(procs: &[*mut ompi_proc_t]) -> c_int {
    let rc = add_procs_in(&Ompi, procs);
    report::verbose(
        10,
        &format!("add_procs: {} processes, rc {rc}", procs.len()),
    );
    rc
}

/// del_procs: forgets the processes' addresses.
pub fn del_procs(procs: &[*mut ompi_proc_t]) -> c_int {
    let _g = ADDING.lock().unwrap_or_else(|p| p.into_inner());
    for &p in procs {
        Ompi.set_slot(p, 0);
    }
    ffi::OMPI_SUCCESS
}

/// The address of `rank` in `comm` (its remote group for intercommunicators), with its
/// node's incarnation, and whether that process runs on this host.
pub fn peer(comm: *mut ompi_communicator_t, rank: c_int) -> Result<(Dest, bool), c_int> {
    // SAFETY: `comm` is a live communicator and `rank` was validated by the MPI layer.
    let p = unsafe { ffi::tigon_comm_peer(comm, rank) };
    if p.is_null() {
        return Err(ffi::OMPI_ERR_BAD_PARAM);
    }
    let mut w = Ompi.slot(p);
    if w == 0 {
        let rc = add_procs(&[p]);
        if rc != ffi::OMPI_SUCCESS {
            return Err(rc);
        }
        w = Ompi.slot(p);
    }
    let d = unpack(w).ok_or(ffi::OMPI_ERR_UNREACH)?;
    Ok((d, w & ON_HOST != 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    /// Counts the bytes this thread holds, so that a test can tell what add_procs keeps.
    struct Counting;
    thread_local! {
        static LIVE: Cell<isize> = const { Cell::new(0) };
    }
    // SAFETY: every call goes to the system allocator unchanged; only a counter is kept.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, l: Layout) -> *mut u8 {
            LIVE.with(|c| c.set(c.get() + l.size() as isize));
            // SAFETY: forwarded as is.
            unsafe { System.alloc(l) }
        }
        unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
            LIVE.with(|c| c.set(c.get() - l.size() as isize));
            // SAFETY: forwarded as is.
            unsafe { System.dealloc(p, l) }
        }
    }
    #[global_allocator]
    static A: Counting = Counting;

    /// Processes of a fake job: 64 ranks per node, addresses as the agents publish them.
    struct Fake {
        slots: Vec<Cell<usize>>,
        modex_reads: Cell<usize>,
    }

    fn addr_text(i: usize) -> String {
        let node = i / 64 + 1;
        format!(
            "02:00:00:{:02x}:{:02x}:{:02x}/{}@{:08x}",
            node >> 16,
            (node >> 8) & 0xff,
            node & 0xff,
            i % 64,
            0x6a00_0000 + node
        )
    }

    impl Procs for Fake {
        type P = usize;
        fn slot(&self, p: usize) -> usize {
            self.slots[p].get()
        }
        fn set_slot(&self, p: usize, w: usize) {
            self.slots[p].set(w);
        }
        fn modex(&self, p: usize) -> Result<String, String> {
            self.modex_reads.set(self.modex_reads.get() + 1);
            Ok(addr_text(p))
        }
        fn name(&self, p: usize) -> String {
            format!("rank {p}")
        }
        fn on_this_host(&self, p: usize) -> bool {
            p.is_multiple_of(2)
        }
    }

    #[test]
    fn add_procs_of_65536_processes_keeps_memory_per_node_only_and_sends_nothing() {
        let n = 65_536;
        let fake = Fake {
            slots: (0..n).map(|_| Cell::new(0)).collect(),
            modex_reads: Cell::new(0),
        };
        let procs: Vec<usize> = (0..n).collect();
        let before = LIVE.with(Cell::get);
        let rc = add_procs_in(&fake, &procs);
        let kept = LIVE.with(Cell::get) - before;
        assert_eq!(rc, ffi::OMPI_SUCCESS);
        // One local modex read per process and nothing else: the interface add_procs has
        // to the outside is `Procs`, which cannot send; connections wait for a first message.
        assert_eq!(fake.modex_reads.get(), n);
        assert!(
            kept <= 64 * n as isize,
            "add_procs kept {kept} bytes for {n} processes"
        );
        // The address lives in the process's own slot; only each node (64 processes here)
        // has an entry of its own. The node table is shared by the process (and by the
        // tests that ran before in this one): its nodes may start part-way into a segment,
        // and then take one segment more than their count needs.
        let nodes = n / 64;
        let segment = (SEG * std::mem::size_of::<OnceLock<Node>>()) as isize;
        assert!(
            kept <= 64 * nodes as isize + segment,
            "add_procs kept {kept} bytes for {nodes} nodes"
        );
        for p in [0, 1, 63, 64, 4095, n - 1] {
            assert_eq!(unpack(fake.slot(p)).unwrap().to_string(), addr_text(p));
            assert_eq!(
                fake.slot(p) & ON_HOST != 0,
                p.is_multiple_of(2),
                "the host flag kept"
            );
        }
        // Processes already added are not read again.
        assert_eq!(add_procs_in(&fake, &procs), ffi::OMPI_SUCCESS);
        assert_eq!(fake.modex_reads.get(), n);
    }

    #[test]
    fn packed_addresses_round_trip_and_are_never_zero() {
        for t in [
            "02:00:00:00:00:01/0",
            "ff:ff:ff:ff:ff:ff/65535",
            "0a:1b:2c:3d:4e:5f/3@00000001",
            "0a:1b:2c:3d:4e:5f/3@ffffffff",
            "00:00:00:00:00:00/0",
        ] {
            let a: Dest = t.parse().unwrap();
            let w = pack(a, false).unwrap();
            assert_ne!(w, 0);
            assert_eq!(unpack(w), Some(a));
            assert_eq!(pack(a, false).unwrap(), w, "one entry per node incarnation");
            assert_eq!(pack(a, true).unwrap(), w | ON_HOST);
            assert_eq!(
                unpack(w | ON_HOST),
                Some(a),
                "the host flag is not the address"
            );
        }
        // Two incarnations of one node are two entries; a word no pack made names nothing.
        let (a, b): (Dest, Dest) = (
            "0a:1b:2c:3d:4e:5f/3@00000001".parse().unwrap(),
            "0a:1b:2c:3d:4e:5f/3@00000002".parse().unwrap(),
        );
        assert_ne!(pack(a, false).unwrap() >> 16, pack(b, false).unwrap() >> 16);
        assert_eq!(unpack(0), None);
        assert_eq!(unpack(usize::MAX), None);
    }
}
