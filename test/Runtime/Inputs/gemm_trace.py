"""The GEMM fields of pipeforge-run's trace (docs/runtime.md, "Trace"):
every step event on a CPU rank carries gemm_us (the step's time in GEMMs
on that rank) and gemm_gflop (their FLOPs). Prints, per trace, the step
count and each step's GFLOP summed over the ranks (the same on every
step, since every step runs the same products); fails when a field is
missing or a time is not within (0, the step's duration]."""
import json
import sys


def main(path):
    with open(path) as f:
        ev = json.load(f)["traceEvents"]
    steps = {}
    for e in ev:
        if e.get("ph") != "X" or not e.get("name", "").startswith("step "):
            continue
        a = e.get("args") or {}
        if "gemm_us" not in a or "gemm_gflop" not in a:
            sys.exit(f"{path}: {e['name']} on pid {e['pid']}: no gemm_us/gemm_gflop")
        if not 0 < a["gemm_us"] <= e["dur"]:
            sys.exit(f"{path}: {e['name']}: gemm_us {a['gemm_us']} not in (0, {e['dur']}]")
        if a["gemm_gflop"] <= 0:
            sys.exit(f"{path}: {e['name']}: gemm_gflop {a['gemm_gflop']}")
        steps.setdefault(e["name"], []).append(a["gemm_gflop"])
    per_step = {round(sum(v), 6) for v in steps.values()}
    if len(per_step) != 1:
        sys.exit(f"{path}: the steps' GEMM FLOPs differ: {sorted(per_step)}")
    print(f"steps {len(steps)} ranks {len(next(iter(steps.values())))} "
          f"gemm_gflop_per_step {per_step.pop():.6f}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: gemm_trace.py TRACE.json")
    main(sys.argv[1])
