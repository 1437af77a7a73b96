#!/usr/bin/env python3
"""Each rank's planned bytes (pipeforge-run --memory-plan, checked at start)
against the peak --memory-report measured ("buffers peak N bytes +
optimizer state N = N bytes"), from one run's output on stdin. Prints one
line per rank and fails when a plan is off by more than --tolerance
(relative, default 0.05). test/Runtime/memory-check.test."""
import argparse
import re
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--tolerance", type=float, default=0.05)
ap.add_argument("--label", default="")
args = ap.parse_args()
text = sys.stdin.read()
plan = {int(r): int(n) for r, n in
        re.findall(r"^memory check: rank (\d+) plans (\d+) B", text, re.M)}
meas = {int(r): int(n) for r, n in
        re.findall(r"^rank (\d+): buffers peak \d+ bytes \+ optimizer state \d+ = (\d+) bytes",
                   text, re.M)}
if not plan or set(plan) != set(meas):
    sys.exit(f"{args.label}: ranks planned {sorted(plan)}, measured {sorted(meas)}")
bad = False
for r in sorted(plan):
    err = (plan[r] - meas[r]) / meas[r]
    ok = abs(err) <= args.tolerance
    bad |= not ok
    print(f"{args.label} rank {r}: planned {plan[r]} measured {meas[r]} "
          f"({err:+.2%}) {'ok' if ok else 'OFF'}")
sys.exit(1 if bad else 0)
