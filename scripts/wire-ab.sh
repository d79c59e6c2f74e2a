#!/usr/bin/env bash
# UDP/IPv4 against raw Ethernet on one fabric, in many short alternating runs: each pair runs
# `tigon run --fabric F --wire W -np 2 -- NPopenmpi -l 1 -u 64 -p 0` once over each wire, the
# order switching every pair (ether first, then udp first, ...), and takes the mean one-way
# time at 1, 8 and 64 bytes (the demo's small-message latency). Prints every pair, then the
# median of the pairs' udp/ether ratios with its quartiles, and each wire's median.
# The demo's rounds are too few for a 5 % question here: this VM's latency moves by up to
# a quarter between runs, and the second run of a pair was slower in most pairs, whatever
# its wire (hence the switching order). 30 pairs take about 6 minutes.
#     scripts/wire-ab.sh [memif|veth] [PAIRS]        (defaults: veth, 30)
set -euo pipefail
cd "$(dirname "$0")/.."
fabric=${1:-veth}
pairs=${2:-30}
case "$fabric" in memif | veth) ;; *) echo "wire-ab: fabric must be memif or veth, not '$fabric'" >&2; exit 2 ;; esac
case "$pairs" in '' | *[!0-9]* | 0) echo "wire-ab: PAIRS must be a positive integer, not '$pairs'" >&2; exit 2 ;; esac
tigon=${CARGO_TARGET_DIR:-target}/release/tigon
[ -x "$tigon" ] || { echo "wire-ab: $tigon not built (make build)" >&2; exit 1; }

# One run over wire $1: its mean one-way time (us) at 1, 8 and 64 bytes.
one() {
    "$tigon" run --fabric "$fabric" --wire "$1" -np 2 -- NPopenmpi -l 1 -u 64 -p 0 -o "$scratch/np.out" 2>&1 |
        awk '/ 1 bytes| 8 bytes| 64 bytes/ { s += $(NF - 1); n++ }
             END { if (n != 3) exit 1; printf "%.3f\n", s / n }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
quartile() { sort -g | awk -v q="$1" '{ v[NR] = $1 } END { i = int(q * (NR - 1) + 0.5) + 1; print v[i] }'; }

# The pairs' figures, and NetPIPE's own output file (it writes np.out where it runs).
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
out=$scratch/pairs
for i in $(seq 1 "$pairs"); do
    if (( i % 2 )); then first=ether; second=udp; else first=udp; second=ether; fi
    a=$(one $first) || { echo "wire-ab: run over $first failed" >&2; exit 1; }
    b=$(one $second) || { echo "wire-ab: run over $second failed" >&2; exit 1; }
    if [ $first = ether ]; then e=$a; u=$b; else e=$b; u=$a; fi
    r=$(awk -v u="$u" -v e="$e" 'BEGIN { printf "%.3f", u / e }')
    echo "pair $i ($first first): ether $e us, udp $u us, udp/ether $r"
    echo "$e $u $r" >>"$out"
done
echo "fabric $fabric, $pairs pairs: udp/ether median $(cut -d' ' -f3 "$out" | median)" \
    "(quartiles $(cut -d' ' -f3 "$out" | quartile 0.25)-$(cut -d' ' -f3 "$out" | quartile 0.75));" \
    "medians ether $(cut -d' ' -f1 "$out" | median) us, udp $(cut -d' ' -f2 "$out" | median) us"
