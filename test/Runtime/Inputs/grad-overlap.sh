#!/usr/bin/env bash
# The overlapped data-parallel gradient reduction (pipeforge-run
# --overlap-grad-reduce, on by default) against the reduction after the step
# (--overlap-grad-reduce off), bitwise: the same program, ranks and data.
#
#   grad-overlap.sh TOOLS SRCROOT OUTDIR MODEL SCHEDULE [COMPILE ARGS...]
#
# Runs (each 3 steps, AdamW with clipping, the default optimizer path):
#   off      mpirun, --overlap-grad-reduce off
#   kernel   mpirun, --grad-bucket-mb 0 (a bucket per kernel's gradients,
#            posted inside the stage's last W/BW)
#   default  mpirun, the defaults (25 MiB buckets)
#   threads  --local-ranks, --grad-bucket-mb 0
#   device   --local-ranks --backend cpu-device (device collectives on the
#            host-addressable device memory), --grad-bucket-mb 0
# PF_RUN_ARGS: options added to every run (e.g. "--zero 1"). Every run's
# losses and weights must equal `off`'s bit for bit. Prints
# "OK MODEL SCHEDULE: N runs bitwise equal" or the first difference.
set -euo pipefail
tools=$1 src=$2 out=$3 model=$4 sched=$5
shift 5
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
name=$out/$model-$sched${PF_TAG:+-$PF_TAG}
"$tools/pipeforge-compile" "$src/examples/$model.json" --schedule "$sched" \
  --microbatches 4 --seq-len 8 --microbatch-size 2 "$@" -o "$name.pfp"
read -r -a extra <<< "${PF_RUN_ARGS:-}"
opt=(--steps 3 --clip 0.5 "${extra[@]}")
fail() { echo "FAIL $model $sched: $*"; exit 1; }
losses() { grep -o '^step [0-9]* loss [0-9.e+-]*' "$1" || true; }
run() { # LABEL LAUNCH... -- ARGS...
  local label=$1; shift
  "$@" "${opt[@]}" --dump-weights "$name-$label.w" > "$name-$label.log" 2>&1 ||
    { cat "$name-$label.log"; fail "$label run"; }
}
mpi() { mpirun --oversubscribe -np "$np" "$tools/pipeforge-run" "$name.pfp" "$@"; }
np=${PF_NP:?PF_NP: the number of ranks}
run off mpi --overlap-grad-reduce off
run kernel mpi --grad-bucket-mb 0
run default mpi
run threads "$tools/pipeforge-run" "$name.pfp" --local-ranks "$np" --grad-bucket-mb 0
run device "$tools/pipeforge-run" "$name.pfp" --local-ranks "$np" \
  --backend cpu-device --grad-bucket-mb 0
[ "$(losses "$name-off.log" | wc -l)" -eq 3 ] || { cat "$name-off.log"; fail "no step lines"; }
for r in kernel default threads device; do
  diff <(losses "$name-off.log") <(losses "$name-$r.log") > /dev/null ||
    fail "$r losses differ from --overlap-grad-reduce off"
  "$tools/pipeforge-run" --compare-weights "$name-off.w" "$name-$r.w" \
    --rtol 0 --atol 0 > "$name-$r.cmp" || { cat "$name-$r.cmp"; fail "$r weights"; }
done
echo "OK $model $sched${PF_TAG:+ $PF_TAG}: 4 runs bitwise equal"
