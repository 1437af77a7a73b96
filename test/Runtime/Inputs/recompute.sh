#!/usr/bin/env bash
# recompute.sh TOOLS SRCROOT OUTDIR MODEL SCHEDULE EXTRA_RANK_FACTOR [COMPILE OPTIONS...]
# Compiles MODEL for SCHEDULE on 2 pipeline ranks with and without
# --recompute, trains both 3 steps on --local-ranks (2 x the factor ranks)
# with the default AdamW and clipping, and compares the final weights
# bitwise.
set -euo pipefail
tools=$1 src=$2 out=$3 model=$4 sched=$5 factor=$6
shift 6
n=$((2 * factor))
name=$out/$model-$sched
common=(--schedule "$sched" --ranks 2 --microbatches 4 --seq-len 8 --microbatch-size 2 "$@")
"$tools/pipeforge-compile" "$src/examples/$model.json" "${common[@]}" -o "$name.pfp" 2>/dev/null
"$tools/pipeforge-compile" "$src/examples/$model.json" "${common[@]}" --recompute -o "$name-rc.pfp" 2>/dev/null
"$tools/pipeforge-run" "$name.pfp" --local-ranks $n --steps 3 --clip 0.5 --quiet --dump-weights "$name.w"
"$tools/pipeforge-run" "$name-rc.pfp" --local-ranks $n --steps 3 --clip 0.5 --quiet --dump-weights "$name-rc.w"
echo "OK: $("$tools/pipeforge-run" --compare-weights "$name.w" "$name-rc.w" --rtol 0 --atol 0)"
