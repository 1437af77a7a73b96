#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer check of the runtime on the
# flagship path: builds pipeforge-run alone with -fsanitize=address,undefined
# (no recovery: the first report ends the run) into build-asan/, then trains
# moe-tiny on pipeline 2 x expert 2 with the default AdamW, clipping,
# post-validation and a checkpoint/resume, under mpirun and under
# --local-ranks. Exits non-zero on any sanitizer report.
#   BUILD_DIR (default: build; its pipeforge-compile makes the program)
#   ASAN_BUILD_DIR (default: build-asan)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
ASAN_BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
JOBS=${JOBS:-$(nproc)}

linker=()
command -v ld.lld >/dev/null 2>&1 && linker=(-DLLVM_USE_LINKER=lld)
mkdir -p "$ASAN_BUILD_DIR"
if [ ! -f "$ASAN_BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$ASAN_BUILD_DIR" -G Ninja "${linker[@]}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLVM_USE_SANITIZER="Address;Undefined" \
    -DPIPEFORGE_ENABLE_CUDA=OFF -DPIPEFORGE_BUILD_TESTS=OFF \
    -DPIPEFORGE_BUILD_BENCHMARKS=OFF >"$ASAN_BUILD_DIR/configure.log" 2>&1 || {
    echo "sanitize: configure failed:"; tail -30 "$ASAN_BUILD_DIR/configure.log"; exit 1; }
fi
ninja -C "$ASAN_BUILD_DIR" -j "$JOBS" pipeforge-run >"$ASAN_BUILD_DIR/build.log" 2>&1 || {
  echo "sanitize: build failed:"; grep -E "error|FAILED" -A3 "$ASAN_BUILD_DIR/build.log" | head -40; exit 1; }
[ -x "$BUILD_DIR/bin/pipeforge-compile" ] || ninja -C "$BUILD_DIR" -j "$JOBS" pipeforge-compile >/dev/null

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run=$ASAN_BUILD_DIR/bin/pipeforge-run
"$BUILD_DIR/bin/pipeforge-compile" examples/moe-tiny.json --schedule dualpipev --ranks 2 --ep 2 \
  --microbatches 8 --seq-len 16 -o "$out/ep.pfp"
# Open MPI's own allocations are reported as leaks at exit: no leak check
# under mpirun; the --local-ranks run (no MPI) checks leaks too.
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
opts=(--steps 4 --clip 0.5 --optimizer-sync post-validation --save-every 2)
status=0
check() { # NAME LOG
  if grep -qE "ERROR: (Address|Leak)Sanitizer|runtime error:" "$2" ||
     [ "$(grep -c '^step ' "$2")" -eq 0 ]; then
    echo "sanitize: $1: FAILED"; grep -E -A25 "ERROR: |runtime error:" "$2" | head -60
    status=1
  else
    echo "sanitize: $1: clean ($(grep -c '^step ' "$2") steps)"
  fi
}
if command -v mpirun >/dev/null 2>&1; then
  ASAN_OPTIONS=detect_leaks=0 mpirun --oversubscribe -x ASAN_OPTIONS -x UBSAN_OPTIONS -np 4 \
    "$run" "$out/ep.pfp" "${opts[@]}" --checkpoint-dir "$out/ck" --steps 2 >"$out/mpi1.log" 2>&1 || status=1
  ASAN_OPTIONS=detect_leaks=0 mpirun --oversubscribe -x ASAN_OPTIONS -x UBSAN_OPTIONS -np 4 \
    "$run" "$out/ep.pfp" "${opts[@]}" --checkpoint-dir "$out/ck" --resume \
    --dump-weights "$out/mpi.w" >>"$out/mpi1.log" 2>&1 || status=1
  check "mpirun -np 4 (pp2 x ep2, AdamW, post-validation, checkpoint, resume)" "$out/mpi1.log"
fi
ASAN_OPTIONS=detect_leaks=1 "$run" "$out/ep.pfp" --local-ranks 4 "${opts[@]}" \
  --checkpoint-dir "$out/ck-threads" --dump-weights "$out/threads.w" >"$out/threads.log" 2>&1 || status=1
check "--local-ranks 4 (pp2 x ep2, AdamW, post-validation, checkpoint)" "$out/threads.log"
ASAN_OPTIONS=detect_leaks=1 "$run" "$out/ep.pfp" --local-ranks 4 --backend cpu-device --steps 2 \
  --clip 0.5 >"$out/device.log" 2>&1 || status=1
check "--local-ranks 4 --backend cpu-device (pp2 x ep2, AdamW)" "$out/device.log"
# Fused overlapped pairs (phased moe kernels interleaved), pp2 x ep2 x dp2.
"$BUILD_DIR/bin/pipeforge-compile" examples/moe-tiny.json --schedule dualpipe --ranks 2 --ep 2 \
  --dp 2 --microbatches 8 --seq-len 16 --fuse-overlap -o "$out/fused.pfp"
ASAN_OPTIONS=detect_leaks=1 "$run" "$out/fused.pfp" --local-ranks 8 --steps 2 --clip 0.5 \
  --dump-weights "$out/fused.w" >"$out/fused.log" 2>&1 || status=1
check "--local-ranks 8 (dualpipe --fuse-overlap, pp2 x ep2 x dp2, AdamW)" "$out/fused.log"
ASAN_OPTIONS=detect_leaks=1 "$run" "$out/fused.pfp" --local-ranks 8 --backend cpu-device --steps 2 \
  >"$out/fused-device.log" 2>&1 || status=1
check "--local-ranks 8 --backend cpu-device (the same)" "$out/fused-device.log"
[ $status -eq 0 ] && echo "sanitize: all clean" || { echo "sanitize: FAILED"; }
exit $status
