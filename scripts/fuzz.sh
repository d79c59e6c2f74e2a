#!/usr/bin/env bash
# Runs the engine's fuzz targets (engine/fuzz: frame, engine_rx, net, channel) one after the
# other, FUZZ_SECONDS each (default 180), and fails if any of them crashes, panics or hangs.
#     scripts/fuzz.sh [TARGET...]          (`make fuzz`; FUZZ_SECONDS=600 for longer runs)
# Needs the nightly toolchain (sanitizer flags). With cargo-fuzz installed it is used; without
# it (no crates.io here), the fuzz crate is built offline with the flags cargo-fuzz passes
# (sanitizer coverage, inline 8-bit counters, pc table, compare tracing, --cfg fuzzing, debug
# assertions, AddressSanitizer where it links; FUZZ_SANITIZER=none to go without) and each
# target binary (libFuzzer's own main) is run directly.
# Corpora grow in $CARGO_TARGET_DIR/fuzz/corpus/<target> and are kept between runs; each run
# also starts from seeds made afresh by the crate's own emit functions (examples/seeds.rs),
# so they follow the wire version. A crashing input lands in $CARGO_TARGET_DIR/fuzz/artifacts/
# <target>/ (reproduce: the target binary with the file as argument); logs in .../fuzz/logs/.
# Extra libFuzzer flags: FUZZ_ARGS (e.g. FUZZ_ARGS=-jobs=2).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
seconds=${FUZZ_SECONDS:-180}
case "$seconds" in '' | *[!0-9]*) echo "fuzz: FUZZ_SECONDS must be a number of seconds, not '$seconds'" >&2; exit 2 ;; esac
sanitizer=${FUZZ_SANITIZER:-address}
read -r -a extra <<<"${FUZZ_ARGS:-}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' engine/fuzz/Cargo.toml | grep -v '^tigon-engine-fuzz$')
fi
if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz: needs the nightly toolchain: rustup toolchain install nightly --profile minimal" >&2
    exit 2
fi
out=${CARGO_TARGET_DIR:-$root/target}/fuzz
mkdir -p "$out/logs"
triple=$(rustc +nightly -vV | sed -n 's/^host: //p')

# The fuzz crate is outside the workspace with a lock of its own (not in git): started from
# the workspace's, its shared dependencies are the versions the tests run, all in the local
# registry cache (so --offline resolves).
[ -f engine/fuzz/Cargo.lock ] || cp Cargo.lock engine/fuzz/Cargo.lock

# Seeds, built by a plain (uninstrumented) build of the fuzz crate's example.
CARGO_TARGET_DIR=$out cargo +nightly run -q --offline -j"${JOBS:-2}" \
    --manifest-path engine/fuzz/Cargo.toml --example seeds -- "$out/seeds" "${targets[@]}"

use_cargo_fuzz=0
if cargo +nightly fuzz --version >/dev/null 2>&1; then
    use_cargo_fuzz=1
else
    flags="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
    flags+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters"
    flags+=" -Cllvm-args=-sanitizer-coverage-pc-table"
    flags+=" -Cllvm-args=-sanitizer-coverage-trace-compares"
    flags+=" -Cllvm-args=-sanitizer-coverage-stack-depth"
    flags+=" --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
    build() {
        # --target: the sanitizer flags reach the fuzz crate and its dependencies, not build
        # scripts or proc macros.
        CARGO_TARGET_DIR=$out RUSTFLAGS="$1" cargo +nightly build -q --offline --release \
            -j"${JOBS:-2}" --manifest-path engine/fuzz/Cargo.toml --target "$triple" --bins
    }
    if [ "$sanitizer" = address ] && build "$flags -Zsanitizer=address"; then
        echo "fuzz: built with AddressSanitizer"
    else
        [ "$sanitizer" = address ] && echo "fuzz: AddressSanitizer build failed; building without it"
        build "$flags"
    fi
    bin=$out/$triple/release
fi

failed=()
for t in "${targets[@]}"; do
    corpus=$out/corpus/$t
    artifacts=$out/artifacts/$t
    mkdir -p "$corpus" "$artifacts" "$out/seeds/$t"
    log=$out/logs/$t.log
    echo "fuzz: $t for ${seconds}s (corpus $corpus)"
    start=$(date +%s)
    # The first directory takes the new inputs; the seeds are read only.
    args=(-max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$artifacts/" "${extra[@]}")
    if [ $use_cargo_fuzz = 1 ]; then
        cmd=(cargo +nightly fuzz run --fuzz-dir engine/fuzz --target-dir "$out" --debug-assertions "$t" "$corpus" "$out/seeds/$t" -- "${args[@]}")
    else
        cmd=("$bin/$t" "${args[@]}" "$corpus" "$out/seeds/$t")
    fi
    if "${cmd[@]}" >"$log" 2>&1; then
        status=ok
    else
        status=FAILED
        failed+=("$t")
    fi
    # libFuzzer's last status line (executions, coverage, features, corpus) and its totals.
    summary=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    edges=$(sed -n 's/.*(\([0-9]*\) inline 8-bit counters).*/\1/p' "$log" | head -1)
    echo "fuzz: $t $status after $(($(date +%s) - start))s: ${runs:-?} executions; ${summary:-no status line}"
    echo "fuzz: $t: cov = edges reached, of ${edges:-?} instrumented (the engine's and its dependencies')"
    if [ $status = FAILED ]; then
        grep -E 'panicked at|ERROR: libFuzzer|ERROR: AddressSanitizer|SUMMARY|Test unit written' "$log" | head -8 || true
        echo "fuzz: full log: $log"
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: FAILED: ${failed[*]}"
    exit 1
fi
echo "fuzz: ${targets[*]}: no crash in ${seconds}s each"
