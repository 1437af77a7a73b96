#!/usr/bin/env python3
"""Where a pipeforge-run step's compute went, from its --trace file: each
op kind's kernels (the step events' args.ops_us) and the GEMMs inside them
(args.gemm_us, args.gemm_gflop), in milliseconds per step summed over the
ranks, medians over the steps after the first (all of them when there is
one). CPU backends only: device backends do not time their kernels.

    trace_ops.py TRACE.json

prints one line per op kind, the largest first:

    <op>  <ms per step>  <share of the kernels' time>

then the totals: the kernels' time, the GEMMs' time and rate, and the
rest (the kernels' time outside GEMMs). docs/runtime.md, "Measured vs
simulated"."""
import json
import statistics
import sys


def main(path):
    with open(path) as f:
        t = json.load(f)
    ev = t["traceEvents"] if isinstance(t, dict) else t
    per_step = {}  # step -> [ops dict, gemm seconds, gemm gflop]
    for e in ev:
        if e.get("ph") != "X" or not e.get("name", "").startswith("step "):
            continue
        a = e.get("args") or {}
        if "ops_us" not in a:
            continue
        s = per_step.setdefault(int(e["name"].split()[1]), [{}, 0.0, 0.0])
        for op, us in a["ops_us"].items():
            s[0][op] = s[0].get(op, 0.0) + us / 1e3
        s[1] += a.get("gemm_us", 0.0) / 1e3
        s[2] += a.get("gemm_gflop", 0.0)
    if not per_step:
        sys.exit(f"{path}: no step event with ops_us (a CPU run with --trace "
                 "writes them)")
    steps = sorted(per_step)
    if len(steps) > 1:
        steps = steps[1:]
    med = lambda f: statistics.median(f(per_step[k]) for k in steps)
    ops = sorted({op for k in steps for op in per_step[k][0]})
    ms = {op: med(lambda s: s[0].get(op, 0.0)) for op in ops}
    total = med(lambda s: sum(s[0].values()))
    gemm, gflop = med(lambda s: s[1]), med(lambda s: s[2])
    width = max(len(op) for op in ops)
    for op in sorted(ops, key=lambda o: -ms[o]):
        print(f"{op:<{width}}  {ms[op]:10.3f} ms  {100 * ms[op] / total:5.1f}%")
    rate = gflop / gemm if gemm > 0 else 0.0  # GFLOP per ms = TFLOP/s
    print(f"kernels {total:.3f} ms per step over {len(steps)} step(s); GEMMs "
          f"{gemm:.3f} ms ({100 * gemm / total:.1f}%, {rate * 1e3:.1f} GFLOP/s); "
          f"outside GEMMs {total - gemm:.3f} ms ({100 * (total - gemm) / total:.1f}%)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
