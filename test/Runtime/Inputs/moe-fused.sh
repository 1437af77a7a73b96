#!/usr/bin/env bash
# Fused overlap (docs/runtime.md, "Fused overlap"): trains examples/moe-tiny.json
# with SCHEDULE on RANKS pipeline ranks x EP expert ranks, with components
# in the program (pipeforge-rt-testprog --add-components, until
# pipeforge-compile --fuse-overlap writes them) so that each Overlap
# action runs its F and B interleaved with the all-to-alls in flight.
# Checks: fused == --no-fuse bitwise (weights and losses); fused without the
# MPI progress thread (PIPEFORGE_MPI_PROGRESS_THREAD=0: the executor polls
# between kernels) bitwise too; the single-process reference over EP*M
# microbatches within tolerance; prints the component order of the first
# fused pair on world rank 0 (from the trace).
# With an 8th argument `compile` the components come from
# pipeforge-compile --fuse-overlap instead.
#   moe-fused.sh TOOLS SRCROOT OUTDIR SCHEDULE RANKS EP M [compile]
set -euo pipefail
tools=$1 src=$2 out=$3 sched=$4 ranks=$5 ep=$6 m=$7 how=${8:-testprog}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(--seq-len 8 --microbatch-size 2)
steps=3
run=(--steps $steps --optimizer sgd --lr 0.1)
ref=$out/ref-$((ep * m))
if [ ! -f "$ref.w" ]; then
  "$tools/pipeforge-compile" "$src/examples/moe-tiny.json" --schedule none --ranks 1 --microbatches $((ep * m)) "${common[@]}" -o "$ref.pfp"
  "$tools/pipeforge-run" "$ref.pfp" "${run[@]}" --dump-weights "$ref.w" > "$ref.log"
fi
base=$out/$sched-$ranks-ep$ep-$how
if [ "$how" = compile ]; then
  "$tools/pipeforge-compile" "$src/examples/moe-tiny.json" --schedule "$sched" --ranks "$ranks" --ep "$ep" --microbatches "$m" "${common[@]}" --fuse-overlap --emit-mlir -o "$base-c.pfp" > "$base-c.mlir"
else
  "$tools/pipeforge-compile" "$src/examples/moe-tiny.json" --schedule "$sched" --ranks "$ranks" --ep "$ep" --microbatches "$m" "${common[@]}" -o "$base.pfp"
  "$tools/pipeforge-rt-testprog" --add-components "$base.pfp" -o "$base-c.pfp"
fi
np=$((ranks * ep))
mpirun --oversubscribe -np $np "$tools/pipeforge-run" "$base-c.pfp" "${run[@]}" --dump-weights "$base.fused.w" --trace "$base.fused.json" > "$base.fused.log"
mpirun --oversubscribe -np $np "$tools/pipeforge-run" "$base-c.pfp" "${run[@]}" --dump-weights "$base.nofuse.w" --no-fuse > "$base.nofuse.log"
PIPEFORGE_MPI_PROGRESS_THREAD=0 mpirun --oversubscribe -x PIPEFORGE_MPI_PROGRESS_THREAD -np $np "$tools/pipeforge-run" "$base-c.pfp" "${run[@]}" --dump-weights "$base.poll.w" > "$base.poll.log"
loss() { grep -o '^step [0-9]* loss [0-9.e+-]*' "$1"; }
[ "$(loss "$base.fused.log" | wc -l)" -eq $steps ] || { echo "expected $steps step lines"; cat "$base.fused.log"; exit 1; }
[ "$(loss "$base.fused.log")" = "$(loss "$base.nofuse.log")" ] || { echo "fused and unfused losses differ"; exit 1; }
echo "fused vs unfused:"
"$tools/pipeforge-run" --compare-weights "$base.nofuse.w" "$base.fused.w" --rtol 0 --atol 0
echo "polling vs progress thread:"
"$tools/pipeforge-run" --compare-weights "$base.fused.w" "$base.poll.w" --rtol 0 --atol 0
echo "fused vs reference:"
paste -d' ' <(loss "$ref.log") <(loss "$base.fused.log") | awk '{ d = $4 - $8; if (d < 0) d = -d; if (d > 1e-5) { print "loss differs at step " $2 ": " $4 " vs " $8; bad = 1 } } END { exit bad }'
"$tools/pipeforge-run" --compare-weights "$ref.w" "$base.fused.w" --rtol 1e-4 --atol 1e-5
python3 - "$base.fused.json" "$how" "$base-c.mlir" <<'PY'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X" and e["pid"] == 0]
pairs = sorted((e for e in ev if e["tid"] == 0 and e.get("args", {}).get("fused")), key=lambda e: e["ts"])
print("fused pairs on rank 0:", len(pairs))
a = pairs[0]
inside = lambda e: a["ts"] <= e["ts"] <= a["ts"] + a["dur"]
print("pair", a["name"])
for e in sorted((e for e in ev if e is not a and inside(e) and e["tid"] in (0, 1)), key=lambda e: e["ts"]):
    if e["tid"] == 0 and e.get("cat") == "component":
        print("  compute", e["name"])
    elif e["tid"] == 1 and e.get("args", {}).get("a2a"):
        print("  post   ", e["name"])
if sys.argv[2] == "compile":
    # The runtime follows the compiled order (Action::pairOrder): the first
    # appearance of each component of the pair in the trace is in the order
    # of the pair's pp.component ops in the IR (W steps: inside B).
    import re
    seen = []
    for e in sorted((e for e in ev if e is not a and inside(e) and e["tid"] == 0 and e.get("cat") == "component"), key=lambda e: e["ts"]):
        if e["name"] not in seen:
            seen.append(e["name"])
    def lbl(kind, st, mb, copy):
        return kind + st + "." + mb + ("@" + copy if copy and copy != "0" else "")
    fm, bm = a["name"].split("+")
    ir, rank, cur, members = [], None, None, []
    for line in open(sys.argv[3]):
        m = re.match(r"\s*pp\.rank_program (\d+)", line)
        if m:
            rank = int(m.group(1))
        if rank != 0:
            continue
        if re.match(r"\s*pp\.overlap", line):
            cur, members = [], []
            continue
        if cur is None:
            continue
        m = re.match(r"\s*pp\.compute (\w+) stage (\d+) mb (\d+)(?: copy (\d+))?", line)
        if m:
            members.append(lbl(*m.groups()))
            continue
        m = re.match(r"\s*pp\.component (\w) (\w+) layer (\d+)", line)
        if m:
            cur.append(m.groups())
            continue
        if re.match(r"\s*}", line):
            if sorted(members) == sorted([fm, bm]):
                ir = cur
                break
            cur = None
    want = [(fm if k == "F" else bm) + " " + c + " L" + l for k, c, l in ir if k != "W"]
    print("IR order of the pair:", len(want), "components")
    print("trace order matches IR" if seen == want else "MISMATCH: trace %s vs IR %s" % (seen, want))
PY
