//! One error type for the port layer, with messages a user can act on.

use std::ffi::CStr;
use std::fmt;

use tigon_dpdk_sys as sys;

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, with DPDK's own message where DPDK reported it.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// `rte_eal_init` failed; `message` is DPDK's `rte_strerror(rte_errno)`.
    EalInit {
        errno: i32,
        message: String,
        args: Vec<String>,
    },
    /// EAL initialisation was already attempted in this process (DPDK supports one).
    EalAlreadyInitialized,
    /// No usable hugepages: what is missing and how to fix it.
    Hugepages(String),
    /// A caller-supplied value is out of range or malformed.
    InvalidArgument(String),
    /// `Port::open` found no ethdev for these devargs (probe failed or bad devargs).
    PortNotFound { devargs: String, reason: String },
    /// The port refused an MTU.
    Mtu {
        port: String,
        requested: u16,
        min: u16,
        max: u16,
        max_frame: u32,
        message: String,
    },
    /// `DmaDev::open` found no dmadev of this name.
    DmaNotFound { name: String, reason: String },
    /// The mempool has no free mbuf.
    PoolExhausted { pool: String, size: u32 },
    /// A mutation was attempted on an mbuf whose segments are shared (refcount > 1), or a
    /// write into a segment of external memory.
    Shared,
    /// The link did not come up in time.
    LinkDown { port: String, waited_ms: u64 },
    /// A DPDK call failed.
    Dpdk {
        what: String,
        errno: i32,
        message: String,
    },
    /// A system call failed.
    Io {
        what: String,
        source: std::io::Error,
    },
}

impl Error {
    /// A DPDK failure: `ret` is the negative errno a call returned, or -1 with `rte_errno` set.
    pub(crate) fn dpdk(what: impl Into<String>, ret: i32) -> Error {
        let errno = if ret < -1 { -ret } else { rte_errno() };
        Error::Dpdk {
            what: what.into(),
            errno,
            // Some drivers fail with -1 and leave rte_errno alone: "Success" would mislead.
            message: if errno == 0 {
                "failed; the driver gave no reason (see its log lines above)".into()
            } else {
                strerror(errno)
            },
        }
    }

    pub(crate) fn io(what: impl Into<String>) -> Error {
        Error::Io {
            what: what.into(),
            source: std::io::Error::last_os_error(),
        }
    }

    /// The errno behind this error, when there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::EalInit { errno, .. } | Error::Dpdk { errno, .. } => Some(*errno),
            Error::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// The calling thread's `rte_errno`.
pub(crate) fn rte_errno() -> i32 {
    // SAFETY: reads a thread-local int through the shim; no preconditions.
    unsafe { sys::tigon_errno() }
}

/// DPDK's text for an errno (covers both libc and DPDK's own codes).
pub(crate) fn strerror(errno: i32) -> String {
    // SAFETY: rte_strerror returns a pointer to a static or thread-local NUL-terminated string.
    unsafe {
        let p = sys::rte_strerror(errno);
        if p.is_null() {
            return format!("error {errno}");
        }
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::EalInit {
                errno,
                message,
                args,
            } => write!(
                f,
                "DPDK EAL initialisation failed: {message} (errno {errno}); EAL arguments: {}",
                args.join(" ")
            ),
            Error::EalAlreadyInitialized => write!(
                f,
                "DPDK's EAL was already initialised in this process; it can be initialised only \
                 once per process: share the existing `Eal` handle"
            ),
            Error::Hugepages(m) => write!(f, "{m}"),
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Error::PortNotFound { devargs, reason } => write!(
                f,
                "no DPDK port for devargs `{devargs}`: {reason}. Check the driver name and its \
                 options (e.g. `net_memif0,role=server,socket=/run/x.sock`, \
                 `net_af_packet0,iface=veth0`, a PCI address bound to vfio-pci)"
            ),
            Error::Mtu {
                port,
                requested,
                min,
                max,
                max_frame,
                message,
            } => write!(
                f,
                "port {port} refused MTU {requested}: {message} (driver: MTU {min}..={max}, \
                 frames up to {max_frame} B). Some drivers carry larger frames anyway with \
                 their own setting: af_packet follows the kernel interface's MTU (`ip link \
                 set IF mtu 9000`, framesz), memif its buffer size (bsize)"
            ),
            Error::DmaNotFound { name, reason } => write!(
                f,
                "no DPDK dmadev `{name}`: {reason}. Use a vdev such as `dma_skeleton` (needs \
                 --iova-mode=va) or a bound IOAT/DSA device"
            ),
            Error::PoolExhausted { pool, size } => write!(
                f,
                "mempool `{pool}` is exhausted (all {size} mbufs in use): free mbufs or create \
                 a larger pool"
            ),
            Error::Shared => write!(
                f,
                "mbuf is shared (refcount > 1) or its bytes are external memory: it cannot be \
                 modified in place (drop the other references, or write the region itself)"
            ),
            Error::LinkDown { port, waited_ms } => write!(
                f,
                "link of port {port} still down after {waited_ms} ms (is the peer running?)"
            ),
            Error::Dpdk {
                what,
                errno,
                message,
            } if *errno == 0 => write!(f, "{what}: {message}"),
            Error::Dpdk {
                what,
                errno,
                message,
            } => write!(f, "{what}: {message} (errno {errno})"),
            Error::Io { what, source } => write!(f, "{what}: {source}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
