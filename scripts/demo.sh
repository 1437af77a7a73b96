#!/usr/bin/env bash
# The main job: set up, build, compile the tiny GPT (examples/gpt-tiny.json)
# with DualPipeV, train it on CPU with mpirun for 40 steps (the loss falls),
# compare the measured bubble with the simulator's prediction from the
# measured op costs, and draw two pictures: the measured timeline of every
# rank above the simulated one (timeline.svg) and the loss curve (loss.svg).
# The rank count is what the machine holds without oversubscription (4, or 2
# on fewer than 4 cores), so the measured times are the schedule's, not the
# OS scheduler's.
#   STEPS (default 40)  BUILD_DIR (default build)  RANKS (default: see above)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
STEPS=${STEPS:-40}
cores=$(nproc)
RANKS=${RANKS:-$([ "$cores" -ge 4 ] && echo 4 || echo 2)}
MICROBATCHES=$((4 * RANKS))

bash scripts/setup.sh
mkdir -p "$BUILD_DIR"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  linker=(); command -v ld.lld >/dev/null 2>&1 && linker=(-DLLVM_USE_LINKER=lld)
  cmake -S . -B "$BUILD_DIR" -G Ninja "${linker[@]}" >"$BUILD_DIR/configure.log" 2>&1 || {
    tail -30 "$BUILD_DIR/configure.log"; exit 1; }
fi
echo "== building pipeforge-compile, pipeforge-run, pipeforge-sched"
ninja -C "$BUILD_DIR" pipeforge-compile pipeforge-run pipeforge-sched >"$BUILD_DIR/demo-build.log" 2>&1 || {
  grep -E "error|FAILED" -A3 "$BUILD_DIR/demo-build.log" | head -40; exit 1; }
bin=$BUILD_DIR/bin
work=$BUILD_DIR/demo
mkdir -p "$work"

echo "== compiling examples/gpt-tiny.json: DualPipeV, $RANKS ranks, $MICROBATCHES microbatches"
"$bin/pipeforge-compile" examples/gpt-tiny.json --schedule dualpipev --ranks $RANKS \
  --microbatches $MICROBATCHES --seq-len 32 -o "$work/gpt-tiny-dualpipev.pfp"

echo "== training: mpirun -np $RANKS pipeforge-run ($STEPS steps)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun --oversubscribe -np $RANKS "$bin/pipeforge-run" "$work/gpt-tiny-dualpipev.pfp" \
  --steps "$STEPS" --trace "$work/trace.json" | tee "$work/train.log"

first=$(grep -m1 '^step 1 ' "$work/train.log" | awk '{print $4}')
last=$(grep '^step ' "$work/train.log" | tail -1 | awk '{print $4}')
measured=$(grep '^step ' "$work/train.log" | awk 'NR > 1 { s += $NF; n++ } END { if (n) printf "%.4f", s / n; else print "n/a" }')
# The trace's op costs are per stage (a V stage's F is the F of half a
# rank's share); with --calibrated also what the runtime adds: per-stage
# costs, the message latency and its own time per compute action (and
# GRADREDUCE's exchange, for a schedule with two model copies).
costs="$(python3 scripts/trace_costs.py "$work/trace.json") --cost-unit stage"
calibrated_costs=$(python3 scripts/trace_costs.py --calibrated "$work/trace.json")
# shellcheck disable=SC2086
simulated=$("$bin/pipeforge-sched" --schedule dualpipev --ranks $RANKS --microbatches $MICROBATCHES $costs \
  | awk '/^makespan/ { print $4 }')
# shellcheck disable=SC2086
calibrated=$("$bin/pipeforge-sched" --schedule dualpipev --ranks $RANKS --microbatches $MICROBATCHES \
  $calibrated_costs | awk '/^makespan/ { print $4 }')
# shellcheck disable=SC2086
"$bin/pipeforge-sched" --schedule dualpipev --ranks $RANKS --microbatches $MICROBATCHES $calibrated_costs \
  --format svg -o "$work/simulated.svg"
laststep=$(python3 scripts/demo_pictures.py "$work/trace.json" "$work/train.log" "$work/simulated.svg" "$work")
echo
echo "loss: $first -> $last over $STEPS steps"
echo "measured (ms): $calibrated_costs"
echo "bubble: measured $measured (mean of steps 2..$STEPS; last step $laststep); simulated $calibrated with what the runtime adds (per-stage costs, --tcomm, --dispatch; --tgradreduce with two model copies), $simulated from the median op costs alone"
echo "pictures: $work/timeline.svg (every rank's last step, measured above simulated), $work/loss.svg"
echo "trace of all ranks: $work/trace.json (open in ui.perfetto.dev)"
if [ "$RANKS" -gt "$cores" ]; then
  echo "note: $RANKS MPI ranks share $cores cores here, so measured times include oversubscription."
fi
