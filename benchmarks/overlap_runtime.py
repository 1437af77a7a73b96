#!/usr/bin/env python3
"""Exposed all-to-all and P2P time per rank, measured from pipeforge-run's
trace, with and without fused overlap, next to pipeforge-sched's prediction.

Same model (examples/moe-tiny.json), same ranks (pipeline P x expert E, MPI
np = P x E), same program: compiled once, components added
(pipeforge-rt-testprog --add-components, until pipeforge-compile
--pp-fuse-overlap writes them), run fused and with --no-fuse.

Each mode runs --repeat times; the run with the shortest step is kept.
Measured, per rank, mean over steps 2..N (step 1 dropped), in ms per step:
  exposed a2a   the time the rank blocked in all-to-all waits (trace tid 1
                events with args.a2a: their wait_us). Without fusion every
                all-to-all is waited right after it is posted, so this is all
                of the all-to-all time; with fusion the other member's
                compute runs while it is in flight.
  exposed p2p   receive waits inside compute actions (args.wait_us of the
                compute events) + the step's final send drain (drain_us).
  a2a total     post to observed completion, summed.
  step          the step event (tid 2) duration.
Simulated (pipeforge-sched --ta2a --moe-layers, blocking for "unfused",
--overlap-comm for "fused"), the costs measured from the unfused trace:
tf / tb / tbw / tw the medians of F / B / BW / W actions' compute time
(duration - receive waits - all-to-all waits), tcomm the 10th percentile of sends
(post to completion; most sends wait for the receiver to get there, which
the simulator models as a dependency, not as transfer time), ta2a the measured unfused all-to-all time per rank and step
divided by the all-to-alls the simulator charges (2 per layer to each F and
to each B / BW), so the simulated blocking total matches the measurement.
The runtime's backward kernels recompute the forward (moe_bwd_input 4,
moe_bwd_weight 3 all-to-alls, forward moe 2), so its all-to-alls are not
spread over F and B as the simulator assumes (ta2a_median: the median
forward one).

  benchmarks/overlap_runtime.py [--build DIR] [--schedule dualpipev]
      [--ranks 2] [--ep 2] [--microbatches 8] [--seq-len 32] [--steps 6]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sh(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode:
        sys.exit("failed: %s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
    return r.stdout


def measure(trace, nranks):
    ev = [e for e in json.load(open(trace))["traceEvents"] if e.get("ph") == "X"]
    out = {}
    for r in range(nranks):
        es = [e for e in ev if e["pid"] == r]
        steps = sorted((e for e in es if e["tid"] == 2), key=lambda e: e["ts"])[1:]
        if not steps:
            continue
        acc = {"a2a": 0.0, "p2p": 0.0, "a2a_total": 0.0, "step": 0.0}
        for s in steps:
            t0, t1 = s["ts"], s["ts"] + s["dur"]
            inside = [e for e in es if t0 <= e["ts"] <= t1]
            for e in inside:
                a = e.get("args", {})
                if e["tid"] == 1 and a.get("a2a"):
                    acc["a2a"] += a["wait_us"]
                    acc["a2a_total"] += e["dur"]
                elif e["tid"] == 0 and e.get("cat") != "component":
                    acc["p2p"] += a.get("wait_us", 0.0)
            acc["p2p"] += s.get("args", {}).get("drain_us", 0.0)
            acc["step"] += s["dur"]
        out[r] = {k: v / len(steps) / 1000.0 for k, v in acc.items()}
    return out


def costs(trace, moe_layers):
    ev = [e for e in json.load(open(trace))["traceEvents"] if e.get("ph") == "X"]
    kinds = {"F": [], "B": [], "W": [], "BW": []}
    for e in ev:
        if e["tid"] != 0 or e.get("cat") == "component":
            continue
        m = re.match(r"^(F|B|W|BW)\d", e["name"])
        if not m or "+" in e["name"]:
            continue
        a = e.get("args", {})
        kinds[m.group(1)].append((e["dur"] - a.get("wait_us", 0) - a.get("a2a_wait_us", 0)) / 1000)
    a2a = [e["dur"] / 1000 for e in ev if e["tid"] == 1 and e.get("args", {}).get("a2a")
           and re.search(r" moe (dispatch|combine)$", e["name"])]
    p2p = [e["dur"] / 1000 for e in ev if e["tid"] == 1 and re.match(r"^SEND", e["name"])]
    med = lambda v, d: statistics.median(v) if v else d
    tf = med(kinds["F"], 1.0)
    tb = med(kinds["B"], tf)
    tw = med(kinds["W"], tf * 0.5)
    return {"tf": tf, "tb": tb, "tw": tw, "tbw": med(kinds["BW"], tb + tw),
            "tcomm": sorted(p2p)[len(p2p) // 10] if p2p else 0.0, "ta2a_median": med(a2a, 0.0)}


def simulate(tools, args, c, overlap):
    cmd = [os.path.join(tools, "pipeforge-sched"), "--schedule", args.schedule,
           "--ranks", str(args.ranks), "--microbatches", str(args.microbatches),
           "--moe-layers", str(args.layers_per_stage)]
    for k in ("tf", "tb", "tw", "tbw", "tcomm", "ta2a"):
        cmd += ["--" + k, "%.6f" % c[k]]
    if overlap:
        cmd.append("--overlap-comm")
    out = sh(cmd)
    res = {"makespan": float(re.search(r"makespan ([0-9.]+)", out).group(1))}
    for m in re.finditer(r"rank (\d+): exposed p2p ([0-9.]+)\s+a2a ([0-9.]+)", out):
        res[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--schedule", default="dualpipev")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--ep", type=int, default=2)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--microbatch-size", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs per mode; the one with the shortest step is kept")
    ap.add_argument("--model", default=os.path.join(ROOT, "examples", "moe-tiny.json"))
    args = ap.parse_args()
    tools = os.path.join(args.build, "bin")
    layers = json.load(open(args.model))["num_hidden_layers"]
    stages = args.ranks * (1 if args.schedule == "dualpipe" else 2 if args.schedule in ("dualpipev", "zbv", "interleaved") else 1)
    args.layers_per_stage = max(1, layers // stages)
    np_ = args.ranks * args.ep
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    with tempfile.TemporaryDirectory() as d:
        prog, progc = os.path.join(d, "p.pfp"), os.path.join(d, "pc.pfp")
        sh([os.path.join(tools, "pipeforge-compile"), args.model, "--schedule", args.schedule,
            "--ranks", str(args.ranks), "--ep", str(args.ep), "--microbatches", str(args.microbatches),
            "--seq-len", str(args.seq_len), "--microbatch-size", str(args.microbatch_size), "-o", prog])
        sh([os.path.join(tools, "pipeforge-rt-testprog"), "--add-components", prog, "-o", progc])
        meas = {}
        for mode in ("unfused", "fused"):
            tr = os.path.join(d, mode + ".json")
            cmd = ["mpirun", "--oversubscribe", "-np", str(np_), os.path.join(tools, "pipeforge-run"), progc,
                   "--steps", str(args.steps), "--optimizer", "sgd", "--lr", "0.05", "--trace", tr, "--quiet"]
            if mode == "unfused":
                cmd.append("--no-fuse")
            best = None
            for _ in range(args.repeat):
                sh(cmd, env)
                m = measure(tr, np_)
                span = max(v["step"] for v in m.values())
                if best is None or span < best[0]:
                    best = (span, m, costs(tr, args.layers_per_stage) if mode == "unfused" else None)
            meas[mode] = best[1]
            if mode == "unfused":
                c = best[2]
        # ta2a: the measured unfused all-to-all time per rank and step spread
        # over the all-to-alls the simulator charges (2 per layer to each F
        # and each B/BW of the rank's stages), so that the simulated blocking
        # total equals the measured one.
        charged = 4 * args.layers_per_stage * (stages // args.ranks) * args.microbatches
        c["ta2a"] = statistics.mean(m["a2a_total"] for m in meas["unfused"].values()) / charged
        sim = {"unfused": simulate(tools, args, c, False), "fused": simulate(tools, args, c, True)}
    print("# %s, pipeline %d x expert %d (%d MPI ranks on %d cores), %d microbatches x %d x %d tokens, %d MoE layers/stage"
          % (args.schedule, args.ranks, args.ep, np_, os.cpu_count(), args.microbatches, args.microbatch_size,
             args.seq_len, args.layers_per_stage))
    print("# simulator costs (ms, from the unfused trace): " +
          " ".join("%s %.3f" % (k, v) for k, v in c.items()))
    print()
    print("| rank | mode | step ms | exposed a2a ms | a2a total ms | exposed p2p ms | sim exposed a2a | sim exposed p2p |")
    print("|---|---|---|---|---|---|---|---|")
    for r in range(np_):
        prank = r % args.ranks
        for mode in ("unfused", "fused"):
            m = meas[mode].get(r)
            if not m:
                continue
            sp, sa = sim[mode].get(prank, (float("nan"), float("nan")))
            print("| %d (p%d e%d) | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |"
                  % (r, prank, r // args.ranks, mode, m["step"], m["a2a"], m["a2a_total"], m["p2p"], sa, sp))
    for mode in ("unfused", "fused"):
        ms = meas[mode].values()
        print("\n%s: mean exposed a2a %.2f ms, p2p %.2f ms, step %.2f ms; simulated makespan %.2f ms"
              % (mode, statistics.mean(m["a2a"] for m in ms), statistics.mean(m["p2p"] for m in ms),
                 max(m["step"] for m in ms), sim[mode]["makespan"]), end="")
    print()


if __name__ == "__main__":
    main()
