//! Bringing up DPDK for the agent: the EAL on the engine's lcore, and for each node it hosts
//! the mbuf pools, the port (in the node's network namespace, with what its driver needs at
//! the chosen MTU) and the optional dmadev; and registering
//! client channels with DPDK so the dmadev may write them.

use super::args::{AgentArgs, Settings};
use super::link::PortLink;
use super::nodes::NodePlan;
use super::slots::{SLOTS, Slots};
use std::path::Path;
use tigon_engine::channel::Channel;
use tigon_engine::{Link, MacAddr};
use tigon_pmd::{
    DEFAULT_DATA_ROOM, DmaDev, Eal, ExtMem, Hugepages, IovaMode, JUMBO_DATA_ROOM, Mempool,
    MemsegFd, Port, PortConfig,
};

/// What the engines run on: one EAL, and per node its port and dmadev.
pub struct Dataplane {
    pub eal: Eal,
    pub nodes: Vec<NodePlane>,
    /// With a memif zero-copy port: the EAL's descriptor of its first memseg list's file,
    /// which that port closes when it connects (see `MemsegFd`), to put back.
    pub memseg_fd: Option<MemsegFd>,
}

/// One node's share of the dataplane.
pub struct NodePlane {
    pub link: PortLink,
    pub mac: MacAddr,
    pub dma: Option<DmaDev>,
    /// The receive pool's memory when ranks may map it (see `shared_rx_pool`).
    pub rx_mem: Option<std::sync::Arc<ExtMem>>,
    /// Whether clients' channels are registered with DPDK (see `register`).
    pub register_channels: bool,
    /// Channel slots in DPDK's memory (a memif zero-copy port: see `slots`).
    pub slots: Option<Slots>,
    /// An AF_XDP port's claim on its interface, held while the node lives (see `claim_xdp`).
    pub xdp_claim: Option<std::os::unix::net::UnixListener>,
}

/// Initialises the EAL and opens each node's port and dmadev.
pub fn bring_up(nodes: &[NodePlan]) -> Result<Dataplane, String> {
    let eal = start_eal(nodes)?;
    // memif's zero-copy mode offers its peer every DPDK memory segment of the process when
    // it (re)connects, and cannot offer external memory (it has no fd for it), and it passes
    // only buffers of the first memseg list: in a process with such a port, receive pools
    // the ranks may read are DPDK memory there, and nothing external is registered.
    let zero_copy = nodes.iter().any(|n| memif_zero_copy(&n.settings.devargs)) && !eal.no_huge();
    let memseg_fd = if zero_copy {
        MemsegFd::first_list(&eal)
            .map_err(|e| log::warn!("DPDK's memory file not kept under its number: {e}"))
            .ok()
    } else {
        None
    };
    let mut planes = Vec::with_capacity(nodes.len());
    for (i, n) in nodes.iter().enumerate() {
        let plane = open_node(&eal, i, &n.args, &n.settings, zero_copy).map_err(|e| {
            if nodes.len() > 1 {
                format!("node {i}: {e}")
            } else {
                e
            }
        })?;
        planes.push(plane);
    }
    Ok(Dataplane {
        eal,
        nodes: planes,
        memseg_fd,
    })
}

/// Node `i`'s pools, port (opened in its network namespace) and dmadev.
fn open_node(
    eal: &Eal,
    i: usize,
    a: &AgentArgs,
    s: &Settings,
    zero_copy: bool,
) -> Result<NodePlane, String> {
    let room = if s.mtu > 1500 {
        JUMBO_DATA_ROOM
    } else {
        DEFAULT_DATA_ROOM
    };
    // Pool names are per process: the first node keeps the names a single-node agent had.
    let name = |what: &str| {
        if i == 0 {
            format!("tigon_{what}")
        } else {
            format!("tigon_{what}{i}")
        }
    };
    // AF_XDP hands the receive pool's own memory to the kernel as its UMEM, so its mbufs
    // must carry their data inside the pool: no external data buffers, hence no frames
    // lent to ranks (they get payloads through their channel).
    let shared = if lends_rx_frames(&s.devargs) {
        shared_rx_pool(eal, &name("rx"), room, zero_copy)
    } else {
        log::info!(
            "port {}: AF_XDP receives into a pool of its own (its UMEM): ranks get every \
             payload through their channel",
            device_name(&s.devargs)
        );
        None
    };
    let rx_pool = match shared {
        Some(p) => p,
        None => Mempool::new(eal, &name("rx"), RX_POOL, room).map_err(|e| e.to_string())?,
    };
    let rx_mem = rx_pool.external_data().cloned();
    let tx_pool = Mempool::new(eal, &name("tx"), 8191, room).map_err(|e| e.to_string())?;
    // Before the port opens (a memif zero-copy port sends from as much of DPDK's memory as
    // is in use when it connects), after the pools the node cannot do without (hugepages
    // short, the slots are what goes without).
    let slots = if zero_copy && memif_zero_copy(&s.devargs) {
        Slots::reserve(eal, i, SLOTS, s.geometry)
    } else {
        None
    };
    let (port, xdp_claim) = {
        // A socket stays in the namespace it was made in: af_packet's, made at probe time,
        // serves the node's namespace after this thread has returned to its own.
        let _ns = match &s.netns {
            Some(ns) => {
                Some(tigon_shm::netns::NetnsGuard::enter(ns).map_err(|e| format!("--netns: {e}"))?)
            }
            None => None,
        };
        let claim = claim_xdp(&s.devargs)?;
        (open_port(eal, &rx_pool, s)?, claim)
    };
    let (ip_offload, udp_offload) = port.checksum_offloads();
    if s.rx_queues > 1 {
        match port.rss() {
            0 => log::info!(
                "--rx-queues {}: the driver of {} offers no RSS over UDP/IPv4: one receive queue",
                s.rx_queues,
                port.name()
            ),
            hf => log::info!(
                "RSS over UDP/IPv4 on {} receive queues (hash functions {hf:#x})",
                port.rx_queues()
            ),
        }
    }
    let mac = MacAddr(port.mac().map_err(|e| e.to_string())?);
    let dma = match &a.dma {
        Some(d) => Some(DmaDev::open(eal, d, 1024).map_err(|e| format!("dmadev `{d}`: {e}"))?),
        None => None,
    };
    // Channels are registered with DPDK where a device needs them known: a dmadev, a NIC
    // (behind an IOMMU); not in a process with a memif zero-copy port, unless a dmadev
    // wants them (memif and af_packet copy from an mbuf's address, not its IO address).
    let register_channels = dma.is_some() || (!zero_copy && pci_device(&s.devargs));
    let mut link = PortLink::new(port, tx_pool, mac, s.max_frame());
    if let Some(mut udp) = s.udp {
        // The UDP checksum covers payloads: computed where the engine's payload checksum
        // would be (links without a frame check, or --payload-checksum), else 0 ("none").
        udp.udp_checksum = s.engine.payload_checksum.unwrap_or(!link.frame_check());
        // The NIC computes what it can (its driver says which); software the rest.
        udp.ip_checksum_offload = ip_offload;
        udp.udp_checksum_offload = udp_offload;
        log::info!(
            "--wire udp: {} {}/{} port {}; IPv4 checksum by the {}, UDP checksum {}",
            link.node_addr(),
            udp.ip,
            udp.prefix,
            udp.port,
            if ip_offload { "NIC" } else { "CPU" },
            match (udp.udp_checksum, udp_offload) {
                (false, _) => "none (the link checks frames)",
                (true, true) => "by the NIC",
                (true, false) => "by the CPU",
            }
        );
        link = link.with_udp(udp);
    }
    // The engine's name for this node: the MAC, or with --wire udp its IP address and port.
    let mac = link.node_addr();
    Ok(NodePlane {
        xdp_claim,
        link,
        mac,
        dma,
        rx_mem,
        register_channels,
        slots,
    })
}

/// Mbufs in a node's receive pool.
pub const RX_POOL: u32 = 8191;

/// A receive pool whose frames lie in memory the node's ranks may map read-only: a rank then
/// reads a small message where it arrived, no copy into its channel first (`lease`). A memfd
/// registered with DPDK; or, in a process with a memif zero-copy port (`zero_copy`), which
/// can pass only buffers of DPDK's first memseg list and offers no external memory, a memzone
/// there whose file the ranks map read-only. `None` on any failure (e.g. no hugepages with
/// physical addresses, where a data room must not straddle two pages): the pool is DPDK's
/// and the node lends no frames.
fn shared_rx_pool(eal: &Eal, name: &str, room: u16, zero_copy: bool) -> Option<Mempool> {
    // Sized for 2 MiB pages holding whole data rooms (with physical addresses a data room
    // must not straddle two pages).
    let per_page = (2 << 20) / room.next_multiple_of(64) as usize;
    let bytes = (RX_POOL as usize).div_ceil(per_page) << 21;
    let mem = if zero_copy {
        ExtMem::shared_memzone(eal, &format!("{name}_frames"), bytes)
    } else {
        ExtMem::new(eal, bytes)
    };
    let made = mem.and_then(|mem| Mempool::with_external_data(eal, name, RX_POOL, room, &mem));
    match made {
        Ok(p) => Some(p),
        Err(e) => {
            log::info!(
                "receive pool `{name}` private to the agent: ranks get every payload through \
                 their channel (one more copy per small message): {e}"
            );
            None
        }
    }
}

/// The EAL, on the engine's lcore, scanning only the buses the ports and dmadevs need.
fn start_eal(nodes: &[NodePlan]) -> Result<Eal, String> {
    let (a, s) = (&nodes[0].args, &nodes[0].settings);
    let lcore = s.lcore;
    let dmas: Vec<&str> = nodes.iter().filter_map(|n| n.args.dma.as_deref()).collect();
    let mut b = Eal::builder()
        .lcores(lcore.to_string())
        .main_lcore(lcore)
        .file_prefix(file_prefix(&s.socket))
        .in_memory(true)
        .hugepages(if s.no_huge {
            Hugepages::Off
        } else {
            Hugepages::Auto
        })
        .log_level("*:warning");
    if !dmas.is_empty() {
        b = b.iova_mode(IovaMode::Va);
    }
    // memif's zero-copy client shares its mbufs' memory with the server: one file per
    // memory segment list, or the driver refuses ("multi-file segments").
    b = b.single_file_segments(nodes.iter().any(|n| memif_zero_copy(&n.settings.devargs)));
    // A vdev port needs no PCI scan (which would also grab the host's own NIC).
    let pci = pci_device;
    if !nodes.iter().any(|n| pci(&n.settings.devargs)) && !dmas.iter().any(|d| pci(d)) {
        b = b.no_pci(true);
    }
    // A software dmadev (dma_skeleton) is a vdev to create; IOAT / DSA devices are found by
    // the bus scans.
    for d in dmas {
        if device_name(d).starts_with("dma_") {
            b = b.vdev(d.to_string());
        }
    }
    if let Some(extra) = &a.eal {
        b = b.args(extra.clone());
    }
    b.init().map_err(|e| format!("DPDK initialisation: {e}"))
}

/// Whether `devargs` name a PCI device (a NIC or a DMA engine), not a vdev.
fn pci_device(d: &str) -> bool {
    d.contains(':') && !d.starts_with("net_") && !d.starts_with("dma_")
}

/// Whether the port's receive pool may keep its frames' data outside the pool (memory the
/// agent shares with ranks): not for AF_XDP, whose driver registers the pool's own memory
/// with the kernel as the socket's UMEM (`xdp_umem_configure(): Failed to create umem`).
fn lends_rx_frames(devargs: &str) -> bool {
    !af_xdp(devargs)
}

fn af_xdp(devargs: &str) -> bool {
    device_name(devargs).starts_with("net_af_xdp")
}

/// The kernel interface a vdev's devargs name (`iface=`: af_packet, AF_XDP).
fn iface(devargs: &str) -> Option<&str> {
    devargs
        .split(',')
        .find_map(|kv| kv.trim().strip_prefix("iface="))
}

/// An AF_XDP port's claim on its interface, before DPDK touches it: an abstract Unix socket
/// named after the interface in its namespace (gone with the process, however it ends;
/// nothing on disk). A second agent on the interface fails here, with a clear error: DPDK's
/// driver, failing to bind its socket beside the first agent's, detached the XDP program in
/// place as it cleaned up, silently cutting the first agent off its frames. An XDP program
/// someone else attached (not libxdp's `xsk_def_prog`, which a killed agent leaves behind and
/// the driver takes over) is refused too, as the driver would replace or remove it. Asked
/// of `ip -d link`; without `ip`, that second check is left to the driver.
fn claim_xdp(devargs: &str) -> Result<Option<std::os::unix::net::UnixListener>, String> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    if !af_xdp(devargs) {
        return Ok(None);
    }
    let Some(iface) = iface(devargs) else {
        return Ok(None); // the driver names what is missing
    };
    let name = format!("tigon/af_xdp/{iface}");
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).map_err(|e| e.to_string())?;
    let claim = match UnixListener::bind_addr(&addr) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            return Err(format!(
                "interface {iface} is taken by another tigon agent's AF_XDP port (one agent \
                 per interface; its claim is the abstract socket @{name})"
            ));
        }
        Err(e) => return Err(format!("claiming interface {iface} (@{name}): {e}")),
    };
    let out = std::process::Command::new("ip")
        .args(["-d", "-o", "link", "show", "dev", iface])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    if let Ok(o) = out
        && o.status.success()
        && let Some(prog) = xdp_program(&String::from_utf8_lossy(&o.stdout))
        && !prog.contains(" name xsk_def_prog")
    {
        return Err(format!(
            "interface {iface} has an XDP program of someone else's ({prog}), which the \
             AF_XDP driver would replace; `ip -d link show dev {iface}` shows it"
        ));
    }
    Ok(Some(claim))
}

/// The XDP program `ip -d -o link show` reports attached (`prog/xdp id 532 name
/// xsk_def_prog ...`, or only the flag `xdp`, `xdpgeneric`, ... when `ip` is old).
fn xdp_program(ip_link: &str) -> Option<String> {
    let words: Vec<&str> = ip_link.split_whitespace().collect();
    if let Some(i) = words.iter().position(|w| w.starts_with("prog/xdp")) {
        return Some(
            words[i..]
                .iter()
                .take(5)
                .copied()
                .collect::<Vec<_>>()
                .join(" "),
        );
    }
    words
        .iter()
        .find(|w| {
            matches!(
                **w,
                "xdp" | "xdpgeneric" | "xdpdrv" | "xdpoffload" | "xdpmulti"
            )
        })
        .map(|w| format!("mode {w}"))
}

/// Whether `devargs` ask for memif's zero-copy mode (a client's option).
fn memif_zero_copy(devargs: &str) -> bool {
    devargs.starts_with("net_memif") && devargs.split(',').any(|kv| kv == "zero-copy=yes")
}

/// The port `devargs` names, receiving into `rx_pool`, at `mtu`.
fn open_port(eal: &Eal, rx_pool: &Mempool, s: &Settings) -> Result<Port, String> {
    let (devargs, mtu, udp) = (&s.devargs, s.mtu, s.udp.is_some());
    let mut port_args = port_devargs(devargs, mtu)?;
    if eal.no_huge() && memif_zero_copy(&port_args) {
        // Without hugepages the mbufs live in anonymous memory the server cannot map.
        log::warn!("{port_args}: memif zero-copy needs hugepages; this port copies instead");
        port_args = port_args.replace(",zero-copy=yes", "");
    }
    Port::open(
        eal,
        &port_args,
        rx_pool,
        &PortConfig {
            mtu: (!mtu_from_devargs(devargs)).then_some(mtu),
            ip_udp_checksum_offload: udp,
            rx_queues: s.rx_queues,
            rss_udp: udp,
            ..PortConfig::default()
        },
    )
    .map_err(|e| {
        let hint = if port_args.contains("net_memif") && port_args.contains("role=client") {
            " (a memif client needs its server: start the role=server agent first, on the same socket)"
        } else {
            ""
        };
        format!("port `{port_args}`: {e}{hint}")
    })
}

/// A file prefix unique to this agent (several agents may share a machine).
fn file_prefix(socket: &Path) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in socket.as_os_str().as_encoded_bytes() {
        h = (h ^ *b as u64).wrapping_mul(0x100_0000_01b3);
    }
    format!("tigon-{:012x}", h & 0xffff_ffff_ffff)
}

/// The device name of `devargs` (what comes before the first comma).
fn device_name(devargs: &str) -> &str {
    devargs.split(',').next().unwrap_or("").trim()
}

/// Whether the port's driver takes its frame size from elsewhere than `rte_eth_dev_set_mtu`
/// (which it refuses): memif carries jumbo frames in its `bsize` buffers (the port layer sets
/// `bsize=9216`), af_packet follows the kernel interface's MTU and the ring's `framesz`.
fn mtu_from_devargs(devargs: &str) -> bool {
    let name = device_name(devargs);
    name.starts_with("net_memif") || name.starts_with("net_af_packet")
}

/// Devargs for the port at `mtu`: af_packet needs ring frames that hold a jumbo frame plus
/// its TPACKET header, and an interface whose MTU lets such frames through.
/// A `net_null` port (a node whose ranks only talk among themselves) gets `no-rx=1` unless
/// its devargs say otherwise: DPDK's null driver makes up a full burst of frames at every
/// receive call, which the engine then parsed and dropped as foreign on every pass of its
/// loop (555 M frames in 10 s), leaving the ranks' rings a sliver of it: 5.5-6.5 us one way
/// between two ranks of the node instead of 2.5-3.6.
fn port_devargs(devargs: &str, mtu: u16) -> Result<String, String> {
    if device_name(devargs).starts_with("net_null")
        && !devargs.split(',').any(|kv| kv.trim().starts_with("no-rx"))
    {
        return Ok(format!("{devargs},no-rx=1"));
    }
    if mtu <= 1500 || !device_name(devargs).starts_with("net_af_packet") {
        return Ok(devargs.to_string());
    }
    if let Some(iface) = iface(devargs)
        && let Ok(text) = std::fs::read_to_string(format!("/sys/class/net/{iface}/mtu"))
        && let Ok(have) = text.trim().parse::<u32>()
        && have < mtu as u32
    {
        return Err(format!(
            "--mtu {mtu}: interface {iface} has MTU {have} (af_packet follows the kernel's \
             MTU: `ip link set {iface} mtu {mtu}`)"
        ));
    }
    let mut d = devargs.to_string();
    if !d.contains("framesz=") {
        d.push_str(",framesz=9216");
    }
    if !d.contains("blocksz=") {
        d.push_str(",blocksz=36864");
    }
    Ok(d)
}

/// A client's channel as mbufs may point into it (in-place transmit), registered with DPDK
/// when `registered` so that the dmadev (or a NIC) can reach its data buffers.
pub fn register(eal: &Eal, ch: &Channel, registered: bool) -> Option<std::sync::Arc<ExtMem>> {
    let fd = ch.region.fd().try_clone().ok()?;
    let page = if ch.region.is_hugetlb() {
        2 << 20
    } else {
        4096
    };
    let len = ch.region.len();
    let made = if registered {
        ExtMem::from_fd(eal, fd, len, page)
    } else {
        ExtMem::from_fd_unregistered(eal, fd, len, page)
    };
    match made {
        Ok(m) => Some(m),
        Err(e) => {
            log::warn!("channel not mapped for DPDK ({e}); CPU copies only for this client");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{port_devargs, xdp_program};

    #[test]
    fn a_null_port_makes_up_no_frames_unless_asked() {
        assert_eq!(
            port_devargs("net_null0", 9000).unwrap(),
            "net_null0,no-rx=1"
        );
        assert_eq!(
            port_devargs("net_null1,size=64", 1500).unwrap(),
            "net_null1,size=64,no-rx=1"
        );
        assert_eq!(
            port_devargs("net_null0,no-rx=0", 9000).unwrap(),
            "net_null0,no-rx=0"
        );
        let memif = "net_memif0,role=server,socket=/tmp/m.sock";
        assert_eq!(port_devargs(memif, 9000).unwrap(), memif);
    }

    #[test]
    fn an_attached_xdp_program_is_found_in_ip_link_output() {
        let with = "2: vA@if551: <BROADCAST,MULTICAST,PROMISC,UP> mtu 1500 xdp qdisc noqueue \
                    state DOWN mode DEFAULT \\    veth numtxqueues 2 numrxqueues 2 \\    \
                    prog/xdp id 532 name xsk_def_prog tag dc1bcff258c01244 jited";
        assert_eq!(
            xdp_program(with).as_deref(),
            Some("prog/xdp id 532 name xsk_def_prog")
        );
        let old_ip = "3: eth1: <BROADCAST,UP> mtu 1500 xdpgeneric qdisc mq state UP";
        assert_eq!(xdp_program(old_ip).as_deref(), Some("mode xdpgeneric"));
        let without = "2: vA@if551: <BROADCAST,MULTICAST,UP> mtu 1500 qdisc noqueue state \
                       DOWN \\    veth addrgenmode eui64 numtxqueues 2 numrxqueues 2";
        assert_eq!(xdp_program(without), None);
    }
}
