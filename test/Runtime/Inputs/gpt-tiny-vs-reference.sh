#!/usr/bin/env bash
# Trains examples/gpt-tiny.json for 10 steps with one schedule on N MPI
# ranks and with the single-process unpipelined reference (same
# initialisation, same data), then compares the loss curves and the final
# weights.
#   gpt-tiny-vs-reference.sh TOOLS SRCROOT OUTDIR SCHEDULE RANKS bitwise|tolerance [mpi|threads]
# threads: the ranks run as threads of one process (--local-ranks). Extra
# pipeforge-run options for the pipelined run come from PF_RUN_ARGS (e.g.
# PF_RUN_ARGS="--backend cpu-device"), for the reference from PF_REF_ARGS
# (e.g. "--backend cuda": the single-GPU unpipelined run).
# bitwise: every loss line and every weight bit equal. tolerance: weights
# within rtol 1e-4 / atol 1e-5, losses within 1e-5 (DualPipe sums the two
# copies' gradients as two partial sums, so its order of additions differs);
# PF_LOSS_TOL, PF_RTOL and PF_ATOL override the three numbers. PF_MODEL
# names another config under examples/ (default gpt-tiny).
set -euo pipefail
tools=$1 src=$2 out=$3 sched=$4 ranks=$5 mode=$6 launch=${7:-mpi}
read -r -a extra <<< "${PF_RUN_ARGS:-}"
read -r -a refextra <<< "${PF_REF_ARGS:-}"
losstol=${PF_LOSS_TOL:-1e-5} rtol=${PF_RTOL:-1e-4} atol=${PF_ATOL:-1e-5}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
model=$src/examples/${PF_MODEL:-gpt-tiny}.json
common=(--microbatches 8 --seq-len 32)
ref=$out/ref$(echo "${PF_REF_ARGS:-}" | tr -c 'a-z0-9\n' '_')
if [ ! -f "$ref.w" ]; then
  "$tools/pipeforge-compile" "$model" --schedule none --ranks 1 "${common[@]}" -o "$ref.pfp"
  "$tools/pipeforge-run" "$ref.pfp" --steps 10 --dump-weights "$ref.w" "${refextra[@]}" > "$ref.log"
fi
run=$out/$sched-$ranks-$launch
"$tools/pipeforge-compile" "$model" --schedule "$sched" --ranks "$ranks" "${common[@]}" -o "$run.pfp"
if [ "$launch" = threads ]; then
  "$tools/pipeforge-run" "$run.pfp" --local-ranks "$ranks" --steps 10 --dump-weights "$run.w" "${extra[@]}" > "$run.log"
else
  mpirun --oversubscribe -np "$ranks" "$tools/pipeforge-run" "$run.pfp" --steps 10 --dump-weights "$run.w" "${extra[@]}" > "$run.log"
fi
grep -o '^step [0-9]* loss [0-9.e+-]*' "$ref.log" > "$ref.loss"
grep -o '^step [0-9]* loss [0-9.e+-]*' "$run.log" > "$run.loss"
[ "$(wc -l < "$run.loss")" -eq 10 ] || { echo "expected 10 step lines"; cat "$run.log"; exit 1; }
if [ "$mode" = bitwise ]; then
  diff "$ref.loss" "$run.loss"
  "$tools/pipeforge-run" --compare-weights "$ref.w" "$run.w" --rtol 0 --atol 0
else
  paste -d' ' "$ref.loss" "$run.loss" | awk -v tol="$losstol" '{ d = $4 - $8; if (d < 0) d = -d; if (d > tol) { print "loss differs at step " $2 ": " $4 " vs " $8; bad = 1 } } END { exit bad }'
  "$tools/pipeforge-run" --compare-weights "$ref.w" "$run.w" --rtol "$rtol" --atol "$atol"
fi
