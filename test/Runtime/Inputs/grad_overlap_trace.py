#!/usr/bin/env python3
"""Per rank, from a pipeforge-run --trace of one step: how many gradient
allreduce buckets the overlapped reduction posted, and how many of them were
posted before the rank's last compute action of the step ended (the part of
the reduction that overlaps the backward pass).

    grad_overlap_trace.py TRACE.json
prints "rank R: N buckets, K posted during the backward pass" per rank."""
import collections
import json
import sys

events = json.load(open(sys.argv[1]))
if isinstance(events, dict):
    events = events["traceEvents"]
last_compute = collections.defaultdict(float)
buckets = collections.defaultdict(list)
for e in events:
    if e.get("ph") != "X":
        continue
    if e.get("tid") == 0:
        end = e["ts"] + e["dur"]
        last_compute[e["pid"]] = max(last_compute[e["pid"]], end)
    elif e["name"].startswith("grad allreduce"):
        buckets[e["pid"]].append(e["ts"])
for pid in sorted(last_compute):
    early = sum(1 for ts in buckets[pid] if ts < last_compute[pid])
    print(f"rank {pid}: {len(buckets[pid])} buckets, {early} posted during "
          f"the backward pass")
