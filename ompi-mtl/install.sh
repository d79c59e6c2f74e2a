#!/usr/bin/env bash
# Installs the tigon MTL where Open MPI can load it: copies cargo's libmca_mtl_tigon.so as
# mca_mtl_tigon.so, with help-mtl-tigon.txt next to it, into DIR (default:
# <target>/<profile>/ompi), and prints the --mca option that makes Open MPI look there.
#
#   ompi-mtl/install.sh [--release] [DIR]
#
# Build first: cargo build [--release] -p tigon-ompi-mtl
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
profile=debug
if [ "${1:-}" = "--release" ]; then profile=release; shift; fi
target=${CARGO_TARGET_DIR:-$here/../target}
so="$target/$profile/libmca_mtl_tigon.so"
[ -f "$so" ] || { echo "install.sh: $so missing: run cargo build ${profile/debug/} -p tigon-ompi-mtl" >&2; exit 1; }
dir=${1:-$target/$profile/ompi}
mkdir -p "$dir"
cp "$so" "$dir/mca_mtl_tigon.so.tmp" && mv "$dir/mca_mtl_tigon.so.tmp" "$dir/mca_mtl_tigon.so"
cp "$here/help-mtl-tigon.txt" "$dir/help-mtl-tigon.txt"
pkglib=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed -n 's/^path:pkglibdir://p')
pkglib=${pkglib:-/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3}
echo "installed $dir/mca_mtl_tigon.so"
echo "use: mpirun --mca mca_base_component_path $dir:$pkglib --mca pml cm --mca mtl tigon ..."
echo "     (ompi_info: OMPI_MCA_mca_base_component_path=$dir:$pkglib ompi_info --param mtl tigon --level 9)"
