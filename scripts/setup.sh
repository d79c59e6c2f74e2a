#!/usr/bin/env bash
# Idempotent machine set-up for tigon (Debian 12, root): system packages, Rust toolchain,
# cargo-nextest, hugepages. Progress goes to stderr; stdout carries shell `export` lines for
# the caller to eval (TIGON_NO_HUGE=1 when hugepages cannot be reserved):
#     env_out=$(scripts/setup.sh) && eval "$env_out"
set -euo pipefail

log() { echo "setup: $*" >&2; }
warn() { echo "setup: WARNING: $*" >&2; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        warn "not root and no sudo: package installation, hugepages and network namespaces will fail"
    fi
fi

# --- system packages -------------------------------------------------------------------------
PACKAGES=(dpdk dpdk-dev libdpdk-dev openmpi-bin libopenmpi-dev clang libclang-dev pkg-config
    iproute2 nftables netpipe-openmpi python3-mpi4py libfabric-bin build-essential procps
    curl ca-certificates git
    # ompi-mtl/tests/chaos.rs runs the MTL under memcheck.
    valgrind
    # tests/guide.rs validates docker/compose.yaml against the Compose schema.
    python3-yaml python3-jsonschema
    # tests/udp_wire.rs: a capture of the routed fabric, read back by tcpdump and by
    # Wireshark's dissectors (tshark)
    tcpdump tshark iputils-ping
    # text in the PNG plots of `tigon bench mpi`
    fonts-dejavu-core)
missing=()
for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Wait for another apt/dpkg run (e.g. unattended upgrades) instead of failing on its lock.
    $SUDO apt-get -o DPkg::Lock::Timeout=900 update -q >&2
    $SUDO apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends \
        "${missing[@]}" >&2
else
    log "system packages present"
fi

# --- Rust toolchain (edition 2024 needs Rust >= 1.85; Debian 12's rustc is older) -------------
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
    echo "export PATH=\"$HOME/.cargo/bin:\$PATH\""
fi
if ! command -v cargo >/dev/null 2>&1; then
    log "installing the Rust toolchain with rustup"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
        sh -s -- -y --profile minimal --component clippy,rustfmt >&2
    export PATH="$HOME/.cargo/bin:$PATH"
    echo "export PATH=\"$HOME/.cargo/bin:\$PATH\""
fi
if command -v rustup >/dev/null 2>&1; then
    for c in clippy rustfmt; do
        if ! rustup component list --installed 2>/dev/null | grep -q "^$c"; then
            log "adding rustup component $c"
            rustup component add "$c" >&2
        fi
    done
fi
if ! cargo nextest --version >/dev/null 2>&1; then
    log "installing cargo-nextest"
    cargo install cargo-nextest --locked >&2
fi
log "$(cargo --version), $(cargo nextest --version 2>/dev/null | head -1)"

# --- hugepages --------------------------------------------------------------------------------
WANT_PAGES=512
HUGE_DIR=/dev/hugepages
no_huge() {
    warn "$1: running DPDK without hugepages (--no-huge, TIGON_NO_HUGE=1); fine for the vdevs used here"
    echo "export TIGON_NO_HUGE=1"
    exit 0
}
if [ "${TIGON_NO_HUGE:-0}" != "0" ] && [ -n "${TIGON_NO_HUGE:-}" ]; then
    no_huge "TIGON_NO_HUGE is set"
fi
total=$(cat /proc/sys/vm/nr_hugepages 2>/dev/null || echo 0)
if [ "$total" -lt "$WANT_PAGES" ]; then
    echo "$WANT_PAGES" | $SUDO tee /proc/sys/vm/nr_hugepages >/dev/null 2>&1 ||
        no_huge "cannot reserve hugepages (/proc/sys/vm/nr_hugepages is read-only here)"
fi
if ! mountpoint -q "$HUGE_DIR" 2>/dev/null; then
    $SUDO mkdir -p "$HUGE_DIR" 2>/dev/null || true
    $SUDO mount -t hugetlbfs nodev "$HUGE_DIR" 2>/dev/null ||
        no_huge "cannot mount hugetlbfs at $HUGE_DIR"
fi
free=$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)
size=$(awk '/Hugepagesize/ {print $2}' /proc/meminfo)
if [ "${free:-0}" -lt 64 ]; then
    no_huge "only ${free:-0} free hugepages (of $(cat /proc/sys/vm/nr_hugepages)); stale rtemap files under $HUGE_DIR hold pages after a killed DPDK process"
fi
log "hugepages: ${free} of $(cat /proc/sys/vm/nr_hugepages) free (${size} kB each), hugetlbfs at $HUGE_DIR"
echo "unset TIGON_NO_HUGE"
