#!/usr/bin/env bash
# Activation offload (--offload-activations all) against the same run
# without it, bitwise, over the kinds of schedule (offload.test):
#
#   offload-matrix.sh TOOLS EXAMPLES OUTDIR
#
# Prints "NAME: bitwise equal[, offloaded]" per case (offloaded: the
# memory report shows rank 0 sending stashes to host memory), or the first
# difference. Each case runs twice with offload: the plan pipeforge-run
# derives (--offload-activations all) and the program compiled with it
# (pipeforge-compile --offload-activations all: OFFLOAD/RELOAD in the
# schedule); "NAME compiled: bitwise equal, offloaded" and "NAME compiled:
# same peaks" say the second is bitwise the run without offload and its
# memory report's device peaks and stashes offloaded are the first's.
set -uo pipefail
tools=$1 ex=$2 out=$3
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run() { "$tools/pipeforge-run" "$@"; }
same() { # NAME A.w B.w LOG
  if run --compare-weights "$2" "$3" --rtol 0 --atol 0 | grep -q 'bitwise equal'; then
    if grep -q '^rank 0: activation offload:' "$4"; then
      echo "$1: bitwise equal, offloaded"
    else
      echo "$1: bitwise equal"
    fi
  else
    echo "$1: DIFFERENT"
  fi
}
# The device peaks and the stashes offloaded per step (the host peak depends
# on when the helper thread finished a copy back).
peaks() { grep -E 'peak stash|activation offload' "$1" | sed 's/, host peak.*//'; }
samepeaks() { # NAME DERIVED.log COMPILED.log
  if diff <(peaks "$2") <(peaks "$3") > /dev/null; then
    echo "$1: same peaks"
  else
    echo "$1: PEAKS DIFFER"
  fi
}
# compiled NAME OFF.w COMPILE-ARGS... -- RUN-ARGS...: the program compiled with
# --offload-activations all, run without the flag, against OFF.w.
compiled() {
  local name=$1 off=$2; shift 2
  local cargs=() p=$out/c-${name// /-}
  while [ "$1" != "--" ]; do cargs+=("$1"); shift; done; shift
  "$tools/pipeforge-compile" "${cargs[@]}" --offload-activations all \
    -o "$p.pfp" || { echo "$name compiled: compile failed"; return; }
  "$@" "$p.pfp" --dump-weights "$p.w" > "$p.log" || echo "$name compiled: run failed"
  same "$name compiled" "$off" "$p.w" "$p.log"
}
for s in zb-h1 interleaved zbv dualpipe dualpipev v-half; do
  p=$out/m-$s
  "$tools/pipeforge-compile" "$ex/gpt-tiny.json" --schedule "$s" --ranks 4 \
    --microbatches 8 --seq-len 16 -o "$p.pfp" || { echo "$s: compile failed"; continue; }
  common=(--local-ranks 4 --backend cpu-device --steps 2 --clip 0.5)
  run "$p.pfp" "${common[@]}" --quiet --dump-weights "$p-off.w" || echo "$s: run failed"
  run "$p.pfp" "${common[@]}" --memory-report --offload-activations all \
    --dump-weights "$p-all.w" > "$p.log" || echo "$s: offload run failed"
  same "$s" "$p-off.w" "$p-all.w" "$p.log"
  compiled "$s" "$p-off.w" "$ex/gpt-tiny.json" --schedule "$s" --ranks 4 \
    --microbatches 8 --seq-len 16 -- run "${common[@]}" --memory-report
  samepeaks "$s compiled" "$p.log" "$out/c-$s.log"
done
p=$out/m-moe
"$tools/pipeforge-compile" "$ex/moe-tiny.json" --schedule dualpipe --ranks 2 \
  --ep 2 --microbatches 4 --seq-len 8 -o "$p.pfp"
run "$p.pfp" --local-ranks 4 --backend cpu-device --steps 2 --quiet --dump-weights "$p-off.w"
run "$p.pfp" --local-ranks 4 --backend cpu-device --steps 2 --quiet \
  --offload-activations all --dump-weights "$p-all.w" > "$p.log"
same "moe dualpipe ep2" "$p-off.w" "$p-all.w" /dev/null
compiled "moe dualpipe ep2" "$p-off.w" "$ex/moe-tiny.json" --schedule dualpipe \
  --ranks 2 --ep 2 --microbatches 4 --seq-len 8 -- \
  run --local-ranks 4 --backend cpu-device --steps 2 --quiet
p=$out/m-rc
"$tools/pipeforge-compile" "$ex/gpt-tiny.json" --schedule 1f1b --ranks 2 --dp 2 \
  --recompute --microbatches 8 --seq-len 16 -o "$p.pfp"
run "$p.pfp" --local-ranks 4 --backend cpu-device --steps 2 --quiet --dump-weights "$p-off.w"
mpirun --oversubscribe -np 4 "$tools/pipeforge-run" "$p.pfp" --backend cpu-device \
  --steps 2 --quiet --offload-activations all --zero 2 --dump-weights "$p-all.w"
same "1f1b dp2 recompute zero2 mpirun" "$p-off.w" "$p-all.w" /dev/null
compiled "1f1b dp2 recompute zero2 mpirun" "$p-off.w" "$ex/gpt-tiny.json" \
  --schedule 1f1b --ranks 2 --dp 2 --recompute --microbatches 8 --seq-len 16 -- \
  mpirun --oversubscribe -np 4 "$tools/pipeforge-run" --backend cpu-device \
  --steps 2 --quiet --zero 2
