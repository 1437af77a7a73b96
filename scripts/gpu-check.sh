#!/usr/bin/env bash
# The GPU check, one script for a machine with an NVIDIA GPU (docs/runtime-gpu.md):
#   1. builds (CUDA for the local GPU's architecture only, to be quick),
#   2. runs the GPU unit tests: every CUDA kernel against the CPU reference,
#   3. trains the tiny GPT pipelined on 4 ranks in single-GPU multi-rank mode
#      (--local-ranks: ranks as threads sharing the GPU, device copies between
#      them) with each schedule, and checks the loss curve and the final
#      weights against the single-GPU unpipelined run, and that run against
#      the CPU reference,
#   4. the same through MPI processes sharing the GPU (host-staged messages),
#      and with NCCL when there are at least 2 GPUs,
#   5. prints tokens/s per schedule and the GEMM TFLOP/s (fp32, bf16).
# Exits non-zero on any mismatch; exits 2 when there is no GPU.
#   BUILD_DIR (default build-gpu)  STEPS (default 10)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-gpu}
STEPS=${STEPS:-10}
start=$(date +%s)
say() { printf '== %s (%ds)\n' "$*" $(( $(date +%s) - start )); }

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU answers (nvidia-smi -L): nothing to check" >&2
  exit 2
fi
nvidia-smi -L
ngpu=$(nvidia-smi -L | grep -c '^GPU')
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')

say "build ($BUILD_DIR, sm_$cc)"
[ -n "${SKIP_SETUP:-}" ] || bash scripts/setup.sh || exit 1
mkdir -p "$BUILD_DIR"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  linker=(); command -v ld.lld >/dev/null 2>&1 && linker=(-DLLVM_USE_LINKER=lld)
  cmake -S . -B "$BUILD_DIR" -G Ninja "${linker[@]}" -DPIPEFORGE_ENABLE_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$cc" -DPIPEFORGE_BUILD_BENCHMARKS=ON \
    >"$BUILD_DIR/configure.log" 2>&1 || { tail -30 "$BUILD_DIR/configure.log"; exit 1; }
fi
ninja -C "$BUILD_DIR" pipeforge-compile pipeforge-run CudaBackendTests CudaMathTests cuda_gemm \
  >"$BUILD_DIR/gpu-build.log" 2>&1 || {
  grep -E "error|FAILED" -A3 "$BUILD_DIR/gpu-build.log" | head -40; exit 1; }
bin=$BUILD_DIR/bin
work=$BUILD_DIR/gpu-check
rm -rf "$work"; mkdir -p "$work"
status=0

say "GPU unit tests: every CUDA kernel vs the CPU reference"
"$bin/CudaMathTests" --gtest_brief=1 || status=1
"$bin/CudaBackendTests" --gtest_brief=1 | tee "$work/unit.log" || status=1
if grep -q SKIPPED "$work/unit.log"; then
  echo "gpu-check: the GPU unit tests were skipped although a GPU is present" >&2
  status=1
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(--microbatches 8 --seq-len 32)
compile() { # schedule ranks out
  "$bin/pipeforge-compile" examples/gpt-tiny.json --schedule "$1" --ranks "$2" "${common[@]}" -o "$3"
}
losses() { grep -o '^step [0-9]* loss [0-9.e+-]*' "$1"; }
tokps() { grep '^step ' "$1" | awk 'NR > 1 { s += $6; n++ } END { if (n) printf "%.0f", s / n; else print "n/a" }'; }
# compare NAME REF RUN LOSS_TOL RTOL ATOL
compare() {
  local bad=0
  [ "$(losses "$3.log" | wc -l)" -eq "$STEPS" ] || { echo "$1: expected $STEPS step lines"; tail -5 "$3.log"; return 1; }
  paste -d' ' <(losses "$2.log") <(losses "$3.log") | awk -v tol="$4" -v name="$1" \
    '{ d = $4 - $8; if (d < 0) d = -d; if (d > tol) { print name ": loss differs at step " $2 ": " $4 " vs " $8; bad = 1 } } END { exit bad }' || bad=1
  "$bin/pipeforge-run" --compare-weights "$2.w" "$3.w" --rtol "$5" --atol "$6" >"$3.cmp" 2>&1 || bad=1
  [ $bad -eq 0 ] || { echo "$1: MISMATCH"; cat "$3.cmp"; }
  return $bad
}

say "references: CPU and single-GPU unpipelined ($STEPS steps)"
compile none 1 "$work/ref.pfp" || exit 1
"$bin/pipeforge-run" "$work/ref.pfp" --steps "$STEPS" --dump-weights "$work/cpu-ref.w" >"$work/cpu-ref.log" || exit 1
"$bin/pipeforge-run" "$work/ref.pfp" --steps "$STEPS" --backend cuda --dump-weights "$work/gpu-ref.w" >"$work/gpu-ref.log" || {
  tail -5 "$work/gpu-ref.log"; exit 1; }
# fp32 GEMMs on the GPU add in another order than OpenBLAS: the curves agree
# to 1e-4, the weights (after AdamW's normalised steps) to 1e-3.
compare "gpu vs cpu reference" "$work/cpu-ref" "$work/gpu-ref" 1e-4 1e-3 1e-4 || status=1
"$bin/pipeforge-run" "$work/ref.pfp" --steps "$STEPS" --backend cuda --precision bf16 \
  --dump-weights "$work/gpu-bf16.w" >"$work/gpu-bf16.log" || status=1
compare "bf16 vs fp32 (loss only, loose)" "$work/gpu-ref" "$work/gpu-bf16" 5e-2 1 1e-1 || status=1

printf '\n%-12s %-28s %12s %8s\n' schedule mode tokens/s result
row() { printf '%-12s %-28s %12s %8s\n' "$1" "$2" "$3" "$4"; }
row reference "1 GPU, unpipelined" "$(tokps "$work/gpu-ref.log")" -
for sched in gpipe 1f1b interleaved zb-h1 zb-h2 zbv dualpipe dualpipev auto; do
  ranks=4
  compile "$sched" $ranks "$work/$sched.pfp" >/dev/null || { row "$sched" compile - FAIL; status=1; continue; }
  run=$work/$sched-threads
  if "$bin/pipeforge-run" "$work/$sched.pfp" --local-ranks $ranks --backend cuda --steps "$STEPS" \
      --dump-weights "$run.w" >"$run.log" 2>&1 && compare "$sched" "$work/gpu-ref" "$run" 1e-5 1e-4 1e-5; then
    row "$sched" "$ranks ranks, 1 GPU, threads" "$(tokps "$run.log")" ok
  else
    row "$sched" "$ranks ranks, 1 GPU, threads" - FAIL; tail -3 "$run.log"; status=1
  fi
done
for sched in 1f1b dualpipev; do
  run=$work/$sched-mpi
  if mpirun --oversubscribe -np 4 "$bin/pipeforge-run" "$work/$sched.pfp" --backend cuda --device 0 \
      --steps "$STEPS" --dump-weights "$run.w" >"$run.log" 2>&1 && compare "$sched mpi" "$work/gpu-ref" "$run" 1e-5 1e-4 1e-5; then
    row "$sched" "4 MPI ranks, 1 GPU, staged" "$(tokps "$run.log")" ok
  else
    row "$sched" "4 MPI ranks, 1 GPU, staged" - FAIL; tail -3 "$run.log"; status=1
  fi
done
if [ "$ngpu" -ge 2 ]; then
  compile 1f1b 2 "$work/1f1b-2.pfp" >/dev/null
  run=$work/1f1b-nccl
  if mpirun --oversubscribe -np 2 "$bin/pipeforge-run" "$work/1f1b-2.pfp" --backend cuda --transport nccl \
      --steps "$STEPS" --dump-weights "$run.w" >"$run.log" 2>&1 && compare "1f1b nccl" "$work/gpu-ref" "$run" 1e-5 1e-4 1e-5; then
    row 1f1b "2 MPI ranks, 2 GPUs, NCCL" "$(tokps "$run.log")" ok
  else
    row 1f1b "2 MPI ranks, 2 GPUs, NCCL" - FAIL; tail -3 "$run.log"; status=1
  fi
else
  row "(nccl)" "needs 2 GPUs: not run" - skip
fi

say "GEMM throughput"
"$bin/cuda_gemm" || status=1

say "done: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
