#!/usr/bin/env bash
# Two builds of `tigon bench scale` against each other, in alternating runs: each pair runs
# BIN_A, then BIN_B (the order switching every pair), each `bench scale --peers 2,65536` with
# the arguments given after `--` (default `--rounds 1`), and takes the run's ratio (its
# median, the 65,536-peer uniform rate over the 2-peer one) and both rates. Prints every
# run, then each build's median ratio and in how many pairs B's ratio was the higher.
# This VM's pace moves by a quarter between runs a minute apart (2 peers 8.8-11.8 M msgs/s
# in one hour): a change of a few hundredths shows only in many alternating runs, never in
# one. Build the two binaries first (e.g. `git stash; cargo build --release -p tigon; cp
# target/release/tigon /tmp/tigon-a; git stash pop; ...`); measure on a quiet machine.
#     scripts/scale-ab.sh BIN_A BIN_B [PAIRS] [-- bench scale arguments]   (PAIRS: 5)
set -euo pipefail
usage() { echo "usage: scripts/scale-ab.sh BIN_A BIN_B [PAIRS] [-- bench scale arguments]" >&2; exit 2; }
[ $# -ge 2 ] || usage
a=$1 b=$2
shift 2
pairs=5
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
    pairs=$1
    shift
fi
case "$pairs" in '' | *[!0-9]* | 0) echo "scale-ab: PAIRS must be a positive integer, not '$pairs'" >&2; exit 2 ;; esac
if [ $# -gt 0 ]; then
    [ "$1" = "--" ] || usage
    shift
fi
args=("$@")
for x in "${args[@]}"; do
    case "$x" in --peers | --peers=*) echo "scale-ab: the peers are 2 and 65,536, not an argument" >&2; exit 2 ;; esac
done
[ ${#args[@]} -gt 0 ] || args=(--rounds 1)
for bin in "$a" "$b"; do
    [ -x "$bin" ] || { echo "scale-ab: $bin is not an executable" >&2; exit 1; }
done

median() { sort -g | awk '{ v[NR] = $1 } END { printf "%.3f\n", (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

# One run of build $1: "ratio rate2 rate65536" (M msgs/s).
one() {
    "$1" bench scale --peers 2,65536 "${args[@]}" 2>/dev/null | awk '
        $1 == 2 && $4 == "M" { r2 = $3 }
        $1 == 65536 && $4 == "M" { rn = $3 }
        /^median / { m = $2; sub(/,$/, "", m) }
        END { if (m == "" || r2 == "" || rn == "") exit 1; print m, r2, rn }'
}

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
echo "load at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq 1 "$pairs"); do
    if (( i % 2 )); then order=(A B); else order=(B A); fi
    for w in "${order[@]}"; do
        bin=$a
        [ "$w" = B ] && bin=$b
        read -r m r2 rn <<<"$(one "$bin")" || { echo "scale-ab: a run of $bin failed" >&2; exit 1; }
        echo "pair $i, $w: ratio $m (2 peers $r2 M, 65,536 $rn M msgs/s)"
        echo "$m" >>"$scratch/$w"
    done
    paste "$scratch/A" "$scratch/B" | tail -1 >>"$scratch/pairs"
done
ma=$(median <"$scratch/A")
mb=$(median <"$scratch/B")
wins=$(awk '$2 > $1 { n++ } END { print n + 0 }' "$scratch/pairs")
ties=$(awk '$2 == $1 { n++ } END { print n + 0 }' "$scratch/pairs")
echo "A ($a): median ratio $ma; B ($b): median ratio $mb; B higher in $wins of $pairs pairs ($ties equal)"
