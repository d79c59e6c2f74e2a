//! Reading DPDK device arguments without DPDK: which devices are PCI functions.

/// `0000:3b:00.0` or `3b:00.0` (the first devargs field), in its full form; None for a vdev
/// (`net_af_packet0,...`, `dma_skeleton0`) or anything else.
pub fn pci_address(devargs: &str) -> Option<String> {
    let s = devargs.split(',').next()?.trim().to_ascii_lowercase();
    let hex = |t: &str, n: usize| t.len() == n && t.bytes().all(|b| b.is_ascii_hexdigit());
    let parts: Vec<&str> = s.split(':').collect();
    let (dom, bus, devfn) = match parts.as_slice() {
        [d, b, df] => (d.to_string(), *b, *df),
        [b, df] => ("0000".to_string(), *b, *df),
        _ => return None,
    };
    let (dev, func) = devfn.split_once('.')?;
    (hex(&dom, 4)
        && hex(bus, 2)
        && hex(dev, 2)
        && matches!(func, "0" | "1" | "2" | "3" | "4" | "5" | "6" | "7"))
    .then(|| format!("{dom}:{bus}:{dev}.{func}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_addresses() {
        assert_eq!(pci_address("0000:3b:00.0").as_deref(), Some("0000:3b:00.0"));
        assert_eq!(
            pci_address("3B:00.1,txq=2").as_deref(),
            Some("0000:3b:00.1")
        );
        assert_eq!(pci_address("net_af_packet0,iface=eth0"), None);
        assert_eq!(pci_address("net_memif0,socket=/a:b.c"), None);
        assert_eq!(pci_address("00:1f.8"), None);
        assert_eq!(pci_address("dma_skeleton0"), None);
    }
}
