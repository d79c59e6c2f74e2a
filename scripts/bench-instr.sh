#!/usr/bin/env bash
# Instructions per small message in the engine, counted by callgrind (perf stat cannot count
# instructions in these VMs). Runs `tigon bench scale --pair --peers 1` (two engines polled by one
# thread over the in-memory link, 8-byte messages) for N and 2N messages per traffic phase,
# counting inside the traffic phases only (the bench's own loop included); the difference
# cancels what each phase costs once, leaving the cost of N messages x 2 phases through both
# engines; that count is then split into the engine, the in-memory link and the bench's own
# loop (scripts/callgrind-incl.py, python3). Prints instructions per message per side, the functions
# that cost the most, and writes target/bench/instr.json.
#     scripts/bench-instr.sh [N]        (default N = 20000; `make bench-instr`)
# With --peers P: engine A of `tigon bench scale --peers P --virtual-clock` (one engine
# receiving from P simulated remote nodes, uniform then hot-set traffic), per message it
# receives: its poll and receives, less the in-memory link's calls made by the engine (the
# simulated nodes call the same link functions: their calls are theirs), and A's frames sent
# per message (its acks). The virtual clock moves A's time at its native pace: under
# callgrind's ~50x slowdown a real clock would let far fewer messages share an ack than a
# native run does. Arguments after N go to `bench scale` (e.g. --max-ack-delay-us 1000).
#     scripts/bench-instr.sh --peers 65536 [N [bench scale arguments]]
set -euo pipefail
cd "$(dirname "$0")/.."
peers=""
if [ "${1:-}" = "--peers" ]; then
    peers=${2:-}
    case "$peers" in '' | *[!0-9]*) echo "bench-instr: --peers needs a number, not '$peers'" >&2; exit 2 ;; esac
    shift 2
fi
n=${1:-20000}
shift $(( $# > 0 ? 1 : 0 ))
extra=("$@")
case "$n" in '' | *[!0-9]*) echo "bench-instr: N must be a positive integer, not '$n'" >&2; exit 2 ;; esac
target=${CARGO_TARGET_DIR:-target}
# The binary of the `bench-instr` profile (release, one codegen unit), built by `make
# bench-instr` with one fixed command: with the release profile's four units the count moved
# by about +-9 with the build invocation (feature unification) and with unrelated code.
tigon="$target/bench-instr/tigon"
[ -x "$tigon" ] || { echo "bench-instr: $tigon missing (cargo build --profile bench-instr -p tigon)" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "bench-instr: valgrind missing (apt-get install valgrind)" >&2; exit 1; }
out="$target/bench"
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
count() {
    # Only the traffic phases count: the set-up's idle wait and the latency phase poll for a
    # wall-clock time, so their instruction counts follow the machine's load.
    valgrind --tool=callgrind --toggle-collect='tigon_bench::scale::pair::Pair::traffic*' \
        --callgrind-out-file="$tmp/cg.$1" \
        "$tigon" bench scale --pair --peers 1 --messages "$1" >"$tmp/out.$1" 2>"$tmp/err.$1" ||
        { cat "$tmp/err.$1" >&2; exit 1; }
    awk '/^totals:/ {print $2}' "$tmp/cg.$1"
}
link_fns='(<tigon_engine::memlink::Mem(Link as tigon_engine::link::Link>::(rx_burst|alloc_tx|tx_burst)|Frame as core::ops::drop::Drop>::drop)|core::ptr::drop_in_place<tigon_engine::memlink::MemFrame>)$'
if [ -n "$peers" ]; then
    scount() {
        valgrind --tool=callgrind --toggle-collect='tigon_bench::scale::Pair::traffic*' \
            --callgrind-out-file="$tmp/cg.$1" \
            "$tigon" bench scale --peers "$peers" --messages "$1" --rounds 1 --virtual-clock "${extra[@]}" \
            >"$tmp/out.$1" 2>"$tmp/err.$1" ||
            { cat "$tmp/err.$1" >&2; exit 1; }
        awk '/^totals:/ {print $2}' "$tmp/cg.$1"
    }
    # A's poll and receives (inclusive), less the link calls made by engine functions.
    engine_a() {
        read -r p r <<<"$(python3 scripts/callgrind-incl.py "$tmp/cg.$1" \
            'tigon_engine::engine::Engine<L,C>::poll$' \
            'tigon_engine::engine::api::<impl tigon_engine::engine::Engine<L,C>>::irecv$' |
            paste -sd' ')"
        l=$(python3 scripts/callgrind-incl.py --calls "$tmp/cg.$1" 'tigon_engine::engine' "$link_fns")
        echo "$((p + r - l)) $l"
    }
    t1=$(scount "$n")
    t2=$(scount $((2 * n)))
    read -r e1 l1 <<<"$(engine_a "$n")"
    read -r e2 l2 <<<"$(engine_a $((2 * n)))"
    # Two traffic phases (uniform, hot) of N messages each, all received by A.
    msgs=$((2 * n))
    engine=$(( (e2 - e1) / msgs ))
    link=$(( (l2 - l1) / msgs ))
    rest=$(( (t2 - t1) / msgs - engine - link ))
    echo "bench scale --peers $peers: instructions per message received by engine A (N=$n, 2N=$((2 * n)) per phase, uniform and hot phases)"
    echo "  engine A: $engine, the in-memory link (A's calls): $link, the simulated nodes and the loop: $rest"
    echo "  the 2N run's table (under callgrind: rates are not meaningful, frames per message are):"
    sed -n '/^ *peers/,/^$/p' "$tmp/out.$((2 * n))" | sed 's/^/    /'
    cat >"$out/instr-scale-$peers.json" <<JSON
{"bench": "instr-scale", "command": "scripts/bench-instr.sh --peers $peers $n", "revision": "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)",
 "results": {"peers": $peers, "messages": $n, "engine_per_msg": $engine, "link_per_msg": $link, "nodes_and_loop_per_msg": $rest}}
JSON
    echo "json: $out/instr-scale-$peers.json"
    exit 0
fi
i1=$(count "$n")
i2=$(count $((2 * n)))
# Two traffic phases (uniform, hot) of N messages each; two engines.
per_side=$(( (i2 - i1) / (2 * n) / 2 ))
echo "instructions: $i1 for N=$n, $i2 for N=$((2 * n))"
echo "per small message per side: $per_side in all (the engine, the in-memory link and the bench's loop)"
# The same count split by who spends it: the engine's entry points (poll, isend, irecv,
# inclusive) less the in-memory link's functions called inside them (the link stands in
# for the NIC's driver: not the engine's), the link, and the bench's own loop (the rest).
split() {
    python3 scripts/callgrind-incl.py "$tmp/cg.$1" \
        'tigon_engine::engine::Engine<L,C>::poll$' \
        'tigon_engine::engine::api::<impl tigon_engine::engine::Engine<L,C>>::i(send|recv)$' \
        "$link_fns" |
        paste -sd' '
}
read -r p1 a1 l1 <<<"$(split "$n")"
read -r p2 a2 l2 <<<"$(split $((2 * n)))"
engine=$(( ((p2 + a2 - l2) - (p1 + a1 - l1)) / (2 * n) / 2 ))
link=$(( (l2 - l1) / (2 * n) / 2 ))
bench_loop=$(( per_side - engine - link ))
echo "  of which the engine: $engine, the in-memory link: $link, the bench's loop: $bench_loop"
if [ "$engine" -le 600 ]; then verdict=met; else verdict="not met"; fi
echo "target: the engine <= 600 instructions per small message per side: $engine, $verdict"
echo
echo "engine functions, inclusive instructions (N=$((2 * n)) per phase):"
callgrind_annotate --inclusive=yes "$tmp/cg.$((2 * n))" 2>/dev/null |
    grep -E '^ *[0-9,]+ .*tigon_engine' | grep -v '^ *[0-9,]* *([0-9.%]*) */' | head -20
met=false
[ "$per_side" -le 600 ] && met=true
engine_met=false
[ "$engine" -le 600 ] && engine_met=true
cat >"$out/instr.json" <<JSON
{"bench": "instr", "command": "scripts/bench-instr.sh $n", "revision": "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)",
 "targets": [{"name": "instructions per small message per side <= 600", "value": $per_side, "threshold": 600, "met": $met},
             {"name": "of them in the engine <= 600", "value": $engine, "threshold": 600, "met": $engine_met}],
 "results": {"messages": $n, "instructions_n": $i1, "instructions_2n": $i2, "instr_per_msg_per_side": $per_side,
             "engine_per_msg_per_side": $engine, "link_per_msg_per_side": $link, "bench_loop_per_msg_per_side": $bench_loop}}
JSON
echo
echo "json: $out/instr.json"
