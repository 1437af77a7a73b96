#!/usr/bin/env bash
# libFuzzer run of every input boundary (fuzz/, docs/reliability.md):
# configures build-fuzz/ with clang-22 and -DPIPEFORGE_ENABLE_FUZZ=ON (ASan +
# UBSan + fuzzer coverage, no recovery), builds the targets, seeds each
# corpus, runs each target for SECONDS_PER_TARGET (default 60) with a 10 s
# per-input timeout and a 2 GiB RSS limit, and prints a table: target,
# executions, corpus size, result. Exits non-zero when a target finds a
# crash, a sanitizer report, a timeout or an out-of-memory (the input is
# kept under build-fuzz/crashes/<target>/ and its path printed).
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#   FUZZ_BUILD_DIR (default build-fuzz)
#   BUILD_DIR (default build): its pipeforge-compile / -sched / -import, when
#     built, make extra seeds (programs, CSVs, nn IR); without them the
#     in-tree and example seeds are used
#   FUZZ_PARALLEL (default 1): targets run at once
#   JOBS (default nproc): build parallelism
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-60}
shift || true
ALL_TARGETS=(ConfigFuzzer ProgramFuzzer CsvFuzzer CheckpointFuzzer ManifestFuzzer
  TokenFuzzer MegatronFuzzer PassPipelineFuzzer SafetensorsFuzzer)
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("${ALL_TARGETS[@]}")
FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
BUILD_DIR=${BUILD_DIR:-build}
FUZZ_PARALLEL=${FUZZ_PARALLEL:-1}
JOBS=${JOBS:-$(nproc)}
CC=${CC:-clang-22}
CXX=${CXX:-clang++-22}
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}

command -v "$CXX" >/dev/null || { echo "fuzz: $CXX not found (scripts/setup.sh installs clang-22)"; exit 1; }

# --- Build -------------------------------------------------------------------
linker=()
command -v ld.lld-22 >/dev/null 2>&1 && linker=(-DLLVM_USE_LINKER=lld-22)
command -v ld.lld >/dev/null 2>&1 && linker=(-DLLVM_USE_LINKER=lld)
mkdir -p "$FUZZ_BUILD_DIR"
t0=$(date +%s)
if [ ! -f "$FUZZ_BUILD_DIR/build.ninja" ]; then
  # RelWithDebInfo without NDEBUG: the project's asserts stay on.
  CC=$CC CXX=$CXX cmake -S . -B "$FUZZ_BUILD_DIR" -G Ninja "${linker[@]}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DPIPEFORGE_ENABLE_FUZZ=ON -DPIPEFORGE_ENABLE_CUDA=OFF \
    -DPIPEFORGE_BUILD_TESTS=OFF -DPIPEFORGE_BUILD_BENCHMARKS=OFF \
    >"$FUZZ_BUILD_DIR/configure.log" 2>&1 || {
    echo "fuzz: configure failed:"; tail -30 "$FUZZ_BUILD_DIR/configure.log"; exit 1; }
fi
ninja -C "$FUZZ_BUILD_DIR" -j "$JOBS" "${TARGETS[@]}" >"$FUZZ_BUILD_DIR/build.log" 2>&1 || {
  echo "fuzz: build failed:"; grep -E "error|FAILED" -A3 "$FUZZ_BUILD_DIR/build.log" | head -40; exit 1; }
echo "fuzz: built ${#TARGETS[@]} target(s) in $(( $(date +%s) - t0 )) s"

# --- Seeds ---------------------------------------------------------------------
# build-fuzz/seeds/<T>/: regenerated each run; fuzz/corpus/<T>/: in-tree
# hand-made seeds; build-fuzz/corpus/<T>/: what the fuzzer found (kept).
SEEDS=$FUZZ_BUILD_DIR/seeds
rm -rf "$SEEDS"
for t in "${ALL_TARGETS[@]}"; do mkdir -p "$SEEDS/$t" "$FUZZ_BUILD_DIR/corpus/$t"; done
small() { [ "$(stat -c %s "$1")" -le 65536 ]; } # the targets' kMaxInput
for f in examples/*.json test/Import/Inputs/*.json; do
  cp "$f" "$SEEDS/ConfigFuzzer/$(basename "$f")"
done
for f in examples/*.mlir test/Transforms/*.mlir test/Dialect/*/*.mlir test/Target/*/*.mlir \
    test/*/Inputs/*.mlir; do
  [ -f "$f" ] && small "$f" && cp "$f" "$SEEDS/PassPipelineFuzzer/$(echo "$f" | tr / _)"
done
for f in $(find test -name '*.csv'); do cp "$f" "$SEEDS/CsvFuzzer/$(basename "$f")"; done
B=$BUILD_DIR/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -x "$B/pipeforge-sched" ]; then
  for s in gpipe 1f1b interleaved zb-h1 zbv dualpipe dualpipev; do
    "$B/pipeforge-sched" --schedule $s --ranks 2 --microbatches 4 --format csv \
      -o "$SEEDS/CsvFuzzer/$s.csv" >/dev/null 2>&1 || true
  done
fi
if [ -x "$B/pipeforge-compile" ]; then
  # Programs: the JSON body (the target adds the header) and one whole file.
  for m in "1f1b 2" "zbv 2" "dualpipev 2 --ep 2 --fuse-overlap" "none 1"; do
    set -- $m
    for cfg in examples/gpt-tiny.json examples/moe-tiny.json; do
      out=$tmp/$(basename "$cfg" .json)-$1.pfp
      "$B/pipeforge-compile" "$cfg" --schedule "$1" --ranks "$2" "${@:3}" \
        --microbatches 4 --seq-len 8 -o "$out" >/dev/null 2>&1 || continue
      small "$out" && tail -c +33 "$out" >"$SEEDS/ProgramFuzzer/$(basename "$out").json"
    done
  done
  f=$(ls "$tmp"/*.pfp 2>/dev/null | head -1)
  [ -n "$f" ] && small "$f" && cp "$f" "$SEEDS/ProgramFuzzer/whole.pfp"
fi
if [ -x "$B/pipeforge-import" ]; then
  for cfg in examples/*-tiny.json; do
    out=$SEEDS/PassPipelineFuzzer/$(basename "$cfg" .json).mlir
    "$B/pipeforge-import" "$cfg" --seq-len 8 -o "$out" >/dev/null 2>&1 || rm -f "$out"
    [ -f "$out" ] && { small "$out" || rm -f "$out"; }
  done
fi

# --- Runs ----------------------------------------------------------------------
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
LOGS=$FUZZ_BUILD_DIR/logs
mkdir -p "$LOGS"
run_one() { # TARGET
  local t=$1 crashes=$FUZZ_BUILD_DIR/crashes/$1/
  mkdir -p "$crashes"
  local dirs=("$FUZZ_BUILD_DIR/corpus/$t" "$SEEDS/$t")
  [ -d "fuzz/corpus/$t" ] && dirs+=("fuzz/corpus/$t")
  local rc=0
  "$FUZZ_BUILD_DIR/bin/$t" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 \
    -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$crashes" "${dirs[@]}" >"$LOGS/$t.log" 2>&1 || rc=$?
  echo $rc >"$LOGS/$t.rc"
}
echo "fuzz: ${SECONDS_PER_TARGET} s per target, $FUZZ_PARALLEL at a time"
t0=$(date +%s)
running=0
for t in "${TARGETS[@]}"; do
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$FUZZ_PARALLEL" ]; then wait -n || true; running=$((running - 1)); fi
done
wait || true
echo "fuzz: ran in $(( $(date +%s) - t0 )) s"

status=0
printf '%-20s %12s %8s  %s\n' target executions corpus result
for t in "${TARGETS[@]}"; do
  log=$LOGS/$t.log
  rc=$(cat "$LOGS/$t.rc" 2>/dev/null || echo 1)
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  corpus=$(ls "$FUZZ_BUILD_DIR/corpus/$t" | wc -l)
  if [ "$rc" -eq 0 ]; then
    result=ok
  else
    status=1
    art=$(grep -o "Test unit written to .*" "$log" | tail -1 | sed 's/Test unit written to //')
    kind=$(grep -oE "ERROR: libFuzzer: [a-z-]+|ERROR: AddressSanitizer: [a-z-]+|runtime error|invariant broken" "$log" | head -1)
    result="FAILED (${kind:-exit $rc}) ${art:-see $log}"
  fi
  printf '%-20s %12s %8s  %s\n' "$t" "${execs:-?}" "$corpus" "$result"
done
[ $status -eq 0 ] && echo "fuzz: no crash" || echo "fuzz: FAILED (logs in $LOGS)"
exit $status
