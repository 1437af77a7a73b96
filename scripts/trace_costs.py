#!/usr/bin/env python3
"""Reads a merged pipeforge-run Chrome trace and prints what it measured as
pipeforge-sched options (milliseconds; an action's time blocked on a
receive is not counted; medians over all ranks and steps after the first):

    trace_costs.py TRACE.json              --tf --tb --tw [--tbw] [--tfb]
    trace_costs.py --calibrated TRACE.json  the same, and what a real runtime
        adds: --tcomm (a blocked receive's latency: its completion minus its
        send's post), --dispatch (the runtime's own time per compute action:
        the step's span outside compute, GRADREDUCE and the final drain, per
        compute action), --cost-unit stage --stage-costs (each stage's F:B:W),
        and where the schedule has GRADREDUCE (DualPipe, Chimera: the two
        model copies' gradients exchanged by the pair) --tgradreduce (the
        exchange's median time, the shorter of the pair's two events, less
        --tcomm, per stage a rank holds)

The analysis is benchmarks/runtime_vs_sim.py's (analyse), which prints the
same numbers per schedule; docs/runtime.md, "Measured vs simulated"."""
import os
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(root, "benchmarks"))
from runtime_vs_sim import analyse, calibration  # noqa: E402

args = sys.argv[1:]
calibrated = "--calibrated" in args
args = [a for a in args if a != "--calibrated"]
if len(args) != 1:
    sys.exit(__doc__)
a = analyse(args[0], "", 1)
kinds = {k: v[0] for k, v in a["kinds"].items()}
tf, tb, tw = kinds.get("F"), kinds.get("B"), kinds.get("W")
tbw, tfb = kinds.get("BW"), kinds.get("FB")
if tb is None and tbw is not None:  # schedules without a split backward
    tb, tw = tbw / 2, tbw / 2
opts = [f"--tf {tf or 0:.4f}", f"--tb {tb or 0:.4f}", f"--tw {tw or 0:.4f}"]
if tbw is not None and not calibrated:
    opts.append(f"--tbw {tbw:.4f}")
if tfb is not None:
    opts.append(f"--tfb {tfb:.4f}")
if calibrated:
    opts.append(f"--tcomm {a['lat_ms']:.4f}")
    cal = calibration(a)
    opts += [f"{cal[i]} {cal[i + 1]}" for i in range(0, len(cal), 2)]
print(" ".join(opts))
