#!/usr/bin/env bash
# Expert parallelism (docs/runtime.md): trains examples/moe-tiny.json (4
# layers, 4 experts, top-2, no capacity limit) with SCHEDULE on RANKS
# pipeline ranks x EP expert-parallel ranks (mpirun -np RANKS*EP, each EP
# rank on its own M microbatches) and compares the loss curve and the final
# weights (expert tensors gathered over the EP group) with the single-process
# reference over EP*M microbatches: losses within 1e-5, weights rtol 1e-4 /
# atol 1e-5.
#   moe-ep-vs-reference.sh TOOLS SRCROOT OUTDIR SCHEDULE RANKS EP M
# Extra pipeforge-run options for the EP run come from PF_RUN_ARGS (e.g.
# "--backend cpu-device": the moe kernels staged through host memory).
# The optimizer options of both runs come from PF_OPT_ARGS (default
# "--optimizer sgd --lr 0.1"; "" is the default AdamW), the step count from
# PF_STEPS (default 3), the tolerances from PF_LOSS_TOL, PF_RTOL, PF_ATOL;
# PF_MODEL names another config under examples/ (default moe-tiny).
set -euo pipefail
tools=$1 src=$2 out=$3 sched=$4 ranks=$5 ep=$6 m=$7
read -r -a extra <<< "${PF_RUN_ARGS:-}"
read -r -a opt <<< "${PF_OPT_ARGS---optimizer sgd --lr 0.1}"
steps=${PF_STEPS:-3}
losstol=${PF_LOSS_TOL:-1e-5} rtol=${PF_RTOL:-1e-4} atol=${PF_ATOL:-1e-5}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
model=$src/examples/${PF_MODEL:-moe-tiny}.json
common=(--seq-len 8 --microbatch-size 2)
ref=$out/ref-$((ep * m))-$steps$(echo "${opt[*]:-adamw}" | tr -c 'a-z0-9\n' '_')
if [ ! -f "$ref.w" ]; then
  "$tools/pipeforge-compile" "$model" --schedule none --ranks 1 --microbatches $((ep * m)) "${common[@]}" -o "$ref.pfp"
  "$tools/pipeforge-run" "$ref.pfp" --steps $steps "${opt[@]}" --dump-weights "$ref.w" > "$ref.log"
fi
run=$out/$sched-$ranks-ep$ep
"$tools/pipeforge-compile" "$model" --schedule "$sched" --ranks "$ranks" --ep "$ep" --microbatches "$m" "${common[@]}" -o "$run.pfp"
mpirun --oversubscribe -np $((ranks * ep)) "$tools/pipeforge-run" "$run.pfp" --steps $steps "${opt[@]}" --dump-weights "$run.w" "${extra[@]}" > "$run.log"
grep -o '^step [0-9]* loss [0-9.e+-]*' "$ref.log" > "$ref.loss"
grep -o '^step [0-9]* loss [0-9.e+-]*' "$run.log" > "$run.loss"
[ "$(wc -l < "$run.loss")" -eq $steps ] || { echo "expected $steps step lines"; cat "$run.log"; exit 1; }
paste -d' ' "$ref.loss" "$run.loss" | awk -v tol="$losstol" '{ d = $4 - $8; if (d < 0) d = -d; if (d > tol) { print "loss differs at step " $2 ": " $4 " vs " $8; bad = 1 } } END { exit bad }'
"$tools/pipeforge-run" --compare-weights "$ref.w" "$run.w" --rtol "$rtol" --atol "$atol"
