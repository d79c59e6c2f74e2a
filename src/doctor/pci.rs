//! The NIC (bound to a DPDK driver, or a vdev), the IOMMU and vfio it may need, and the
//! copy engines (dmadevs) of the node, from sysfs.

use super::Check;
use std::path::Path;
use tigon_pmd::pci_address;

/// Drivers a NIC can be bound to for DPDK's PCI PMDs.
const DPDK_DRIVERS: &[&str] = &["vfio-pci", "uio_pci_generic", "igb_uio"];
/// Kernel drivers DPDK shares a NIC with (bifurcated: no binding needed).
const BIFURCATED: &[&str] = &["mlx5_core", "mlx4_core"];
/// Intel copy engines DPDK drives as dmadevs (IOAT: Haswell to Ice Lake; DSA: Sapphire Rapids).
const DMA_IDS: &[(u16, &str)] = &[
    (0x0b00, "IOAT (Ice Lake)"),
    (0x0b25, "DSA"),
    (0x2021, "IOAT (Skylake)"),
    (0x6f20, "IOAT (Broadwell)"),
    (0x2f20, "IOAT (Haswell)"),
];

pub(super) fn is_pci(devargs: &str) -> bool {
    pci_address(devargs).is_some()
}

fn pci_driver(addr: &str) -> Option<String> {
    let link = std::fs::read_link(format!("/sys/bus/pci/devices/{addr}/driver")).ok()?;
    Some(link.file_name()?.to_string_lossy().into_owned())
}

fn pci_ifaces(addr: &str) -> Vec<String> {
    std::fs::read_dir(format!("/sys/bus/pci/devices/{addr}/net"))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// PCI devices bound to `driver`.
fn bound_to(driver: &str) -> Vec<String> {
    std::fs::read_dir(format!("/sys/bus/pci/drivers/{driver}"))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| pci_address(n).is_some())
                .collect()
        })
        .unwrap_or_default()
}

fn read_hex(path: String) -> Option<u32> {
    let s = std::fs::read_to_string(path).ok()?;
    u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

fn bind_fix(addr: &str) -> Vec<String> {
    let mut fix = vec!["modprobe vfio-pci".to_string()];
    for i in pci_ifaces(addr) {
        fix.push(format!("ip link set {i} down"));
    }
    fix.push(format!("dpdk-devbind.py -b vfio-pci {addr}"));
    fix.push(format!(
        "# with the systemd unit: TIGON_NIC={addr} in /etc/tigon/agent.env, then systemctl restart tigon-agent"
    ));
    fix
}

pub(super) fn port(port: Option<&str>, agent_up: bool) -> Check {
    let Some(p) = port else {
        let bound: Vec<String> = DPDK_DRIVERS
            .iter()
            .flat_map(|d| bound_to(d).into_iter().map(move |a| format!("{a} ({d})")))
            .collect();
        if !bound.is_empty() {
            return Check::ok(
                "port",
                format!(
                    "bound for DPDK: {} (pass --port to check the agent's)",
                    bound.join(", ")
                ),
            );
        }
        let fix = cmds![
            "dpdk-devbind.py --status-dev net   # the NICs' PCI addresses",
            "modprobe vfio-pci && dpdk-devbind.py -b vfio-pci <PCI address>",
            "# or no binding: an af_packet vdev on a kernel interface: tigon agent --port net_af_packet0,iface=eth1",
            "# then tell the doctor: tigon doctor --port <PCI address or devargs> (or \"port\" in /etc/tigon/agent.json)",
        ];
        let s = "no NIC bound to vfio-pci / uio and no --port given";
        return if agent_up {
            Check::warn("port", format!("{s} (the running agent has its own)"), &fix)
        } else {
            Check::fail("port", s, &fix)
        };
    };
    if let Some(addr) = pci_address(p) {
        if !Path::new(&format!("/sys/bus/pci/devices/{addr}")).exists() {
            return Check::fail(
                "port",
                format!("no PCI device {addr} on this node"),
                &cmds!["dpdk-devbind.py --status-dev net   # lists the NICs and their drivers"],
            );
        }
        return match pci_driver(&addr) {
            Some(d) if DPDK_DRIVERS.contains(&d.as_str()) => {
                Check::ok("port", format!("NIC {addr} bound to {d}"))
            }
            Some(d) if BIFURCATED.contains(&d.as_str()) => Check::ok(
                "port",
                format!("NIC {addr} on {d} (bifurcated driver: DPDK shares it, no binding)"),
            ),
            Some(d) => Check::fail(
                "port",
                format!("NIC {addr} is bound to the kernel driver {d}, not to vfio-pci"),
                &bind_fix(&addr),
            ),
            None => Check::fail(
                "port",
                format!("NIC {addr} is bound to no driver"),
                &bind_fix(&addr),
            ),
        };
    }
    let name = p.split(',').next().unwrap_or("").trim();
    if name.starts_with("net_af_packet") || name.starts_with("net_af_xdp") {
        let iface = p
            .split(',')
            .find_map(|kv| kv.trim().strip_prefix("iface="))
            .unwrap_or("");
        if iface.is_empty() {
            return Check::fail(
                "port",
                format!("vdev {name} without iface="),
                &cmds![format!(
                    "tigon agent --port {name},iface=eth1   # the interface to use"
                )],
            );
        }
        if !Path::new(&format!("/sys/class/net/{iface}")).exists() {
            return Check::warn(
                "port",
                format!("vdev {p}: no interface {iface} in this network namespace"),
                &cmds![
                    "ip -br link   # the interfaces here",
                    format!(
                        "# if the agent runs in another namespace: ip netns exec <ns> tigon doctor --port {p}"
                    ),
                ],
            );
        }
        let queues = rx_queues(iface);
        if name.starts_with("net_af_xdp") && queues > 1 {
            return Check::warn(
                "port",
                format!(
                    "vdev {p}: {iface} has {queues} receive queues, and the AF_XDP socket \
                     serves queue 0 only (frames hashed to the others never reach the agent)"
                ),
                &cmds![format!(
                    "ethtool -L {iface} combined 1   # or steer tigon's frames to queue 0 with ethtool -N"
                ),],
            );
        }
        return Check::ok(
            "port",
            format!("vdev {p} (kernel interface {iface}, no binding needed)"),
        );
    }
    if name.starts_with("net_") {
        return Check::ok("port", format!("vdev {p} (no binding needed)"));
    }
    Check::fail(
        "port",
        format!("`{p}` is neither a PCI address nor a vdev (net_...)"),
        &cmds![
            "dpdk-devbind.py --status-dev net   # the NICs' PCI addresses",
            "# vdev examples: net_af_packet0,iface=eth1  net_memif0,role=server,socket=/run/memif.sock",
        ],
    )
}

/// The receive queues of kernel interface `iface` (`/sys/class/net/IF/queues/rx-N`); 1 when
/// unknown.
fn rx_queues(iface: &str) -> usize {
    std::fs::read_dir(format!("/sys/class/net/{iface}/queues"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count()
        })
        .unwrap_or(1)
        .max(1)
}

pub(super) fn iommu(port: Option<&str>) -> Check {
    let groups = std::fs::read_dir("/sys/kernel/iommu_groups")
        .map(|rd| rd.count())
        .unwrap_or(0);
    let vfio = Path::new("/sys/bus/pci/drivers/vfio-pci").exists();
    let noiommu = std::fs::read_to_string("/sys/module/vfio/parameters/enable_unsafe_noiommu_mode")
        .is_ok_and(|s| s.trim() == "Y");
    let state = format!(
        "{groups} IOMMU group(s), vfio-pci {}{}",
        if vfio { "loaded" } else { "not loaded" },
        if noiommu {
            ", vfio no-IOMMU mode on"
        } else {
            ""
        }
    );
    let enable = cmds![
        "# bare metal: add intel_iommu=on iommu=pt (AMD: amd_iommu=on) to GRUB_CMDLINE_LINUX in /etc/default/grub, then: update-grub && reboot",
        "# a VM without a virtual IOMMU: modprobe vfio enable_unsafe_noiommu_mode=1 (or echo 1 > /sys/module/vfio/parameters/enable_unsafe_noiommu_mode)",
    ];
    let pci = port.and_then(pci_address);
    let needs_vfio = pci.as_ref().is_some_and(|a| {
        let d = pci_driver(a).unwrap_or_default();
        !BIFURCATED.contains(&d.as_str()) && d != "uio_pci_generic" && d != "igb_uio"
    });
    if !needs_vfio {
        let why = match port {
            Some(p) if pci.is_some() => format!("not needed for {p} (uio or bifurcated driver)"),
            Some(_) => "not needed for a vdev port".to_string(),
            None => "needed only to bind a NIC to vfio-pci".to_string(),
        };
        // Only a node whose port is unknown may still want vfio-pci: warn then.
        return if groups > 0 || noiommu || port.is_some() {
            Check::ok("iommu", format!("{state} ({why})"))
        } else {
            Check::warn("iommu", format!("{state}: {why}"), &enable)
        };
    }
    if groups == 0 && !noiommu {
        return Check::fail(
            "iommu",
            format!("{state}: vfio-pci needs an IOMMU (or no-IOMMU mode) for the NIC"),
            &enable,
        );
    }
    if !vfio {
        return Check::fail(
            "iommu",
            format!("{state}: the NIC needs it"),
            &cmds!["modprobe vfio-pci"],
        );
    }
    Check::ok("iommu", state)
}

pub(super) fn dmadev(dma: Option<&str>) -> Check {
    if let Some(d) = dma {
        if d.starts_with("dma_") {
            return Check::ok(
                "dmadev",
                format!("{d} (a software dmadev: functional, not fast)"),
            );
        }
        if let Some(addr) = pci_address(d) {
            return match pci_driver(&addr) {
                Some(drv) if drv == "vfio-pci" => {
                    Check::ok("dmadev", format!("{addr} bound to vfio-pci"))
                }
                other => Check::fail(
                    "dmadev",
                    format!(
                        "--dma {addr} is bound to {}, not vfio-pci: the agent cannot open it",
                        other.unwrap_or_else(|| "no driver".into())
                    ),
                    &cmds![
                        "modprobe vfio-pci",
                        format!("dpdk-devbind.py -b vfio-pci {addr}"),
                    ],
                ),
            };
        }
        return Check::warn(
            "dmadev",
            format!("--dma {d}: neither a PCI address nor a dma_ vdev"),
            &cmds!["dpdk-devbind.py --status-dev dma   # the copy engines and their addresses"],
        );
    }
    let mut found: Vec<String> = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/sys/bus/pci/devices") {
        for e in rd.filter_map(|e| e.ok()) {
            let a = e.file_name().to_string_lossy().into_owned();
            if read_hex(format!("/sys/bus/pci/devices/{a}/vendor")) != Some(0x8086) {
                continue;
            }
            let Some(dev) = read_hex(format!("/sys/bus/pci/devices/{a}/device")) else {
                continue;
            };
            // IOAT parts come as 8 channels with consecutive ids.
            if let Some((_, kind)) = DMA_IDS
                .iter()
                .find(|(id, _)| dev >= *id as u32 && dev <= *id as u32 + 7)
            {
                let drv = pci_driver(&a).unwrap_or_else(|| "no driver".into());
                found.push(format!("{a} {kind} ({drv})"));
            }
        }
    }
    found.sort();
    if found.is_empty() {
        return Check::warn(
            "dmadev",
            "no dmadev (Intel IOAT / DSA) found: the engine copies received payloads with its CPU",
            &cmds![
                "# nothing to do: --dma is an optimisation for nodes with IOAT / DSA copy engines"
            ],
        );
    }
    Check::warn(
        "dmadev",
        format!(
            "present but not configured: {} (the engine copies with its CPU)",
            found.join(", ")
        ),
        &cmds![
            "dpdk-devbind.py -b vfio-pci <address above>",
            "# then: tigon agent --dma <address> (\"dma\" in /etc/tigon/agent.json); tigon bench dma picks --dma-threshold",
        ],
    )
}
