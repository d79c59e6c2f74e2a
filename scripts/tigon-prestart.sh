#!/usr/bin/env bash
# Prepares a node for `tigon agent` (the systemd unit's ExecStartPre; also run by hand and by
# scripts/guide-local.sh): reserves hugepages and mounts hugetlbfs, then readies the NIC —
# binds a PCI NIC to vfio-pci with dpdk-devbind.py, or brings up a kernel interface for an
# af_packet port. Idempotent. Settings come from the environment (/etc/tigon/agent.env):
#
#   TIGON_NIC         PCI address (0000:3b:00.0) to bind, or a kernel interface name (eth1) for
#                     net_af_packet; empty: nothing to do for the NIC
#   TIGON_DRIVER      driver to bind the NIC to (default vfio-pci; uio_pci_generic without IOMMU)
#   TIGON_DMA         PCI addresses of IOAT/DSA copy engines to bind too (space-separated)
#   TIGON_MTU         MTU to set on a kernel interface (af_packet follows it), e.g. 9000
#   TIGON_HUGEPAGES   2 MiB hugepages to reserve (default 1024)
#   TIGON_HUGE_DIR    hugetlbfs mount point (default /dev/hugepages)
#   TIGON_NO_HUGE=1   run DPDK without hugepages: skip the reservation
#   TIGON_VFIO_NOIOMMU=1  enable vfio's no-IOMMU mode (VMs without a virtual IOMMU)
#
# --dry-run prints the commands instead of running them. Exits non-zero, saying why, when the
# node cannot be prepared.
set -euo pipefail

DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1

log() { echo "tigon-prestart: $*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}
run() {
    if [ "$DRY" = 1 ]; then
        echo "$*"
    else
        log "$*"
        "$@"
    fi
}
# `echo VALUE > FILE`, shown as such in --dry-run.
write() {
    if [ "$DRY" = 1 ]; then
        echo "echo $2 > $1"
    else
        log "echo $2 > $1"
        echo "$2" >"$1"
    fi
}

NIC="${TIGON_NIC:-}"
DRIVER="${TIGON_DRIVER:-vfio-pci}"
PAGES="${TIGON_HUGEPAGES:-1024}"
HUGE_DIR="${TIGON_HUGE_DIR:-/dev/hugepages}"

# --- hugepages --------------------------------------------------------------------------------
if [ "${TIGON_NO_HUGE:-0}" = 1 ]; then
    log "TIGON_NO_HUGE=1: no hugepages"
else
    have=$(cat /proc/sys/vm/nr_hugepages)
    if [ "$have" -lt "$PAGES" ]; then
        write /proc/sys/vm/nr_hugepages "$PAGES"
        if [ "$DRY" = 0 ]; then
            have=$(cat /proc/sys/vm/nr_hugepages)
            [ "$have" -ge "$PAGES" ] ||
                die "asked for $PAGES hugepages, the kernel gave $have (memory too fragmented: reboot, or set vm.nr_hugepages in /etc/sysctl.d/ so they are reserved at boot)"
        fi
    fi
    if ! mountpoint -q "$HUGE_DIR" 2>/dev/null || [ "$(stat -f -c %T "$HUGE_DIR")" != hugetlbfs ]; then
        run mkdir -p "$HUGE_DIR"
        run mount -t hugetlbfs nodev "$HUGE_DIR"
    fi
fi

# --- the NIC ----------------------------------------------------------------------------------
is_pci() { [[ "$1" =~ ^([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$ ]]; }

# Binds PCI device $1 to $DRIVER unless it is bound already.
bind() {
    local addr=$1
    [[ "$addr" =~ ^[0-9a-fA-F]{4}: ]] || addr="0000:$addr"
    local dev=/sys/bus/pci/devices/$addr
    [ "$DRY" = 1 ] || [ -e "$dev" ] || die "no PCI device $addr (dpdk-devbind.py --status lists them)"
    local cur=""
    [ -e "$dev/driver" ] && cur=$(basename "$(readlink -f "$dev/driver")")
    if [ "$cur" = "$DRIVER" ]; then
        log "$addr already bound to $DRIVER"
        return
    fi
    if [ "$DRIVER" = vfio-pci ]; then
        if [ "${TIGON_VFIO_NOIOMMU:-0}" = 1 ]; then
            run modprobe vfio enable_unsafe_noiommu_mode=1
            write /sys/module/vfio/parameters/enable_unsafe_noiommu_mode 1
        elif [ "$DRY" = 0 ] && [ -z "$(ls -A /sys/kernel/iommu_groups 2>/dev/null)" ]; then
            die "no IOMMU: boot with intel_iommu=on iommu=pt (AMD: amd_iommu=on), or set TIGON_VFIO_NOIOMMU=1 (VMs without a virtual IOMMU), or TIGON_DRIVER=uio_pci_generic"
        fi
    fi
    run modprobe "$DRIVER"
    # dpdk-devbind refuses to unbind an interface that is up (it may carry routes).
    if [ -d "$dev/net" ]; then
        for ifc in "$dev"/net/*; do
            run ip link set "$(basename "$ifc")" down
        done
    fi
    run dpdk-devbind.py -b "$DRIVER" "$addr"
}

if [ -z "$NIC" ]; then
    log "TIGON_NIC is empty: no NIC to prepare"
elif is_pci "$NIC"; then
    command -v dpdk-devbind.py >/dev/null || [ "$DRY" = 1 ] ||
        die "dpdk-devbind.py not found: apt-get install -y dpdk"
    bind "$NIC"
else
    # A kernel interface for net_af_packet: it only needs to be up (with the wanted MTU).
    [ "$DRY" = 1 ] || [ -e "/sys/class/net/$NIC" ] ||
        die "TIGON_NIC=$NIC is neither a PCI address nor an interface here (ip -br link lists them)"
    if [ -n "${TIGON_MTU:-}" ]; then
        run ip link set "$NIC" mtu "$TIGON_MTU"
    fi
    run ip link set "$NIC" up
fi
for d in ${TIGON_DMA:-}; do
    bind "$d"
done
log "ready"
