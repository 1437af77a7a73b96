"""The kernel-time fields of pipeforge-run's trace (docs/runtime.md,
"Measured vs simulated"): every step event on a CPU rank carries gemm_us
(the step's time in GEMMs on that rank), gemm_gflop (their FLOPs) and
ops_us (its kernels' time per op kind). Prints, per trace, the step count
and each step's GFLOP summed over the ranks (the same on every step, since
every step runs the same products), and the op kinds timed; fails when a
field is missing or the times do not nest: 0 < gemm_us <= the sum of
ops_us <= the step's duration (the GEMMs run inside the kernels)."""
import json
import sys


def main(path):
    with open(path) as f:
        ev = json.load(f)["traceEvents"]
    steps, kinds = {}, set()
    for e in ev:
        if e.get("ph") != "X" or not e.get("name", "").startswith("step "):
            continue
        a = e.get("args") or {}
        if "gemm_us" not in a or "gemm_gflop" not in a:
            sys.exit(f"{path}: {e['name']} on pid {e['pid']}: no gemm_us/gemm_gflop")
        ops = a.get("ops_us") or {}
        if "linear" not in ops:
            sys.exit(f"{path}: {e['name']} on pid {e['pid']}: no ops_us.linear")
        kinds.update(ops)
        if not 0 < a["gemm_us"] <= sum(ops.values()) <= e["dur"]:
            sys.exit(f"{path}: {e['name']}: not 0 < gemm_us {a['gemm_us']} <= "
                     f"ops {sum(ops.values())} <= step {e['dur']}")
        if a["gemm_gflop"] <= 0:
            sys.exit(f"{path}: {e['name']}: gemm_gflop {a['gemm_gflop']}")
        steps.setdefault(e["name"], []).append(a["gemm_gflop"])
    # Each rank's value is printed to 1e-6 GFLOP: the sums agree to that
    # rounding (a rank's own share may vary: an expert-parallel moe routes
    # each step's tokens anew).
    per_step = [sum(v) for v in steps.values()]
    if max(per_step) - min(per_step) > 1e-6 * len(next(iter(steps.values()))):
        sys.exit(f"{path}: the steps' GEMM FLOPs differ: {sorted(per_step)}")
    print(f"steps {len(steps)} ranks {len(next(iter(steps.values())))} "
          f"gemm_gflop_per_step {min(per_step):.6f}")
    print("ops " + " ".join(sorted(kinds)))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: gemm_trace.py TRACE.json")
    main(sys.argv[1])
