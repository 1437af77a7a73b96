#!/usr/bin/env bash
# multihost.sh TOOLS SRCROOT OUTDIR: real multi-host MPI jobs on one machine
# (docs/multi-node.md). Two hosts are network namespaces joined by a veth
# pair (10.77.N.1 and .2); mpirun runs in the first, and Open MPI reaches
# the second through a plm_rsh_agent that enters its namespace with a host
# name of its own. Every case prints "OK <case>" or "FAIL <case>: why".
#   1. pp2 across the hosts: bitwise equal to the one-host run
#   2. pp2 x dp2, two ranks per host: bitwise equal to the one-host run
#   3. per-host checkpoint folders: saved, a rank killed, resumed bitwise
#   4. placement: a tensor-parallel group inside a host (--map-by slot)
#      draws no warning, one across hosts (--map-by node) does
#   5. the planner's launch commands for a 2-node cluster, followed, place
#      the ranks as its layout says (each rank's host from --print-placement)
#   6. a host's link taken down mid-run ends the job non-zero within
#      --comm-timeout + 30 s, naming the lost rank
# Needs root (network namespaces); the caller's lit feature `netns` checks.
set -uo pipefail
tools=$1 src=$2 out=$3
mkdir -p "$out"
out=$(cd "$out" && pwd)
id=$$
h1=pfh1-$id h2=pfh2-$id v1=pfa$((id % 100000)) v2=pfb$((id % 100000))
net=10.77.$((id % 250 + 1))
a1=$net.1 a2=$net.2
cleanup() { ip netns del "$h1" 2>/dev/null; ip netns del "$h2" 2>/dev/null; }
trap cleanup EXIT
fail() { echo "FAIL $1: $2"; }

ip netns add "$h1" && ip netns add "$h2" &&
  ip link add "$v1" type veth peer name "$v2" &&
  ip link set "$v1" netns "$h1" && ip link set "$v2" netns "$h2" &&
  ip netns exec "$h1" ip addr add "$a1/24" dev "$v1" &&
  ip netns exec "$h2" ip addr add "$a2/24" dev "$v2" &&
  ip netns exec "$h1" ip link set lo up && ip netns exec "$h2" ip link set lo up &&
  ip netns exec "$h1" ip link set "$v1" up &&
  ip netns exec "$h2" ip link set "$v2" up ||
  { echo "FAIL setup: cannot build the two hosts"; exit 1; }

# The launcher's "remote shell": run the command in the host's namespace.
cat > "$out/agent.sh" <<AGENT
#!/bin/sh
host=\$1; shift
case \$host in
  $a1) ns=$h1 name=host1 ;;
  $a2) ns=$h2 name=host2 ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec \$ns unshare --uts sh -c "hostname \$name; exec \$*"
AGENT
chmod +x "$out/agent.sh"
hosts() { printf "%s slots=%s\n%s slots=%s\n" "$a1" "$1" "$a2" "$1" > "$out/hosts"; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Fast detection of a lost daemon (TCP keepalive on the launcher's links).
mca=(--mca plm_rsh_agent "$out/agent.sh" --mca oob_tcp_if_include "$net.0/24"
  --mca btl tcp,self --mca btl_tcp_if_include "$net.0/24"
  --mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1
  --mca oob_tcp_keepalive_probes 3)
# mpirun -np N [mpirun options --] pipeforge-run args, from host 1.
mp() {
  local n=$1; shift
  local opts=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do opts+=("$1"); shift; done
  shift
  ip netns exec "$h1" unshare --uts sh -c 'hostname host1; exec "$@"' sh \
    mpirun --hostfile "$out/hosts" -np "$n" "${mca[@]}" "${opts[@]}" \
    -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
    -x PIPEFORGE_TEST_DIE_AT_STEP -x PIPEFORGE_TEST_DIE_RANK \
    "$tools/pipeforge-run" "$@"
}
same() { "$tools/pipeforge-run" --compare-weights "$1" "$2" --rtol 0 --atol 0 | grep -q "bitwise equal"; }
compile() { "$tools/pipeforge-compile" "$src/examples/gpt-tiny.json" --seq-len 16 "$@"; }
export PIPEFORGE_TEST_DIE_AT_STEP= PIPEFORGE_TEST_DIE_RANK=

# 1. Pipeline across the hosts.
hosts 1
compile --schedule 1f1b --ranks 2 --microbatches 4 -o "$out/pp.pfp"
"$tools/pipeforge-run" "$out/pp.pfp" --local-ranks 2 --steps 3 --quiet --dump-weights "$out/pp-one.w"
if mp 2 -- "$out/pp.pfp" --steps 3 --quiet --dump-weights "$out/pp-two.w" > "$out/pp.log" 2>&1 &&
  same "$out/pp-one.w" "$out/pp-two.w"; then echo "OK pipeline across hosts"
else fail "pipeline across hosts" "$(tail -3 "$out/pp.log")"; fi

# 2. pp2 x dp2, two ranks per host.
hosts 2
compile --schedule zb-h1 --ranks 2 --dp 2 --microbatches 4 -o "$out/dp.pfp"
"$tools/pipeforge-run" "$out/dp.pfp" --local-ranks 4 --steps 3 --quiet --dump-weights "$out/dp-one.w"
if mp 4 -- "$out/dp.pfp" --steps 3 --quiet --dump-weights "$out/dp-two.w" > "$out/dp.log" 2>&1 &&
  same "$out/dp-one.w" "$out/dp-two.w"; then echo "OK pipeline x data parallel across hosts"
else fail "pipeline x data parallel across hosts" "$(tail -3 "$out/dp.log")"; fi

# 3. Per-host checkpoint folders: save every step, rank 1 dies at step 3,
# resume to step 4: equal to the straight run.
hosts 1
rm -rf "$out"/ck-*
"$tools/pipeforge-run" "$out/pp.pfp" --local-ranks 2 --steps 4 --quiet --dump-weights "$out/ck-straight.w"
PIPEFORGE_TEST_DIE_AT_STEP=3 PIPEFORGE_TEST_DIE_RANK=1 \
  mp 2 -- "$out/pp.pfp" --steps 4 --quiet --checkpoint-dir "$out/ck-{rank}" --save-every 1 > "$out/ck1.log" 2>&1
if [ -f "$out/ck-0/step-00000002/manifest.txt" ] && [ -f "$out/ck-1/step-00000002/manifest.txt" ] &&
  [ ! -e "$out/ck-0/step-00000002/rank-00001.pfckpt" ] &&
  mp 2 -- "$out/pp.pfp" --steps 4 --checkpoint-dir "$out/ck-{rank}" --resume --dump-weights "$out/ck-resumed.w" > "$out/ck2.log" 2>&1 &&
  grep -q "resumed from .*step-00000002" "$out/ck2.log" &&
  same "$out/ck-straight.w" "$out/ck-resumed.w"; then echo "OK per-host checkpoints resume bitwise"
else fail "per-host checkpoints" "$(tail -3 "$out/ck1.log" "$out/ck2.log" 2>/dev/null)"; fi

# 4. Placement: a TP group of two consecutive ranks.
hosts 2
compile --schedule 1f1b --ranks 2 --tp 2 --microbatches 2 -o "$out/tp.pfp"
mp 4 --map-by slot -- "$out/tp.pfp" --steps 1 --quiet > "$out/slot.log" 2>&1
mp 4 --map-by node -- "$out/tp.pfp" --steps 1 --quiet > "$out/node.log" 2>&1
if ! grep -q "tensor-parallel group" "$out/slot.log" &&
  grep -q "tensor-parallel group of world ranks 0..1 spans hosts host1 and host2" "$out/node.log"; then
  echo "OK placement: tensor groups checked against the hosts"
else fail "placement" "$(cat "$out/slot.log" "$out/node.log" | tail -4)"; fi

# 5. The planner's recommendation for 2 nodes of 2 GPUs, launched as it
# says: pp-in-node keeps each pipeline on a host, dp-in-node puts the
# replicas of a pipeline rank on one host.
hosts 2
cat > "$out/cluster.json" <<CLUSTER
{"gpus": 4, "gpus_per_node": 2, "memory_gb": 80, "peak_tflops": 989,
 "intra_node_gb_per_s": 450, "inter_node_gb_per_s": 50}
CLUSTER
plan_case() {
  "$tools/pipeforge-plan" "$src/examples/gpt-tiny.json" --cluster "$out/cluster.json" \
    --global-batch 8 --seq-len 16 --pp 2 --tp 1 > "$out/plan.txt" 2>&1
  layout=$(sed -n 's/^recommended: .*, \(pp-in-node\|dp-in-node\): .*/\1/p' "$out/plan.txt")
  compile=$(sed -n 's/^  launch: pipeforge-compile //p' "$out/plan.txt")
  map=$(sed -n 's/^ *mpirun --hostfile HOSTS \(--map-by [a-z]*\) -np \([0-9]*\) pipeforge-run model.pfp\(.*\)$/\1/p' "$out/plan.txt")
  np=$(sed -n 's/^ *mpirun --hostfile HOSTS --map-by [a-z]* -np \([0-9]*\) .*/\1/p' "$out/plan.txt")
  extra=$(sed -n 's/^ *mpirun --hostfile HOSTS --map-by [a-z]* -np [0-9]* pipeforge-run model.pfp\(.*\)$/\1/p' "$out/plan.txt")
  if [ -z "$layout" ] || [ -z "$compile" ] || [ -z "$map" ]; then
    fail "planner launch" "no launch lines: $(tail -4 "$out/plan.txt")"; return
  fi
  # shellcheck disable=SC2086
  "$tools/pipeforge-compile" ${compile% -o model.pfp} -o "$out/plan.pfp" > "$out/plan-compile.log" 2>&1 ||
    { fail "planner launch" "pipeforge-compile $compile: $(tail -2 "$out/plan-compile.log")"; return; }
  # shellcheck disable=SC2086
  mp "$np" $map -- "$out/plan.pfp" --steps 1 --quiet --print-placement $extra > "$out/placed.log" 2>&1
  # Ranks that must share a host: same replica (pp-in-node) or same
  # pipeline rank (dp-in-node).
  if awk -v layout="$layout" '/^placement: rank/ {
        host = $4; key = (layout == "pp-in-node") ? $8 : $6
        if ((key in seen) && seen[key] != host) bad = 1
        seen[key] = host; n++ }
      END { exit (bad || n == 0) }' "$out/placed.log"; then
    echo "OK planner launch: $layout placed as planned"
  else fail "planner launch" "$layout: $(grep placement "$out/placed.log" | tr '\n' ';')"; fi
}
plan_case

# 6. Host 2's link goes down mid-run.
hosts 1
start=$(date +%s)
mp 2 -- "$out/pp.pfp" --steps 100000000 --quiet --comm-timeout 2 > "$out/down.log" 2>&1 &
job=$!
sleep 4
ip netns exec "$h2" ip link set "$v2" down
down=$(date +%s)
for _ in $(seq 1 70); do kill -0 $job 2>/dev/null || break; sleep 1; done
if kill -0 $job 2>/dev/null; then
  kill -9 $job 2>/dev/null
  fail "link down" "the job still runs 70 s after the link went down"
else
  wait $job; rc=$?
  took=$(( $(date +%s) - down ))
  if [ $rc -ne 0 ] && [ $took -le 35 ] &&
    grep -q "world rank 1 on host2" "$out/down.log"; then
    echo "OK link down: the job ended non-zero within 35 s, naming the lost rank"
  else fail "link down" "exit $rc after $took s: $(grep pipeforge-run "$out/down.log" | head -2)"; fi
fi
