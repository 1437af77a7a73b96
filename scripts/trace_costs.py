#!/usr/bin/env python3
"""Reads a merged pipeforge-run Chrome trace and prints the measured op
costs as pipeforge-sched options: --tf --tb --tw --tbw --tfb
(milliseconds; an action's time blocked on a receive is not counted; medians
over all ranks and steps, so the first step's warm-up and preempted ops do
not dominate). benchmarks/runtime_vs_sim.py does the same and more.
Usage: trace_costs.py TRACE.json"""
import json
import re
import statistics
import sys

events = json.load(open(sys.argv[1]))
if isinstance(events, dict):
    events = events["traceEvents"]
times = {"F": [], "B": [], "W": [], "BW": [], "FB": []}
for e in events:
    if e.get("ph") != "X" or e.get("cat") != "compute":
        continue
    name = e["name"]
    dur = e["dur"] - e.get("args", {}).get("wait_us", 0)
    if "+" in name:
        times["FB"].append(dur)
        continue
    m = re.match(r"(BW|F|B|W)\d", name)
    if m:
        times[m.group(1)].append(dur)

def ms(kind):
    return statistics.median(times[kind]) / 1000.0 if times[kind] else None

tf, tb, tw, tbw, tfb = ms("F"), ms("B"), ms("W"), ms("BW"), ms("FB")
if tb is None and tbw is not None:  # schedules without a split backward
    tb, tw = tbw / 2, tbw / 2
opts = [f"--tf {tf:.4f}", f"--tb {tb or 0:.4f}", f"--tw {tw or 0:.4f}"]
if tbw is not None:
    opts.append(f"--tbw {tbw:.4f}")
if tfb is not None:
    opts.append(f"--tfb {tfb:.4f}")
print(" ".join(opts))
