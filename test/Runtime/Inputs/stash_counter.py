"""Prints each rank's activation-stash track of a pipeforge-run trace: the
number of counter events, the highest level and the last one."""
import json
import sys

events = [e for e in json.load(open(sys.argv[1]))["traceEvents"]
          if e.get("ph") == "C" and e.get("name") == "activation stash"]
for pid in sorted({e["pid"] for e in events}):
    levels = [e["args"]["bytes"] for e in sorted(
        (e for e in events if e["pid"] == pid), key=lambda e: e["ts"])]
    print(f"rank {pid}: {len(levels)} levels, max {max(levels)}, last {levels[-1]}")
