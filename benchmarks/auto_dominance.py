#!/usr/bin/env python3
"""Is `--schedule auto` ever slower than a handcrafted schedule at equal memory?

For every point of a grid (ranks p, microbatches m, costs F:B:W and tcomm)
and every single-copy handcrafted schedule (gpipe, 1f1b, interleaved, zb-h1,
zb-h2, zbv, dualpipev, v-half, v-min) that the point admits, the
schedule's makespan and peak activation (max over ranks) come from
`pipeforge-sched`; then
`pipeforge-sched --schedule auto` runs with that peak as its memory limit
and otherwise its default flags: every placement (`--placement any`), costs
per rank's share of the model (`--cost-unit rank`, so every placement runs
the same model: a V stage takes half a rank's share), the default work
budgets and time limit. Prints one row per point with each schedule's
margin (auto - handcrafted) / handcrafted (negative: auto faster) and the
worst margin; exits 1 if auto is slower anywhere.

With `--copies 2` DualPipe (two parameter copies) joins the handcrafted
schedules and auto may choose it. With `--offload auto` every handcrafted
schedule runs with activation offload (`--offload-activations auto`: its
peak is the offloaded one) and auto runs with it too, under that peak.

    auto_dominance.py [--sched BIN] [--ranks 4,8] [--mult 1,2,3,4]
                      [--costs "1:1:1:0,1:2:1:0,1:1:1:0.1,1.2:1:0.9:0.05"]
                      [--time-limit S] [--copies 1|2] [--offload off|auto]

The issue's grid (p in 4, 8, 16; m in p..4p; four cost ratios):

    auto_dominance.py --ranks 4,8,16
"""
import argparse
import json
import subprocess
import sys

KINDS = ["gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zbv", "dualpipev",
         "v-half", "v-min"]


def sched(binary, args):
    p = subprocess.run([binary] + args + ["--format", "json"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr.strip()
    s = json.loads(p.stdout)["summary"]
    return (s["makespan"], max(s["peak_activation"])), ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sched", default="build/bin/pipeforge-sched")
    ap.add_argument("--ranks", default="4,8")
    ap.add_argument("--mult", default="1,2,3,4")
    ap.add_argument("--costs", default="1:1:1:0,1:2:1:0,1:1:1:0.1,1.2:1:0.9:0.05")
    ap.add_argument("--time-limit", default=None,
                    help="auto's search ceiling, --search-limit (default: the tool's)")
    ap.add_argument("--copies", default="1", choices=["1", "2"])
    ap.add_argument("--offload", default="off", choices=["off", "auto"])
    a = ap.parse_args()
    kinds = KINDS + (["dualpipe"] if a.copies == "2" else [])
    worst, rows, slower = None, 0, []
    print(f"{'p':>3} {'m':>3} {'F:B:W:comm':<16} " +
          " ".join(f"{k:>11}" for k in kinds))
    for p in (int(x) for x in a.ranks.split(",")):
        for k in (int(x) for x in a.mult.split(",")):
            m = k * p
            for c in a.costs.split(","):
                tf, tb, tw, tc = c.split(":")
                costs = ["--ranks", str(p), "--microbatches", str(m), "--tf", tf,
                         "--tb", tb, "--tw", tw, "--tcomm", tc]
                if a.offload != "off":
                    costs += ["--offload-activations", a.offload]
                cells, autos = [], {}
                for kind in kinds:
                    hand, _ = sched(a.sched, ["--schedule", kind] + costs)
                    if hand is None:
                        cells.append("-")
                        continue
                    mk, peak = hand
                    if peak not in autos:
                        extra = ["--search-limit", a.time_limit] if a.time_limit else []
                        if a.copies != "1":
                            extra += ["--copies", a.copies]
                        autos[peak], err = sched(
                            a.sched, ["--schedule", "auto", "--mem-limit",
                                      repr(peak)] + extra + costs)
                        if autos[peak] is None:
                            sys.exit(f"auto failed at p={p} m={m} {c} limit {peak}: {err}")
                    margin = (autos[peak][0] - mk) / mk
                    cells.append(f"{100 * margin:+.2f}%")
                    if worst is None or margin > worst[0]:
                        worst = (margin, p, m, c, kind)
                    if margin > 1e-9:
                        slower.append((p, m, c, kind, margin))
                rows += 1
                print(f"{p:>3} {m:>3} {c:<16} " + " ".join(f"{x:>11}" for x in cells))
    print(f"{rows} points; worst margin {100 * worst[0]:+.2f}% "
          f"(p={worst[1]} m={worst[2]} {worst[3]} against {worst[4]}); "
          f"auto slower at {len(slower)} comparisons")
    return 1 if slower else 0


if __name__ == "__main__":
    sys.exit(main())
