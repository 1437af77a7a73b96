#!/usr/bin/env bash
# The training path users run, on one parallel mode and one schedule:
# examples/moe-tiny.json with the default optimizer (AdamW) and gradient
# clipping, against the single-process reference with the same optimizer
# over all D x E x M microbatches (docs/runtime.md, "What is tested").
#
#   train-matrix.sh TOOLS SRCROOT OUTDIR MODE SCHEDULE
#     MODE: pp (2 pipeline ranks), pp-dp (x 2 data-parallel replicas),
#           pp-ep (x 2 expert-parallel ranks), pp-ep-dp (2 x 2 x 2 = 8 ranks)
#
# Runs, each compared with the reference's loss lines and final weights
# (expert tensors gathered over the EP group):
#   sync     mpirun, the default optimizer sync, STEPS steps
#   pv+ck    mpirun, --optimizer-sync post-validation, a checkpoint after
#            step STEPS/2, then --resume to STEPS
#   threads  --local-ranks: bitwise equal to `sync`
#   device   --local-ranks --backend cpu-device, post-validation with the
#            same checkpoint and resume: bitwise equal to `pv+ck`
# --dump-weights also checks that every data- and expert-parallel replica of
# a parameter holds the same bits.
#
# PF_RUN_ARGS: options added to every pipelined run (not the reference),
# e.g. "--zero 1". PF_COMPILE_ARGS: options added to the pipelined compile
# (e.g. "--fuse-overlap"). PF_MODEL: the config under examples/ (default
# moe-tiny.json).
#
# Tolerances (PF_LOSS_TOL, PF_RTOL, PF_ATOL override): the pipelined run
# adds the same numbers in another order where microbatches are summed
# across ranks (dp, ep, DualPipe's and Chimera's two copies), and AdamW divides by
# sqrt(v): where a gradient element is at rounding level the update's
# rounding is up to ~lr per step. Losses within 2e-5, weights within
# rtol 1e-3 / atol 5e-5 (lr 1e-3, STEPS 4; measured: at most 9e-6). Pure
# pipeline parallelism with one model copy sums in the reference's order:
# its sync run is bitwise. Post-validation rolls a clipped optimistic step
# back (exact up to rounding) and redoes it: always within the tolerances.
set -euo pipefail
tools=$1 src=$2 out=$3 mode=$4 sched=$5
case $mode in
  pp) D=1 E=1 ;;
  pp-dp) D=2 E=1 ;;
  pp-ep) D=1 E=2 ;;
  pp-ep-dp) D=2 E=2 ;;
  *) echo "train-matrix.sh: unknown mode '$mode'" >&2; exit 2 ;;
esac
pvlosstol=${PF_LOSS_TOL:-2e-5} pvrtol=${PF_RTOL:-1e-3} pvatol=${PF_ATOL:-5e-5}
if [ $D -eq 1 ] && [ $E -eq 1 ] && [ "$sched" != dualpipe ] && [ "$sched" != chimera ]; then
  losstol=0 rtol=0 atol=0
else
  losstol=$pvlosstol rtol=$pvrtol atol=$pvatol
fi
steps=4 half=2 clip=0.5
P=2 M=4
n=$((P * D * E))
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(--seq-len 8 --microbatch-size 2)
refopt=(--steps $steps --clip $clip)
read -r -a extra <<< "${PF_RUN_ARGS:-}"
read -r -a cextra <<< "${PF_COMPILE_ARGS:-}"
model=$src/examples/${PF_MODEL:-moe-tiny.json}
tag=${PF_MODEL:+${PF_MODEL%.json}-}
opt=("${refopt[@]}" "${extra[@]}")

fail() { echo "FAIL $mode $sched: $*"; exit 1; }
losses() { grep -o '^step [0-9]* loss [0-9.e+-]*' "$1" || true; }
# compare_losses REF RUN: every step line of RUN against REF's line of the
# same step.
compare_losses() {
  losses "$1" > "$1.loss"
  losses "$2" > "$2.loss"
  [ -s "$2.loss" ] || { cat "$2.log" 2>/dev/null; fail "no step lines in $2"; }
  awk -v tol="$losstol" 'NR == FNR { ref[$2] = $4; next }
    !($2 in ref) { print "step " $2 " missing in the reference"; bad = 1; next }
    { d = ref[$2] - $4; if (d < 0) d = -d
      if (d > tol) { print "loss differs at step " $2 ": " ref[$2] " vs " $4; bad = 1 } }
    END { exit bad }' "$1.loss" "$2.loss" || fail "losses of $2"
}
compare_weights() { # A B RTOL ATOL WHAT
  "$tools/pipeforge-run" --compare-weights "$1" "$2" --rtol "$3" --atol "$4" > "$2.cmp" ||
    { cat "$2.cmp"; fail "$5"; }
}

# The single-process reference over every microbatch of a step.
ref=$out/${tag}ref-$((D * E * M))
if [ ! -f "$ref.w" ]; then
  "$tools/pipeforge-compile" "$model" --schedule none --ranks 1 \
    --microbatches $((D * E * M)) "${common[@]}" -o "$ref.pfp"
  "$tools/pipeforge-run" "$ref.pfp" "${refopt[@]}" --dump-weights "$ref.w" > "$ref.log"
fi

run=$out/$tag$mode-$sched
"$tools/pipeforge-compile" "$model" --schedule "$sched" --ranks $P \
  --dp $D --ep $E --microbatches $M "${common[@]}" "${cextra[@]}" -o "$run.pfp"

# sync: the default path.
mpirun --oversubscribe -np $n "$tools/pipeforge-run" "$run.pfp" "${opt[@]}" \
  --dump-weights "$run-sync.w" > "$run-sync.log" 2>&1 || { cat "$run-sync.log"; fail "sync run"; }
[ "$(losses "$run-sync.log" | wc -l)" -eq $steps ] || { cat "$run-sync.log"; fail "sync: expected $steps step lines"; }
compare_losses "$ref.log" "$run-sync.log"
compare_weights "$ref.w" "$run-sync.w" "$rtol" "$atol" "sync weights vs reference"

# pv+ck: post-validation, checkpoint at half, resume.
pv=(--optimizer-sync post-validation)
rm -rf "$run-ck"
mpirun --oversubscribe -np $n "$tools/pipeforge-run" "$run.pfp" "${opt[@]}" "${pv[@]}" --steps $half \
  --checkpoint-dir "$run-ck" --save-every $half > "$run-pv1.log" 2>&1 || { cat "$run-pv1.log"; fail "pv run"; }
mpirun --oversubscribe -np $n "$tools/pipeforge-run" "$run.pfp" "${opt[@]}" "${pv[@]}" \
  --checkpoint-dir "$run-ck" --resume --dump-weights "$run-pv.w" > "$run-pv2.log" 2>&1 ||
  { cat "$run-pv2.log"; fail "resumed pv run"; }
grep -q "resumed from .*step-0000000$half" "$run-pv2.log" || { cat "$run-pv2.log"; fail "no resume line"; }
cat "$run-pv1.log" "$run-pv2.log" > "$run-pv.log"
[ "$(losses "$run-pv.log" | wc -l)" -eq $steps ] || { cat "$run-pv.log"; fail "pv: expected $steps step lines"; }
losstol=$pvlosstol compare_losses "$ref.log" "$run-pv.log"
compare_weights "$ref.w" "$run-pv.w" "$pvrtol" "$pvatol" "post-validation + resume weights vs reference"

# threads: the same ranks as threads of one process, bitwise.
"$tools/pipeforge-run" "$run.pfp" --local-ranks $n "${opt[@]}" --dump-weights "$run-threads.w" \
  > "$run-threads.log" 2>&1 || { cat "$run-threads.log"; fail "--local-ranks run"; }
diff <(losses "$run-sync.log") <(losses "$run-threads.log") || fail "--local-ranks losses differ from mpirun"
compare_weights "$run-sync.w" "$run-threads.w" 0 0 "--local-ranks weights differ from mpirun"

# device: cpu-device backend in threads, post-validation, checkpoint, resume.
rm -rf "$run-dck"
dev=(--local-ranks $n --backend cpu-device)
"$tools/pipeforge-run" "$run.pfp" "${dev[@]}" "${opt[@]}" "${pv[@]}" --steps $half \
  --checkpoint-dir "$run-dck" --save-every $half > "$run-dev1.log" 2>&1 || { cat "$run-dev1.log"; fail "cpu-device run"; }
"$tools/pipeforge-run" "$run.pfp" "${dev[@]}" "${opt[@]}" "${pv[@]}" --checkpoint-dir "$run-dck" \
  --resume --dump-weights "$run-dev.w" > "$run-dev2.log" 2>&1 || { cat "$run-dev2.log"; fail "resumed cpu-device run"; }
cat "$run-dev1.log" "$run-dev2.log" > "$run-dev.log"
diff <(losses "$run-pv.log") <(losses "$run-dev.log") || fail "cpu-device losses differ from mpirun cpu"
compare_weights "$run-pv.w" "$run-dev.w" 0 0 "cpu-device weights differ from mpirun cpu"

echo "OK $mode $sched: $(cat "$run-sync.w.cmp" 2>/dev/null || true)"
