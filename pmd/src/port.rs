//! Ethernet ports (ethdev) opened from devargs: a PCI address or a vdev string.

use std::ffi::{CStr, CString};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tigon_dpdk_sys as sys;

use crate::eal::Eal;
use crate::error::{Error, Result, strerror};
use crate::extmem::ExtMem;
use crate::mbuf::Mbuf;
use crate::mempool::{JUMBO_DATA_ROOM, Mempool};

/// memif buffer size `Port::open` adds to memif devargs that set none: one buffer holds a
/// 9000-byte-MTU frame.
pub const MEMIF_BSIZE: u32 = 9216;

/// How to set a port up.
#[derive(Clone, Debug)]
pub struct PortConfig {
    /// Receive queues (each needs its own poller or the same one).
    pub rx_queues: u16,
    /// Transmit queues.
    pub tx_queues: u16,
    /// Receive descriptors per queue (clamped to what the driver accepts).
    pub rx_desc: u16,
    /// Transmit descriptors per queue (clamped to what the driver accepts).
    pub tx_desc: u16,
    /// MTU to set before starting; `None` keeps the driver's default (1500).
    pub mtu: Option<u16>,
    /// Receive frames for any destination MAC.
    pub promiscuous: bool,
    /// Enable IPv4 header and UDP checksum offloads the driver reports (for `--wire udp`).
    pub ip_udp_checksum_offload: bool,
    /// Spread received UDP/IPv4 frames over the receive queues by RSS (the hash covers the UDP
    /// source port, which the sender varies per endpoint pair). Only where the driver reports
    /// the capability; otherwise the port falls back to one receive queue, as all frames
    /// would land on it anyway (see [`Port::rss`]).
    pub rss_udp: bool,
}

impl Default for PortConfig {
    fn default() -> Self {
        PortConfig {
            rx_queues: 1,
            tx_queues: 1,
            rx_desc: 1024,
            tx_desc: 1024,
            mtu: None,
            promiscuous: true,
            ip_udp_checksum_offload: false,
            rss_udp: false,
        }
    }
}

/// Link state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    /// Link is up.
    pub up: bool,
    /// Speed in Mbit/s (0 when unknown).
    pub speed_mbps: u32,
    /// Full duplex.
    pub full_duplex: bool,
}

/// Port counters (`rte_eth_stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames received.
    pub ipackets: u64,
    /// Frames sent.
    pub opackets: u64,
    /// Bytes received.
    pub ibytes: u64,
    /// Bytes sent.
    pub obytes: u64,
    /// Frames dropped by the hardware (rx queue full).
    pub imissed: u64,
    /// Erroneous received frames.
    pub ierrors: u64,
    /// Failed transmissions.
    pub oerrors: u64,
    /// Receive mbuf allocation failures.
    pub rx_nombuf: u64,
}

/// A started Ethernet port. Stopped and closed on drop.
pub struct Port {
    id: u16,
    name: String,
    devargs: String,
    rx_queues: u16,
    tx_queues: u16,
    device: *mut sys::rte_device,
    mapped: Vec<Arc<ExtMem>>,
    /// memif in zero-copy mode only: pool for linearising chained frames before tx (see
    /// `open`).
    linearize: Option<Mempool>,
    /// memif in zero-copy mode only: the addresses it can pass its peer, [start, end) of
    /// DPDK's first memseg list as far as it was in use before the port connected (see
    /// `open`); chains whose segments all lie there go out as they are.
    zc_range: Option<(usize, usize)>,
    /// (index, head refcnt) of each chain sent as it is in a zero-copy burst (see
    /// `tx_burst`).
    chain_refs: Vec<(usize, u16)>,
    lin_warned: bool,
    /// Stopped by a [`Port::restart`] whose start failed (a memif server not back yet): the
    /// bursts take and give nothing until a later restart starts it (DPDK's bursts on a
    /// stopped port print a stack dump).
    stopped: bool,
    /// The transmit offloads configured (DPDK's RTE_ETH_TX_OFFLOAD_* bits).
    tx_offloads: u64,
    /// The RSS hash functions configured (DPDK's RTE_ETH_RSS_* bits; 0: no RSS).
    rss_hf: u64,
    _pool: Mempool,
    _eal: Eal,
}

// SAFETY: a port's queues may be driven from any thread, one thread at a time (&mut self).
unsafe impl Send for Port {}

impl std::fmt::Debug for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Port")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish()
    }
}

/// The device name part of devargs (`net_memif0,role=server` → `net_memif0`), with PCI
/// addresses in DPDK's full `DDDD:BB:DD.F` form.
fn device_name(devargs: &str) -> String {
    let name = devargs.split(',').next().unwrap_or("").trim();
    let short_pci = name.len() == 7
        && name.as_bytes()[2] == b':'
        && name.as_bytes()[5] == b'.'
        && name
            .chars()
            .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.');
    if short_pci {
        format!("0000:{name}")
    } else {
        name.to_string()
    }
}

fn port_by_name(name: &str) -> Option<u16> {
    let c = CString::new(name).ok()?;
    let mut id = 0u16;
    // SAFETY: c is a valid C string, id a valid out pointer.
    let ret = unsafe { sys::rte_eth_dev_get_port_by_name(c.as_ptr(), &mut id) };
    (ret == 0).then_some(id)
}

impl Port {
    /// Finds (or hot-plugs) the port named by `devargs`, configures `cfg.rx_queues` receive
    /// queues filled from `rx_pool` and `cfg.tx_queues` transmit queues, sets the MTU, and
    /// starts it. Multi-segment rx/tx is enabled where the driver offers it.
    ///
    /// A vdev that failed its probe during EAL init (bad devargs, missing privileges) does
    /// not exist: this returns `Error::PortNotFound` naming the devargs. memif devargs
    /// without `bsize=` get `bsize=9216` (`MEMIF_BSIZE`) so that every frame fits one ring
    /// buffer; use the same on both peers.
    pub fn open(eal: &Eal, devargs: &str, rx_pool: &Mempool, cfg: &PortConfig) -> Result<Port> {
        let name = device_name(devargs);
        if name.is_empty() {
            return Err(Error::PortNotFound {
                devargs: devargs.into(),
                reason: "empty device name".into(),
            });
        }
        let is_memif = name.starts_with("net_memif");
        // memif (DPDK 22.11) corrupts mixed-size streams whose frames span several ring
        // buffers (stale NEXT flags on reused descriptors): make one buffer hold a jumbo frame.
        let probe_args = if is_memif && !devargs.contains("bsize=") {
            format!("{devargs},bsize={MEMIF_BSIZE}")
        } else {
            devargs.to_string()
        };
        let id = match port_by_name(&name) {
            Some(id) => id,
            None => {
                let c = CString::new(probe_args.as_str()).map_err(|_| {
                    Error::InvalidArgument(format!("devargs `{devargs}` contain a NUL byte"))
                })?;
                // SAFETY: valid C string; EAL initialised (we hold a handle).
                let ret = unsafe { sys::rte_dev_probe(c.as_ptr()) };
                if ret < 0 {
                    let why = match -ret {
                        1 => "the driver rejected the device or its arguments".to_string(),
                        libc::EFAULT | libc::ENODEV => {
                            format!("no bus or driver knows a device named `{name}`")
                        }
                        e => strerror(e),
                    };
                    return Err(Error::PortNotFound {
                        devargs: devargs.into(),
                        reason: format!(
                            "probing the device failed: {why} (DPDK's log above has the \
                             driver's reason)"
                        ),
                    });
                }
                port_by_name(&name).ok_or_else(|| Error::PortNotFound {
                    devargs: devargs.into(),
                    reason: format!("the device probed but created no Ethernet port `{name}`"),
                })?
            }
        };
        let mut port = Port {
            id,
            name,
            devargs: devargs.into(),
            rx_queues: 0,
            tx_queues: 0,
            device: std::ptr::null_mut(),
            mapped: Vec::new(),
            linearize: None,
            zc_range: None,
            chain_refs: Vec::new(),
            lin_warned: false,
            stopped: false,
            tx_offloads: 0,
            rss_hf: 0,
            _pool: rx_pool.clone(),
            _eal: eal.clone(),
        };
        // memif's zero-copy mode gives each segment of a chained frame a ring descriptor of
        // its own (writing each descriptor's flags afresh) and passes its peer only offsets
        // into its region 1: DPDK's first memseg list, as much of it as is in use when it
        // connects (`memif_region_init_zc` sums the segments in use; the peer maps that
        // much and checks no offset). Chains whose segments all lie in that memory (a
        // channel in DPDK's memory, reserved before this) go out as they are; others
        // (segments in external memory) are linearised. Its copy mode copies a chain's
        // segments into one ring buffer (`bsize` holds any frame) and needs nothing.
        if is_memif && devargs.replace(' ', "").contains("zero-copy=yes") {
            let lin = Mempool::new(eal, &format!("tigon_lin{id}"), 1023, JUMBO_DATA_ROOM)?;
            port.linearize = Some(lin);
            port.zc_range = crate::memzone::first_list_in_use();
        }
        port.configure(rx_pool, cfg)?;
        Ok(port)
    }

    /// Whether frames may go out as chains of mbufs, segments in external memory included
    /// (the driver transmits multi-segment frames, `RTE_ETH_TX_OFFLOAD_MULTI_SEGS`, and the
    /// port does not copy them into one segment first).
    pub fn tx_chains(&self) -> bool {
        self.tx_offloads & sys::TIGON_ETH_TX_OFFLOAD_MULTI_SEGS != 0
            && (self.linearize.is_none() || self.zc_range.is_some())
    }

    /// Whether a frame segment in `mem` goes out as it is (`tx_chains` being true): on a
    /// memif zero-copy port only memory in the range its peer maps (see `open`), on other
    /// ports any.
    pub fn sends_in_place(&self, mem: &ExtMem) -> bool {
        match (&self.linearize, self.zc_range) {
            (None, _) => true,
            (Some(_), Some(r)) => in_range(r, mem.as_ptr() as usize, mem.len()),
            (Some(_), None) => false,
        }
    }

    /// Whether the NIC computes IPv4 header checksums / UDP checksums of frames marked with
    /// [`crate::Mbuf::offload_ipv4_udp_checksums`] (configured with
    /// `PortConfig::ip_udp_checksum_offload` and reported by the driver).
    pub fn checksum_offloads(&self) -> (bool, bool) {
        let ip = sys::TIGON_ETH_TX_OFFLOAD_IPV4_CKSUM;
        let udp = sys::TIGON_ETH_TX_OFFLOAD_UDP_CKSUM;
        (self.tx_offloads & ip != 0, self.tx_offloads & udp != 0)
    }

    fn info(&self) -> Result<sys::rte_eth_dev_info> {
        let mut info = sys::rte_eth_dev_info::default();
        // SAFETY: valid port id, info is a valid out pointer.
        let ret = unsafe { sys::rte_eth_dev_info_get(self.id, &mut info) };
        if ret != 0 {
            return Err(Error::dpdk(format!("port {}: device info", self.name), ret));
        }
        Ok(info)
    }

    fn configure(&mut self, pool: &Mempool, cfg: &PortConfig) -> Result<()> {
        let info = self.info()?;
        self.device = info.device;
        let mut conf = sys::rte_eth_conf::default();
        let rx_queues = self.rss_setup(&mut conf, &info, cfg);
        if rx_queues == 0
            || cfg.tx_queues == 0
            || rx_queues > info.max_rx_queues
            || cfg.tx_queues > info.max_tx_queues
        {
            return Err(Error::InvalidArgument(format!(
                "port {}: {} rx / {} tx queues requested, driver allows 1..={} / 1..={}",
                self.name, cfg.rx_queues, cfg.tx_queues, info.max_rx_queues, info.max_tx_queues
            )));
        }
        let scatter = sys::TIGON_ETH_RX_OFFLOAD_SCATTER;
        let multi = sys::TIGON_ETH_TX_OFFLOAD_MULTI_SEGS;
        conf.rxmode.offloads = info.rx_offload_capa & scatter;
        conf.txmode.offloads = info.tx_offload_capa & multi;
        if cfg.ip_udp_checksum_offload {
            let tx = sys::TIGON_ETH_TX_OFFLOAD_IPV4_CKSUM | sys::TIGON_ETH_TX_OFFLOAD_UDP_CKSUM;
            conf.txmode.offloads |= info.tx_offload_capa & tx;
        }
        self.tx_offloads = conf.txmode.offloads;
        // SAFETY: valid port, conf fully initialised.
        let ret = unsafe { sys::rte_eth_dev_configure(self.id, rx_queues, cfg.tx_queues, &conf) };
        if ret != 0 {
            return Err(Error::dpdk(format!("port {}: configure", self.name), ret));
        }
        if let Some(mtu) = cfg.mtu {
            self.set_mtu(mtu)?;
        }
        let clamp = |want: u16, lim: &sys::rte_eth_desc_lim| {
            let (lo, hi) = (lim.nb_min.max(1), lim.nb_max.max(1));
            let mut n = want.clamp(lo, hi.max(lo));
            if lim.nb_align > 1 {
                n -= n % lim.nb_align;
            }
            n.max(lo)
        };
        let rx_desc = clamp(cfg.rx_desc, &info.rx_desc_lim);
        let tx_desc = clamp(cfg.tx_desc, &info.tx_desc_lim);
        // SAFETY: EAL initialised.
        let socket = unsafe { sys::rte_eth_dev_socket_id(self.id) };
        let socket = if socket < 0 { 0 } else { socket as u32 };
        for q in 0..rx_queues {
            // SAFETY: valid port and queue index; the pool outlives the port (we hold it).
            let ret = unsafe {
                sys::rte_eth_rx_queue_setup(
                    self.id,
                    q,
                    rx_desc,
                    socket,
                    std::ptr::null(),
                    pool.as_ptr(),
                )
            };
            if ret != 0 {
                // What usually went wrong differs by driver: AF_XDP makes its socket here.
                let hint = if self.name.starts_with("net_af_xdp") {
                    "AF_XDP could not open its socket on the interface's queue: another \
                     AF_XDP socket or XDP program holds it (another agent? `ip link show` \
                     names a loaded program), the driver has no XDP, or the pool's mbufs \
                     are not in the pool's own memory"
                } else {
                    "a driver that needs larger receive buffers, e.g. af_packet with a large \
                     framesz, needs a pool with a larger data room such as JUMBO_DATA_ROOM"
                };
                return Err(Error::dpdk(
                    format!(
                        "port {}: rx queue {q} setup ({rx_desc} descriptors, mbufs of {} B; \
                         {hint})",
                        self.name,
                        pool.data_room().saturating_sub(crate::mempool::HEADROOM)
                    ),
                    ret,
                ));
            }
        }
        for q in 0..cfg.tx_queues {
            // SAFETY: valid port and queue index.
            let ret = unsafe {
                sys::rte_eth_tx_queue_setup(self.id, q, tx_desc, socket, std::ptr::null())
            };
            if ret != 0 {
                return Err(Error::dpdk(
                    format!(
                        "port {}: tx queue {q} setup ({tx_desc} descriptors)",
                        self.name
                    ),
                    ret,
                ));
            }
        }
        if cfg.promiscuous {
            // Not every driver supports it (memif does not need it): ignore refusals.
            // SAFETY: valid port.
            let _ = unsafe { sys::rte_eth_promiscuous_enable(self.id) };
        }
        // SAFETY: configured port.
        let ret = unsafe { sys::rte_eth_dev_start(self.id) };
        if ret != 0 {
            return Err(Error::dpdk(format!("port {}: start", self.name), ret));
        }
        self.rx_queues = rx_queues;
        self.tx_queues = cfg.tx_queues;
        Ok(())
    }

    /// Sets RSS over UDP/IPv4 in `conf` when asked for, with several receive queues, and the
    /// driver offers it; returns the receive queues to configure. A driver without RSS would
    /// put every frame on queue 0, so it gets one queue, whatever was asked.
    fn rss_setup(
        &mut self,
        conf: &mut sys::rte_eth_conf,
        info: &sys::rte_eth_dev_info,
        cfg: &PortConfig,
    ) -> u16 {
        self.rss_hf = 0;
        if !cfg.rss_udp || cfg.rx_queues < 2 {
            return cfg.rx_queues;
        }
        // With RSS asked for, `rx_queues` is an upper bound: as many as the driver has.
        let queues = cfg.rx_queues.min(info.max_rx_queues);
        let udp = sys::TIGON_ETH_RSS_NONFRAG_IPV4_UDP;
        if queues < 2 || info.flow_type_rss_offloads & udp == 0 {
            return 1;
        }
        // Hash on the source port alone where the driver can (one flow per endpoint pair,
        // whatever the addresses); else on the 4-tuple, which includes it.
        let src_only = sys::TIGON_ETH_RSS_L4_SRC_ONLY;
        let hf = udp | (info.flow_type_rss_offloads & src_only);
        conf.rxmode.mq_mode = sys::RTE_ETH_MQ_RX_RSS;
        // A null key: the driver's default key.
        conf.rx_adv_conf.rss_conf.rss_key = std::ptr::null_mut();
        conf.rx_adv_conf.rss_conf.rss_hf = hf;
        self.rss_hf = hf;
        queues
    }

    /// The RSS hash functions in use (DPDK's RTE_ETH_RSS_* bits), 0 without RSS.
    pub fn rss(&self) -> u64 {
        self.rss_hf
    }

    /// DPDK's port id.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// Device name (devargs up to the first comma).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The devargs the port was opened with.
    pub fn devargs(&self) -> &str {
        &self.devargs
    }

    /// Driver name (e.g. `net_memif`).
    pub fn driver(&self) -> String {
        match self.info() {
            Ok(i) if !i.driver_name.is_null() => {
                // SAFETY: DPDK's driver names are static C strings.
                unsafe { CStr::from_ptr(i.driver_name) }
                    .to_string_lossy()
                    .into_owned()
            }
            _ => String::new(),
        }
    }

    /// Number of configured rx queues.
    pub fn rx_queues(&self) -> u16 {
        self.rx_queues
    }

    /// Number of configured tx queues.
    pub fn tx_queues(&self) -> u16 {
        self.tx_queues
    }

    /// The port's MAC address.
    pub fn mac(&self) -> Result<[u8; 6]> {
        let mut a = sys::rte_ether_addr::default();
        // SAFETY: valid port, valid out pointer.
        let ret = unsafe { sys::rte_eth_macaddr_get(self.id, &mut a) };
        if ret != 0 {
            return Err(Error::dpdk(format!("port {}: MAC address", self.name), ret));
        }
        Ok(a.addr_bytes)
    }

    /// Current MTU.
    pub fn mtu(&self) -> Result<u16> {
        let mut mtu = 0u16;
        // SAFETY: valid port, valid out pointer.
        let ret = unsafe { sys::rte_eth_dev_get_mtu(self.id, &mut mtu) };
        if ret != 0 {
            return Err(Error::dpdk(format!("port {}: get MTU", self.name), ret));
        }
        Ok(mtu)
    }

    /// Largest frame the driver receives in one piece (`max_rx_pktlen`). Some drivers
    /// (memif) still carry longer frames as chained mbufs.
    pub fn max_rx_frame(&self) -> Result<u32> {
        Ok(self.info()?.max_rx_pktlen)
    }

    /// Sets the MTU; `Error::Mtu` names the driver's range when it refuses.
    pub fn set_mtu(&mut self, mtu: u16) -> Result<()> {
        // Drivers without an MTU hook (memif) refuse even their current MTU.
        if self.mtu().ok() == Some(mtu) {
            return Ok(());
        }
        // SAFETY: valid port.
        let ret = unsafe { sys::rte_eth_dev_set_mtu(self.id, mtu) };
        if ret != 0 {
            let (min, max, max_frame) = self
                .info()
                .map(|i| (i.min_mtu, i.max_mtu, i.max_rx_pktlen))
                .unwrap_or((0, 0, 0));
            return Err(Error::Mtu {
                port: self.name.clone(),
                requested: mtu,
                min,
                max,
                max_frame,
                message: strerror(-ret),
            });
        }
        Ok(())
    }

    /// Link state, without waiting.
    pub fn link(&self) -> Result<Link> {
        let mut l = sys::rte_eth_link::default();
        // SAFETY: valid port, valid out pointer.
        let ret = unsafe { sys::rte_eth_link_get_nowait(self.id, &mut l) };
        if ret != 0 {
            return Err(Error::dpdk(format!("port {}: link status", self.name), ret));
        }
        Ok(Link {
            up: l.link_status() != 0,
            speed_mbps: l.link_speed,
            full_duplex: l.link_duplex() != 0,
        })
    }

    /// Stops and starts the port again: what makes a memif client whose server went away
    /// connect anew (DPDK 22.11's memif client does not retry by itself; its start does).
    /// An error (the server is not back yet) leaves the port stopped until the next try.
    pub fn restart(&mut self) -> Result<()> {
        if !self.stopped {
            // SAFETY: a started port of ours.
            let ret = unsafe { sys::rte_eth_dev_stop(self.id) };
            if ret != 0 {
                return Err(Error::dpdk(format!("port {}: stop", self.name), ret));
            }
            self.stopped = true;
        }
        // SAFETY: a configured port of ours, stopped.
        let ret = unsafe { sys::rte_eth_dev_start(self.id) };
        if ret != 0 {
            return Err(Error::dpdk(format!("port {}: start", self.name), ret));
        }
        self.stopped = false;
        Ok(())
    }

    /// Polls the link until it is up (e.g. a memif peer connected) or `timeout` passes.
    pub fn wait_link_up(&self, timeout: Duration) -> Result<Link> {
        let start = Instant::now();
        loop {
            let l = self.link()?;
            if l.up {
                return Ok(l);
            }
            if start.elapsed() >= timeout {
                return Err(Error::LinkDown {
                    port: self.name.clone(),
                    waited_ms: timeout.as_millis() as u64,
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Receives up to `max` frames from `queue`, appending them to `out`; returns how many.
    ///
    /// # Panics
    /// If `queue` is not a configured rx queue.
    pub fn rx_burst(&mut self, queue: u16, out: &mut Vec<Mbuf>, max: usize) -> usize {
        assert!(
            queue < self.rx_queues,
            "rx queue {queue} of port {} does not exist",
            self.name
        );
        if self.stopped {
            return 0;
        }
        let max = max.min(u16::MAX as usize);
        out.reserve(max);
        let len = out.len();
        // SAFETY: out has room for `max` more Mbufs (repr(transparent) over non-null
        // rte_mbuf pointers); DPDK writes `n` valid, owned mbuf pointers there.
        unsafe {
            let dst = out.as_mut_ptr().add(len) as *mut *mut sys::rte_mbuf;
            let n = sys::tigon_eth_rx_burst(self.id, queue, dst, max as u16) as usize;
            out.set_len(len + n);
            n
        }
    }

    /// Offers the frames of `pkts` to `queue`, in order. Frames the driver accepted are
    /// removed from the front of `pkts` (the driver frees them once sent); the rest stay for
    /// the caller to retry or drop. Returns how many were accepted.
    ///
    /// On memif ports in zero-copy mode, chained frames with a segment outside the memory the
    /// peer maps are first copied into single-segment mbufs (see `open`).
    ///
    /// # Panics
    /// If `queue` is not a configured tx queue.
    pub fn tx_burst(&mut self, queue: u16, pkts: &mut Vec<Mbuf>) -> usize {
        assert!(
            queue < self.tx_queues,
            "tx queue {queue} of port {} does not exist",
            self.name
        );
        if self.stopped {
            return 0;
        }
        let n = pkts.len().min(u16::MAX as usize);
        self.chain_refs.clear();
        if let Some(lin) = &self.linearize {
            for (i, slot) in pkts.iter_mut().take(n).enumerate() {
                if slot.nb_segs() > 1
                    && let Some(r) = self.zc_range
                    && slot
                        .segments()
                        .all(|s| in_range(r, s.as_ptr() as usize, s.len()))
                {
                    self.chain_refs.push((i, slot.refcnt()));
                    continue;
                }
                if slot.nb_segs() > 1 {
                    match linearized(slot, lin) {
                        Ok(m) => *slot = m,
                        Err(e) if !self.lin_warned => {
                            self.lin_warned = true;
                            log::warn!(
                                "port {}: sending a chained frame as is ({e}); memif may \
                                 corrupt it",
                                self.name
                            );
                        }
                        Err(_) => {}
                    }
                }
            }
        }
        // SAFETY: pkts holds n owned mbufs; DPDK takes ownership of the first `sent`. Those
        // slots are then overwritten by moving the unsent tail down, without dropping them.
        unsafe {
            let base = pkts.as_mut_ptr();
            let sent =
                sys::tigon_eth_tx_burst(self.id, queue, base as *mut *mut sys::rte_mbuf, n as u16)
                    as usize;
            // memif_tx_one_zc as released in DPDK 22.11, meeting a chain with one free ring
            // slot left, takes a reference to its head segment (for the slot it then does
            // not use) and returns "not sent": that reference would never be dropped and the
            // mbuf never go back to its pool. (22.11.11 does not; tests/zero_copy_chains.rs
            // checks that no mbuf is lost either way.) Only the first unsent frame can have
            // met it, and nothing else adds exactly one reference to it meanwhile.
            if let Some(&(_, before)) = self.chain_refs.iter().find(|(i, _)| *i == sent)
                && (*base.add(sent)).refcnt() == before + 1
            {
                sys::tigon_mbuf_refcnt_update((*base.add(sent)).as_ptr(), -1);
            }
            let rest = pkts.len() - sent;
            std::ptr::copy(base.add(sent), base, rest);
            pkts.set_len(rest);
            sent
        }
    }

    /// Port counters.
    pub fn stats(&self) -> Result<PortStats> {
        let mut s = sys::rte_eth_stats::default();
        // SAFETY: valid port, valid out pointer.
        let ret = unsafe { sys::rte_eth_stats_get(self.id, &mut s) };
        if ret != 0 {
            return Err(Error::dpdk(format!("port {}: stats", self.name), ret));
        }
        Ok(PortStats {
            ipackets: s.ipackets,
            opackets: s.opackets,
            ibytes: s.ibytes,
            obytes: s.obytes,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        })
    }

    /// Zeroes the counters.
    pub fn reset_stats(&mut self) -> Result<()> {
        // SAFETY: valid port.
        let ret = unsafe { sys::rte_eth_stats_reset(self.id) };
        if ret != 0 {
            return Err(Error::dpdk(format!("port {}: stats reset", self.name), ret));
        }
        Ok(())
    }

    /// Makes `mem` reachable by this port's device (`rte_dev_dma_map`), e.g. so that it can
    /// transmit external-buffer mbufs. The mapping lasts as long as the port.
    pub fn dma_map(&mut self, mem: &Arc<ExtMem>) -> Result<()> {
        for (va, iova, len) in mem.dma_chunks() {
            // SAFETY: device is this port's device; the chunk lies in a registered region
            // that the port keeps alive (Arc) until it unmaps it in Drop.
            let ret = unsafe { sys::rte_dev_dma_map(self.device, va, iova, len) };
            if ret != 0 {
                // Drivers without a DMA map hook (most vdevs) reach memory by address.
                let e = crate::error::rte_errno();
                if e == libc::ENOTSUP {
                    break;
                }
                return Err(Error::dpdk(format!("port {}: DMA map", self.name), ret));
            }
        }
        self.mapped.push(Arc::clone(mem));
        Ok(())
    }
}

/// Whether `len` bytes at `addr` lie in [start, end).
fn in_range((start, end): (usize, usize), addr: usize, len: usize) -> bool {
    addr >= start && addr.checked_add(len).is_some_and(|e| e <= end)
}

/// A single-segment copy of a chained frame.
fn linearized(m: &Mbuf, pool: &Mempool) -> Result<Mbuf> {
    let len = u16::try_from(m.len())
        .map_err(|_| Error::InvalidArgument(format!("{}-byte frame", m.len())))?;
    let mut out = pool.alloc()?;
    let dst = out.append(len)?;
    m.copy_to_slice(0, dst);
    Ok(out)
}

impl Drop for Port {
    fn drop(&mut self) {
        for mem in std::mem::take(&mut self.mapped) {
            for (va, iova, len) in mem.dma_chunks() {
                // SAFETY: undoing our own rte_dev_dma_map of this chunk.
                unsafe { sys::rte_dev_dma_unmap(self.device, va, iova, len) };
            }
        }
        // In the EAL's interrupt thread, after any driver callback under way there (intr.rs:
        // memif's handling of its peer's disconnect raced a close from here).
        let (id, name) = (self.id, self.name.clone());
        if !crate::intr::run(move || stop_and_close(id, &name)) {
            log::warn!(
                "port {}: the EAL's interrupt thread did not close it in time",
                self.name
            );
        }
    }
}

/// Stops and closes port `id` (named `name` in logs): its rx rings (and the mbufs in them)
/// are released.
fn stop_and_close(id: u16, name: &str) {
    // SAFETY: a port of ours, closed once (its `Port` is being dropped).
    unsafe {
        let ret = sys::rte_eth_dev_stop(id);
        if ret != 0 {
            log::debug!("port {name}: stop: {}", strerror(-ret));
        }
        let ret = sys::rte_eth_dev_close(id);
        if ret != 0 {
            log::debug!("port {name}: close: {}", strerror(-ret));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::device_name;

    #[test]
    fn device_names() {
        assert_eq!(device_name("net_memif0,role=server"), "net_memif0");
        assert_eq!(device_name("01:00.0"), "0000:01:00.0");
        assert_eq!(device_name("0000:01:00.0,txq=2"), "0000:01:00.0");
        assert_eq!(device_name(""), "");
    }
}
