#!/usr/bin/env bash
# recompute.sh TOOLS SRCROOT OUTDIR MODEL SCHEDULE EXTRA_RANK_FACTOR [COMPILE OPTIONS...]
# Compiles MODEL for SCHEDULE on 2 pipeline ranks with and without
# --recompute=POLICY (env PF_RECOMPUTE: full, the default, or selective;
# env PF_RECOMPUTE_STAGES: only those stages, --recompute-stages),
# trains both 3 steps on --local-ranks (2 x the factor ranks) with the
# default AdamW and clipping, and compares the final weights bitwise.
set -euo pipefail
tools=$1 src=$2 out=$3 model=$4 sched=$5 factor=$6
shift 6
n=$((2 * factor))
name=$out/$model-$sched
common=(--schedule "$sched" --ranks 2 --microbatches 4 --seq-len 8 --microbatch-size 2 "$@")
"$tools/pipeforge-compile" "$src/examples/$model.json" "${common[@]}" -o "$name.pfp" 2>/dev/null
policy=${PF_RECOMPUTE:-full}
rc=$name-rc-$policy
only=${PF_RECOMPUTE_STAGES:+--recompute-stages=$PF_RECOMPUTE_STAGES}
[ -z "$only" ] || rc=$rc-stages-${PF_RECOMPUTE_STAGES//,/-}
"$tools/pipeforge-compile" "$src/examples/$model.json" "${common[@]}" --recompute="$policy" $only -o "$rc.pfp" 2>/dev/null
[ -f "$name.w" ] || "$tools/pipeforge-run" "$name.pfp" --local-ranks $n --steps 3 --clip 0.5 --quiet --dump-weights "$name.w"
"$tools/pipeforge-run" "$rc.pfp" --local-ranks $n --steps 3 --clip 0.5 --quiet --dump-weights "$rc.w"
echo "OK: $("$tools/pipeforge-run" --compare-weights "$name.w" "$rc.w" --rtol 0 --atol 0)"
