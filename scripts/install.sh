#!/usr/bin/env bash
# Installs tigon on a node or into an image, the one install script:
#   PREFIX/bin/tigon                          the agent, doctor, stats, run
#   OMPI_DIR/mca_mtl_tigon.so                 the Open MPI component (+ help-mtl-tigon.txt), where
#                                             mpirun finds it without --mca mca_base_component_path
#                                             (OMPI_DIR: what `ompi_info --path pkglibdir` says)
#   PREFIX/lib/tigon/tigon-prestart.sh        hugepages and NIC binding (the unit's ExecStartPre)
#   /etc/systemd/system/tigon-agent.service   the agent's systemd unit
#   /etc/tigon/agent.env, agent.json          example configuration (kept if already there)
#   PREFIX/share/doc/tigon/README.md, ARCHITECTURE.md
#
# usage: scripts/install.sh [--build] [--from DIR] [--destdir DIR] [--prefix DIR] [--ompi-dir DIR]
#   --build     first set the machine up and build (scripts/setup.sh, then make release)
#   --from      where the built tigon and libmca_mtl_tigon.so are
#               (default: $CARGO_TARGET_DIR/release, else target/release)
#   --destdir   staging root (packages, images, tests); default: /
#   --prefix    default /usr/local (the unit's paths follow it)
#   --ompi-dir  Open MPI's component directory (default: ompi_info's pkglibdir)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FROM="${CARGO_TARGET_DIR:-$ROOT/target}/release"
DESTDIR=""
PREFIX=/usr/local
OMPI_DIR=""
BUILD=0

while [ $# -gt 0 ]; do
    case "$1" in
    --build) BUILD=1; shift ;;
    --from) FROM=$2; shift 2 ;;
    --destdir) DESTDIR=${2%/}; shift 2 ;;
    --prefix) PREFIX=${2%/}; shift 2 ;;
    --ompi-dir) OMPI_DIR=${2%/}; shift 2 ;;
    *) echo "install.sh: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
    esac
done

if [ "$BUILD" = 1 ]; then
    env_out=$("$ROOT/scripts/setup.sh")
    eval "$env_out"
    make -C "$ROOT" release
fi

for f in tigon libmca_mtl_tigon.so; do
    [ -f "$FROM/$f" ] || {
        echo "install.sh: $FROM/$f not found: build first (scripts/install.sh --build, or make release), or pass --from DIR" >&2
        exit 1
    }
done

# Where this Open MPI loads components from (mpirun then finds tigon's with no option).
if [ -z "$OMPI_DIR" ]; then
    OMPI_DIR=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed -n 's/^path:pkglibdir://p')
fi
[ -n "$OMPI_DIR" ] || {
    echo "install.sh: ompi_info did not say where Open MPI's components are: install Open MPI 4.1 (apt-get install openmpi-bin), or pass --ompi-dir DIR" >&2
    exit 1
}

say() { echo "install: $*" >&2; }
inst() { # mode source destination
    install -D -m "$1" "$2" "$DESTDIR$3"
    say "$3"
}

inst 0755 "$FROM/tigon" "$PREFIX/bin/tigon"
inst 0644 "$FROM/libmca_mtl_tigon.so" "$OMPI_DIR/mca_mtl_tigon.so"
inst 0644 "$ROOT/ompi-mtl/help-mtl-tigon.txt" "$OMPI_DIR/help-mtl-tigon.txt"
inst 0755 "$ROOT/scripts/tigon-prestart.sh" "$PREFIX/lib/tigon/tigon-prestart.sh"
inst 0644 "$ROOT/README.md" "$PREFIX/share/doc/tigon/README.md"
inst 0644 "$ROOT/docs/ARCHITECTURE.md" "$PREFIX/share/doc/tigon/ARCHITECTURE.md"
unit="$DESTDIR/etc/systemd/system/tigon-agent.service"
mkdir -p "$(dirname "$unit")"
sed "s|/usr/local/|$PREFIX/|g" "$ROOT/docker/tigon-agent.service" >"$unit"
say /etc/systemd/system/tigon-agent.service
for f in agent.env agent.json; do
    if [ -e "$DESTDIR/etc/tigon/$f" ]; then
        say "/etc/tigon/$f kept"
    else
        inst 0644 "$ROOT/docker/$f" "/etc/tigon/$f"
    fi
done
if [ -z "$DESTDIR" ] && command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    systemctl daemon-reload
fi
say "done; next: edit /etc/tigon/agent.env and agent.json, then systemctl enable --now tigon-agent"
