#!/usr/bin/env bash
# Activation offload (--offload-activations all) against the same run
# without it, bitwise, over the kinds of schedule (offload.test):
#
#   offload-matrix.sh TOOLS EXAMPLES OUTDIR
#
# Prints "NAME: bitwise equal[, offloaded]" per case (offloaded: the
# memory report shows rank 0 sending stashes to host memory), or the first
# difference.
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
for s in zb-h1 interleaved zbv dualpipe dualpipev v-half; do
  p=$out/m-$s
  "$tools/pipeforge-compile" "$ex/gpt-tiny.json" --schedule "$s" --ranks 4 \
    --microbatches 8 --seq-len 16 -o "$p.pfp" || { echo "$s: compile failed"; continue; }
  common=(--local-ranks 4 --backend cpu-device --steps 2 --clip 0.5)
  run "$p.pfp" "${common[@]}" --quiet --dump-weights "$p-off.w" || echo "$s: run failed"
  run "$p.pfp" "${common[@]}" --memory-report --offload-activations all \
    --dump-weights "$p-all.w" > "$p.log" || echo "$s: offload run failed"
  same "$s" "$p-off.w" "$p-all.w" "$p.log"
done
p=$out/m-moe
"$tools/pipeforge-compile" "$ex/moe-tiny.json" --schedule dualpipe --ranks 2 \
  --ep 2 --microbatches 4 --seq-len 8 -o "$p.pfp"
run "$p.pfp" --local-ranks 4 --backend cpu-device --steps 2 --quiet --dump-weights "$p-off.w"
run "$p.pfp" --local-ranks 4 --backend cpu-device --steps 2 --quiet \
  --offload-activations all --dump-weights "$p-all.w" > "$p.log"
same "moe dualpipe ep2" "$p-off.w" "$p-all.w" /dev/null
p=$out/m-rc
"$tools/pipeforge-compile" "$ex/gpt-tiny.json" --schedule 1f1b --ranks 2 --dp 2 \
  --recompute --microbatches 8 --seq-len 16 -o "$p.pfp"
run "$p.pfp" --local-ranks 4 --backend cpu-device --steps 2 --quiet --dump-weights "$p-off.w"
mpirun --oversubscribe -np 4 "$tools/pipeforge-run" "$p.pfp" --backend cpu-device \
  --steps 2 --quiet --offload-activations all --zero 2 --dump-weights "$p-all.w"
same "1f1b dp2 recompute zero2 mpirun" "$p-off.w" "$p-all.w" /dev/null
