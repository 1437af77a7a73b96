#!/usr/bin/env bash
# ZeRO-2 and ZeRO-3 (zero3.test): each schedule trained with --zero 2 and
# --zero 3 against the same program unsharded, bitwise, on 4 threads; and the parameter bytes a
# DualPipe rank holds between steps under ZeRO-3 over those it holds under
# ZeRO-2:
#
#   zero3-matrix.sh TOOLS EXAMPLES OUTDIR
set -uo pipefail
tools=$1 EXAMPLES=$2 d=$3
mkdir -p "$d"
pipeforge-compile() { "$tools/pipeforge-compile" "$@"; }
pipeforge-run() { "$tools/pipeforge-run" "$@"; }
run() { # name, compile flags...
  name=$1; shift
  pipeforge-compile "$EXAMPLES/gpt-tiny.json" --seq-len 16 --zero 3 "$@" -o "$d/m-$name.pfp"
  pipeforge-run "$d/m-$name.pfp" --local-ranks 4 --steps 2 --clip 0.5 --quiet --dump-weights "$d/m-$name.0.w"
  pipeforge-run "$d/m-$name.pfp" --local-ranks 4 --steps 2 --clip 0.5 --quiet --zero 2 --dump-weights "$d/m-$name.2.w"
  pipeforge-run "$d/m-$name.pfp" --local-ranks 4 --steps 2 --clip 0.5 --quiet --zero 3 --memory-report --dump-weights "$d/m-$name.3.w" > "$d/m-$name.log"
  local z
  for z in 2 3; do
    if ! pipeforge-run --compare-weights "$d/m-$name.0.w" "$d/m-$name.$z.w" --rtol 0 --atol 0 | grep -q "bitwise equal"; then
      echo "$name: zero $z DIFFERENT"
      return
    fi
  done
  echo "$name: bitwise equal"
}
run 1f1b --schedule 1f1b --ranks 2 --dp 2 --microbatches 4
run gpipe --schedule gpipe --ranks 2 --dp 2 --microbatches 4
run interleaved --schedule interleaved --ranks 2 --dp 2 --microbatches 4 --chunks 2
run zbv --schedule zbv --ranks 2 --dp 2 --microbatches 4
run dualpipev --schedule dualpipev --ranks 2 --dp 2 --microbatches 4
run v-half --schedule v-half --ranks 2 --dp 2 --microbatches 4
run auto --schedule auto --ranks 2 --dp 2 --microbatches 4
run dualpipe --schedule dualpipe --ranks 4 --microbatches 8
run dualpipe-dp2 --schedule dualpipe --ranks 2 --dp 2 --microbatches 4
run chimera --schedule chimera --ranks 4 --microbatches 8
# DualPipe, rank 0: ZeRO-3's parameter bytes between steps over ZeRO-2's.
pipeforge-run "$d/m-dualpipe.pfp" --local-ranks 4 --steps 1 --quiet --zero 2 --memory-report > "$d/m-dualpipe.z2.log"
h3=$(awk '/^rank 0: parameters/ { print $4 }' "$d/m-dualpipe.log")
h2=$(awk '/^rank 0: parameters/ { print $4 }' "$d/m-dualpipe.z2.log")
awk -v a="$h3" -v b="$h2" 'BEGIN { printf "dualpipe params held: %.3f of unsharded\n", a / b }'
