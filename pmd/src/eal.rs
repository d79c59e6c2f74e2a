//! DPDK's Environment Abstraction Layer: one initialisation per process, cleanup on drop.

use std::ffi::{CString, c_char, c_int};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tigon_dpdk_sys as sys;

use crate::error::{Error, Result, rte_errno, strerror};

/// Environment variable that turns `Hugepages::Auto` into `Hugepages::Off` (set by
/// `scripts/setup.sh` when it cannot reserve hugepages).
pub const NO_HUGE_ENV: &str = "TIGON_NO_HUGE";

/// Memory (MiB) reserved with `--no-huge` unless `memory_mb` says otherwise.
pub const NO_HUGE_DEFAULT_MB: u32 = 512;

/// Set once `rte_eal_init` has been called: DPDK cannot be initialised twice in a process,
/// and after most failures it cannot be retried either.
static ATTEMPTED: AtomicBool = AtomicBool::new(false);
static CURRENT: Mutex<Option<Weak<Inner>>> = Mutex::new(None);

/// Where the EAL takes its memory from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Hugepages {
    /// Hugepages when a hugetlbfs is mounted and has free pages, else `--no-huge` with a
    /// warning. `TIGON_NO_HUGE=1` forces `Off`.
    #[default]
    Auto,
    /// Hugepages or an error explaining how to set them up.
    Required,
    /// `--no-huge`: ordinary anonymous memory (fine for vdevs; no physical NIC DMA).
    Off,
}

/// How DPDK presents addresses to devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IovaMode {
    /// Physical addresses.
    Pa,
    /// Virtual addresses (required by `dma_skeleton`; the only choice with `--no-huge`).
    Va,
}

/// Builder of the EAL command line. `Eal::builder().file_prefix("x").init()`.
#[derive(Clone, Debug, Default)]
pub struct EalBuilder {
    lcores: Option<String>,
    main_lcore: Option<u32>,
    file_prefix: Option<String>,
    hugepages: Hugepages,
    huge_dir: Option<PathBuf>,
    in_memory: bool,
    single_file_segments: bool,
    memory_mb: Option<u32>,
    vdevs: Vec<String>,
    iova_mode: Option<IovaMode>,
    no_pci: bool,
    telemetry: bool,
    log_level: Option<String>,
    extra: Vec<String>,
}

impl EalBuilder {
    /// EAL `--lcores` (e.g. `"0"`, `"1"`, `"0-1"`, `"0@(0-1)"`). Default: one lcore, 0,
    /// allowed on every CPU of the process's affinity mask (not pinned).
    pub fn lcores(mut self, lcores: impl Into<String>) -> Self {
        self.lcores = Some(lcores.into());
        self
    }

    /// EAL `--main-lcore`.
    pub fn main_lcore(mut self, lcore: u32) -> Self {
        self.main_lcore = Some(lcore);
        self
    }

    /// EAL `--file-prefix`: distinct per process that runs at the same time.
    pub fn file_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.file_prefix = Some(prefix.into());
        self
    }

    /// Hugepage policy (default `Auto`).
    pub fn hugepages(mut self, h: Hugepages) -> Self {
        self.hugepages = h;
        self
    }

    /// EAL `--single-file-segments` when hugepages are used (one file descriptor per memory
    /// segment list: what memif's zero-copy mode needs to share the mbufs' memory with its
    /// peer); nothing without hugepages, where there are no such files.
    pub fn single_file_segments(mut self, yes: bool) -> Self {
        self.single_file_segments = yes;
        self
    }

    /// EAL `--huge-dir`: the hugetlbfs mount to use.
    pub fn huge_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.huge_dir = Some(dir.into());
        self
    }

    /// EAL `--in-memory`: no files under the hugetlbfs mount or /var/run/dpdk, so a killed
    /// process leaves nothing behind (`--no-shconf` when running with `--no-huge`).
    pub fn in_memory(mut self, yes: bool) -> Self {
        self.in_memory = yes;
        self
    }

    /// EAL `-m` (MiB). Default: DPDK's with hugepages (grow on demand), and
    /// `NO_HUGE_DEFAULT_MB` with `--no-huge` (DPDK's own default there is only 64 MiB).
    pub fn memory_mb(mut self, mb: u32) -> Self {
        self.memory_mb = Some(mb);
        self
    }

    /// EAL `--vdev` (e.g. `net_null0`, `dma_skeleton`). Note: a vdev whose probe fails does
    /// not fail the EAL; `Port::open` / `DmaDev::open` report it.
    pub fn vdev(mut self, devargs: impl Into<String>) -> Self {
        self.vdevs.push(devargs.into());
        self
    }

    /// EAL `--iova-mode`.
    pub fn iova_mode(mut self, mode: IovaMode) -> Self {
        self.iova_mode = Some(mode);
        self
    }

    /// EAL `--no-pci`: skip the PCI scan (tests and vdev-only processes).
    pub fn no_pci(mut self, yes: bool) -> Self {
        self.no_pci = yes;
        self
    }

    /// Keep DPDK's telemetry socket (`/var/run/dpdk/<prefix>/dpdk_telemetry.v2`). Default:
    /// off (`--no-telemetry`), so that a killed process leaves no socket behind.
    pub fn telemetry(mut self, yes: bool) -> Self {
        self.telemetry = yes;
        self
    }

    /// EAL `--log-level` (e.g. `"notice"`, `"lib.eal:debug"`). Default: `notice`.
    pub fn log_level(mut self, level: impl Into<String>) -> Self {
        self.log_level = Some(level.into());
        self
    }

    /// Any other EAL argument, passed through verbatim.
    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.extra.push(a.into());
        self
    }

    /// Several pass-through EAL arguments.
    pub fn args<I, S>(mut self, it: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.extra.extend(it.into_iter().map(Into::into));
        self
    }

    /// The EAL argument list `init` would use (after the hugepage decision), without the
    /// program name.
    pub fn eal_args(&self) -> Result<Vec<String>> {
        let mut a = Vec::new();
        match &self.lcores {
            Some(l) => a.push(format!("--lcores={l}")),
            None => a.push(format!("--lcores=0@({})", allowed_cpus())),
        }
        if let Some(m) = self.main_lcore {
            a.push(format!("--main-lcore={m}"));
        }
        if let Some(p) = &self.file_prefix {
            if p.is_empty() || p.contains('/') {
                return Err(Error::InvalidArgument(format!(
                    "file prefix `{p}` must be non-empty and contain no `/`"
                )));
            }
            a.push(format!("--file-prefix={p}"));
        }
        if self.use_hugepages()? {
            if let Some(d) = &self.huge_dir {
                a.push(format!("--huge-dir={}", d.display()));
            }
            if self.in_memory {
                a.push("--in-memory".into());
            }
            if self.single_file_segments {
                a.push("--single-file-segments".into());
            }
        } else {
            a.push("--no-huge".into());
            // DPDK's --no-huge default of 64 MiB is too small for jumbo pools.
            if self.memory_mb.is_none() {
                a.push(format!("-m{NO_HUGE_DEFAULT_MB}"));
            }
            // --no-huge (legacy memory) rejects --in-memory; without hugepage files, what
            // remains of it is "no shared config files".
            if self.in_memory {
                a.push("--no-shconf".into());
            }
        }
        if let Some(m) = self.memory_mb {
            a.push(format!("-m{m}"));
        }
        for v in &self.vdevs {
            a.push(format!("--vdev={v}"));
        }
        match self.iova_mode {
            Some(IovaMode::Pa) => a.push("--iova-mode=pa".into()),
            Some(IovaMode::Va) => a.push("--iova-mode=va".into()),
            None => {}
        }
        if self.no_pci {
            a.push("--no-pci".into());
        }
        if !self.telemetry {
            a.push("--no-telemetry".into());
        }
        a.push(format!(
            "--log-level={}",
            self.log_level.as_deref().unwrap_or("notice")
        ));
        a.extend(self.extra.iter().cloned());
        Ok(a)
    }

    /// Decides hugepages vs `--no-huge`; an error says what is missing and how to fix it.
    fn use_hugepages(&self) -> Result<bool> {
        let mode = match self.hugepages {
            Hugepages::Auto if env_no_huge() => Hugepages::Off,
            m => m,
        };
        if mode == Hugepages::Off {
            return Ok(false);
        }
        match check_hugepages(self.huge_dir.as_deref()) {
            Ok(()) => Ok(true),
            // An explicit --huge-dir that is wrong is a mistake to report, not to paper over.
            Err(e) if mode == Hugepages::Required || self.huge_dir.is_some() => Err(e),
            Err(e) => {
                log::warn!("{e}; falling back to --no-huge");
                Ok(false)
            }
        }
    }

    /// Runs `rte_eal_init`. Fails (never exits) on bad arguments, missing hugepages, or when
    /// the EAL was already initialised in this process.
    pub fn init(self) -> Result<Eal> {
        let args = self.eal_args()?;
        if ATTEMPTED.swap(true, Ordering::SeqCst) {
            return Err(Error::EalAlreadyInitialized);
        }
        let mut argv_owned: Vec<CString> = Vec::with_capacity(args.len() + 1);
        for a in std::iter::once("tigon").chain(args.iter().map(String::as_str)) {
            argv_owned.push(CString::new(a).map_err(|_| {
                Error::InvalidArgument(format!("EAL argument `{a}` contains a NUL byte"))
            })?);
        }
        // DPDK may keep pointers into argv (and getopt permutes it): leak this one-time copy.
        let argv: &'static mut [*mut c_char] = Box::leak(
            argv_owned
                .into_iter()
                .map(CString::into_raw)
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        log::debug!("rte_eal_init {}", args.join(" "));
        // SAFETY: argv holds argc valid NUL-terminated strings that live forever; EAL init is
        // attempted once per process (guarded by ATTEMPTED).
        let ret = unsafe { sys::rte_eal_init(argv.len() as c_int, argv.as_mut_ptr()) };
        if ret < 0 {
            let errno = rte_errno();
            return Err(Error::EalInit {
                errno,
                message: strerror(errno),
                args,
            });
        }
        // SAFETY: the EAL is initialised.
        let iova_va = unsafe { sys::rte_eal_iova_mode() } == sys::RTE_IOVA_VA;
        // SAFETY: returns a pointer to a static NUL-terminated path.
        let run_dir = unsafe { std::ffi::CStr::from_ptr(sys::rte_eal_get_runtime_dir()) };
        let run_dir = PathBuf::from(run_dir.to_string_lossy().into_owned());
        if self.in_memory && !self.telemetry {
            // DPDK creates /var/run/dpdk/<prefix> even when it keeps nothing there: remove it
            // now (only if empty) so that runs do not accumulate directories.
            let _ = std::fs::remove_dir(&run_dir);
        }
        let no_huge = args.iter().any(|a| a == "--no-huge");
        let inner = Arc::new(Inner {
            args,
            no_huge,
            iova: if iova_va { IovaMode::Va } else { IovaMode::Pa },
            run_dir,
        });
        if let Ok(mut cur) = CURRENT.lock() {
            *cur = Some(Arc::downgrade(&inner));
        }
        Ok(Eal { inner })
    }
}

fn env_no_huge() -> bool {
    std::env::var(NO_HUGE_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The CPUs this process may run on, as an EAL cpuset list ("0-1" style items joined by ',').
fn allowed_cpus() -> String {
    // SAFETY: sched_getaffinity fills a zeroed cpu_set_t of the size we pass.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return "0".into();
        }
        set
    };
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: i < CPU_SETSIZE, set is initialised.
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .collect();
    if cpus.is_empty() {
        return "0".into();
    }
    cpus.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Checks that a hugetlbfs is mounted (at `dir` if given) and that hugepages are free.
pub fn check_hugepages(dir: Option<&Path>) -> Result<()> {
    const FIX: &str = "reserve and mount hugepages (`echo 512 > /proc/sys/vm/nr_hugepages; \
                       mkdir -p /dev/hugepages; mount -t hugetlbfs nodev /dev/hugepages`, or \
                       run `scripts/setup.sh`), or run without them (EAL --no-huge: \
                       `Hugepages::Off`, or TIGON_NO_HUGE=1 for tigon's tools)";
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let huge_mounts: Vec<PathBuf> = mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, mnt, fstype) = (f.next()?, f.next()?, f.next()?);
            (fstype == "hugetlbfs").then(|| PathBuf::from(mnt))
        })
        .collect();
    match dir {
        Some(d) => {
            let canon = d.canonicalize().unwrap_or_else(|_| d.to_path_buf());
            if !huge_mounts.contains(&canon) {
                return Err(Error::Hugepages(format!(
                    "`{}` is not a hugetlbfs mount point (mounted: {}): {FIX}",
                    d.display(),
                    if huge_mounts.is_empty() {
                        "none".to_string()
                    } else {
                        huge_mounts
                            .iter()
                            .map(|p| p.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                )));
            }
        }
        None if huge_mounts.is_empty() => {
            return Err(Error::Hugepages(format!("no hugetlbfs is mounted: {FIX}")));
        }
        None => {}
    }
    let free: u64 = std::fs::read_dir("/sys/kernel/mm/hugepages")
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| std::fs::read_to_string(e.path().join("free_hugepages")).ok())
                .filter_map(|s| s.trim().parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0);
    if free == 0 {
        return Err(Error::Hugepages(format!(
            "no free hugepages (stale `rtemap_*` files of killed DPDK processes under the \
             hugetlbfs mount also hold pages): {FIX}"
        )));
    }
    Ok(())
}

struct Inner {
    args: Vec<String>,
    no_huge: bool,
    iova: IovaMode,
    run_dir: PathBuf,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // SAFETY: the last handle is gone, and every DPDK object of this crate holds a handle,
        // so nothing of ours uses DPDK any more.
        let ret = unsafe { sys::rte_eal_cleanup() };
        if ret != 0 {
            log::warn!("rte_eal_cleanup failed: {}", strerror(-ret));
        }
        // Our prefix's runtime directory, if DPDK left it empty.
        let _ = std::fs::remove_dir(&self.run_dir);
    }
}

/// The initialised EAL. Cloning shares it; `rte_eal_cleanup` runs when the last clone (and
/// every mempool, port and dmadev, which hold one) is dropped.
#[derive(Clone)]
pub struct Eal {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Eal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Eal")
            .field("args", &self.inner.args)
            .finish()
    }
}

impl Eal {
    /// A builder with defaults: one unpinned lcore, hugepages `Auto`.
    pub fn builder() -> EalBuilder {
        EalBuilder::default()
    }

    /// The live EAL of this process, if one was initialised and not yet dropped.
    pub fn current() -> Option<Eal> {
        let cur = CURRENT.lock().ok()?;
        cur.as_ref()?.upgrade().map(|inner| Eal { inner })
    }

    /// Quiets the DPDK log types matching `pattern` (e.g. `pmd.net.memif`) down to critical
    /// messages, or gives them back the warning level the agent runs DPDK with: for a driver
    /// that says the same thing each time it is retried (memif's "Failed to connect socket",
    /// once a second while its server is away), which the caller says once itself.
    pub fn quiet_logs(&self, pattern: &str, quiet: bool) {
        let Ok(p) = CString::new(pattern) else {
            return;
        };
        let level = if quiet {
            sys::RTE_LOG_CRIT
        } else {
            sys::RTE_LOG_WARNING
        };
        // SAFETY: the EAL is initialised (we hold it); `p` is a NUL-terminated string that
        // outlives the call, which copies it.
        unsafe { sys::rte_log_set_level_pattern(p.as_ptr(), level) };
    }

    /// Whether `rte_eal_init` has been attempted in this process.
    pub fn init_attempted() -> bool {
        ATTEMPTED.load(Ordering::SeqCst)
    }

    /// The EAL arguments it was initialised with.
    pub fn args(&self) -> &[String] {
        &self.inner.args
    }

    /// True when running with `--no-huge`.
    pub fn no_huge(&self) -> bool {
        self.inner.no_huge
    }

    /// The IOVA mode the EAL settled on.
    pub fn iova_mode(&self) -> IovaMode {
        self.inner.iova
    }

    /// The calling thread's lcore id (`u32::MAX` for a thread that is not an EAL lcore).
    pub fn lcore_id(&self) -> u32 {
        // SAFETY: reads a thread-local through the shim.
        unsafe { sys::tigon_lcore_id() }
    }

    /// The main lcore's id.
    pub fn main_lcore(&self) -> u32 {
        // SAFETY: the EAL is initialised.
        unsafe { sys::rte_get_main_lcore() }
    }

    /// NUMA socket of the calling thread (0 on a single-socket machine).
    pub fn socket_id(&self) -> i32 {
        // SAFETY: the EAL is initialised.
        unsafe { sys::rte_socket_id() as i32 }
    }

    /// Number of Ethernet ports DPDK knows of (probed at init or hot-plugged).
    pub fn port_count(&self) -> u16 {
        // SAFETY: the EAL is initialised.
        unsafe { sys::rte_eth_dev_count_avail() }
    }
}
