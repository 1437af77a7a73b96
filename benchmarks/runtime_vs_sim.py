#!/usr/bin/env python3
"""Measured runtime step time versus the simulator's prediction.

For each schedule: compile examples/gpt-tiny.json with pipeforge-compile,
train a few steps with `mpirun -np P pipeforge-run --trace`, measure from the
merged Chrome trace the step time, per-kind op costs, blocked (comm) time,
message latency and executor overhead per action, then replay the same
schedule in pipeforge-sched with the measured costs and compare.

    python3 benchmarks/runtime_vs_sim.py [--build build] [--ranks 4,2]
        [--steps 6] [--repeat 2] [--microbatches 8] [--seq-len 32] [--microbatch-size 2]
        [--schedules 1f1b,interleaved,...] [--workdir DIR] [--markdown]

Python 3 standard library only. Definitions (per rank r, per step k >= 2;
step 1 is warm-up and dropped):

  span_r        the trace's `step k` event on tid 2: barrier exit to the
                completion of the rank's last send (the schedule part of the
                step; the gradient-norm allreduce and optimizer are not in it)
  measured step max_r span_r, mean over steps
  kernel time   compute event duration minus its `wait_us` arg (time blocked
                in receive waits inside the action); per-kind op costs are
                medians of this over all stages and steps (F, B, W, BW; FB =
                an overlapped F&BW pair event); the median, not the mean, so
                that a few preempted ops do not set the cost
  blocked_r     sum of wait_us + GRADREDUCE durations + the final send drain
                (`drain_us` of the step event)
  overhead_r    (span_r - sum compute durations - GRADREDUCE durations -
                 drain) / number of actions in rank r's program; i.e. main
                thread time outside any compute action, GradReduce and the
                final drain: dispatch, posting irecv/isend (with buffer
                allocation), MPI progress/test polling between actions,
                bookkeeping -- and, when oversubscribed, time descheduled
                between actions. Reported as the mean over ranks and steps.
  GRADREDUCE    DualPipe's and Chimera's exchange of the two model copies'
                gradients (the pair's pairwise sum, blocking, the rank's
                last action): per step and pair, the shorter of the two
                ranks' GRADREDUCE events (the later to arrive did not wait
                for the other); the median is the exchange's time, which
                --tgradreduce takes per stage a rank holds after --tcomm:
                (median - latency) / stages held
  latency       for receives the consumer blocked on (the RECV completes
                inside the consuming compute's wait): RECV completion minus
                the matching SEND's post, on the host's steady clock (each
                rank's trace carries its epoch); the median is --tcomm
  meas. bubble  1 - sum_r kernel_r / (P * max_r span_r)
  repeats       each case runs --repeat times; the run with the lowest
                measured step is reported (other load on the cores only ever
                slows a run down)
  sim           pipeforge-sched --schedule S --ranks P --microbatches M
                --tf --tb --tw --tbw --tfb --tcomm (ms) --format json:
                summary.makespan and summary.bubble_rate (same definition)
  calibrated    the same with what the runtime adds (calibration): each
                stage's F:B:W, --dispatch, and --tgradreduce where the
                schedule has GRADREDUCE
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

SCHEDULES = ["1f1b", "interleaved", "zb-h1", "zb-h2", "zbv", "dualpipe",
             "dualpipev"]
WORK_RE = re.compile(r"^(F|B|W|BW)(\d+)\.(\d+)(@\d+)?$")


def run(cmd, env=None, timeout=120):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.exit("runtime_vs_sim: command failed (%d): %s\n%s%s" %
                 (p.returncode, " ".join(cmd), p.stdout[-2000:],
                  p.stderr[-2000:]))
    return p.stdout


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def analyse(trace_path, stdout, tokens_per_step):
    with open(trace_path) as f:
        evs = json.load(f)["traceEvents"]
    epoch = {}
    by_rank = {}
    for e in evs:
        if e.get("ph") == "M" and e.get("name") == "clock":
            epoch[e["pid"]] = e["args"]["epoch_us"]
        if e.get("ph") != "X":
            continue
        by_rank.setdefault(e["pid"], []).append(e)
    ranks = sorted(by_rank)
    P = len(ranks)
    steps = {}   # step -> rank -> dict
    kinds = {}   # kind -> [kernel us]
    stage_kinds = {}  # (kind, stage) -> [kernel us]
    sends = {}   # (label core, occurrence) -> abs post us
    grs = {}     # (step, rank) -> (peer, GRADREDUCE us)
    held = {}    # rank -> {(stage, copy)} its computes run
    recvs = []   # (rank, label core, occurrence, abs end us, step)
    for r in ranks:
        es = by_rank[r]
        stepev = sorted((e for e in es if e["tid"] == 2), key=lambda e: e["ts"])
        if not stepev:
            sys.exit("runtime_vs_sim: %s has no step events: is pipeforge-run "
                     "built with the trace args (runtime/lib/Executor.cpp)?" %
                     trace_path)

        def step_of(t):
            for s in stepev:
                if s["ts"] - 1 <= t <= s["ts"] + s["dur"] + 1:
                    return int(s["name"].split()[1])
            return None

        for s in stepev:
            k = int(s["name"].split()[1])
            steps.setdefault(k, {})[r] = dict(
                span=s["dur"], actions=s["args"]["actions"],
                drain=s["args"]["drain_us"], compute=0.0, kernel=0.0,
                wait=0.0, gr=0.0, ncompute=0)
        computes = sorted((e for e in es if e["tid"] == 0),
                          key=lambda e: e["ts"])
        for e in computes:
            k = step_of(e["ts"])
            if k is None:
                continue
            w = e.get("args", {}).get("wait_us", 0.0)
            d = steps[k][r]
            d["compute"] += e["dur"]
            d["ncompute"] += 1
            d["kernel"] += e["dur"] - w
            d["wait"] += w
            parts = e["name"].split("+")
            for p in parts:  # the (stage, copy)s the rank holds
                m = WORK_RE.match(p)
                if m:
                    held.setdefault(r, set()).add((int(m.group(2)),
                                                   m.group(4) or ""))
            if k < 2:
                continue
            if len(parts) == 2:
                kind = "FB"
                stage = None
            else:
                m = WORK_RE.match(parts[0])
                if not m:
                    continue
                kind, stage = m.group(1), int(m.group(2))
            kinds.setdefault(kind, []).append(e["dur"] - w)
            if stage is not None:
                stage_kinds.setdefault((kind, stage), []).append(e["dur"] - w)
        occ = {}
        for e in sorted((e for e in es if e["tid"] == 1), key=lambda e: e["ts"]):
            k = step_of(e["ts"] + e["dur"])
            if e["name"].startswith("GRADREDUCE"):
                if k is not None:
                    steps[k][r]["gr"] += e["dur"]
                    grs[(k, r)] = (int(e["name"].rsplit("r", 1)[1]),
                                   e["dur"])
                continue
            what, rest = e["name"].split(" ", 1)
            core = rest.rsplit(" ", 1)[0]   # "act F0.1"
            if what == "SEND":
                key = ("S", core)
                n = occ.get(key, 0)
                occ[key] = n + 1
                sends[(core, n)] = epoch.get(r, 0) + e["ts"]
            elif what == "RECV":
                key = ("R", core)
                n = occ.get(key, 0)
                occ[key] = n + 1
                end = e["ts"] + e["dur"]
                # Blocked: the consuming compute waited for it (> 25 us, more
                # than a wait on a message already there) and it completed
                # during that wait, not when the wait began.
                blocked = any(
                    c.get("args", {}).get("wait_us", 0) > 25 and
                    c["ts"] + 25 <= end <= c["ts"] + c["args"]["wait_us"] + 60
                    for c in computes if c["ts"] <= end <= c["ts"] + c["dur"])
                if blocked and k is not None and k >= 2:
                    recvs.append((core, n, epoch.get(r, 0) + end))
    lat = [end - sends[(core, n)] for core, n, end in recvs
           if (core, n) in sends]
    # GRADREDUCE's exchange: per step and pair, the shorter of the two
    # events (the rank that arrived last waited for nobody).
    gr = [min(d, grs[(k, p)][1]) for (k, r), (p, d) in grs.items()
          if k >= 2 and r < p and (k, p) in grs]
    gr_held = [len(held.get(r, ())) for (k, r) in grs if k >= 2]

    meas = [k for k in sorted(steps) if k >= 2 and len(steps[k]) == P]
    if not meas:
        sys.exit("runtime_vs_sim: %s: no complete steps after warm-up" %
                 trace_path)
    span = mean([max(steps[k][r]["span"] for r in ranks) for k in meas])
    bubble = mean([1 - sum(steps[k][r]["kernel"] for r in ranks) /
                   (P * max(steps[k][r]["span"] for r in ranks)) for k in meas])
    ovh = [(steps[k][r]["span"] - steps[k][r]["compute"] - steps[k][r]["gr"] -
            steps[k][r]["drain"]) / steps[k][r]["actions"]
           for k in meas for r in ranks]
    ovh_rank = {r: mean([(steps[k][r]["span"] - steps[k][r]["compute"] -
                          steps[k][r]["gr"] - steps[k][r]["drain"]) /
                         steps[k][r]["actions"] for k in meas]) for r in ranks}
    # The runtime's own time per compute action (the simulator's
    # --dispatch): what the step spends outside compute, GRADREDUCE and
    # the final drain, per compute action.
    dispatch = mean([(steps[k][r]["span"] - steps[k][r]["compute"] -
                      steps[k][r]["gr"] - steps[k][r]["drain"]) /
                     max(1, steps[k][r]["ncompute"])
                     for k in meas for r in ranks])
    blocked = mean([steps[k][r]["wait"] + steps[k][r]["gr"] +
                    steps[k][r]["drain"] for k in meas for r in ranks])
    kernel_total = mean([sum(steps[k][r]["kernel"] for r in ranks)
                         for k in meas])
    # pipeforge-run's own line: full step (incl. optimizer) and its bubble.
    full, rbub = [], []
    for line in stdout.splitlines():
        m = re.match(r"step (\d+) loss \S+ tokens/s (\S+) bubble (\S+)", line)
        if m and int(m.group(1)) >= 2 and float(m.group(2)) > 0:
            full.append(tokens_per_step / float(m.group(2)) * 1e3)
            rbub.append(float(m.group(3)))
    return dict(
        ranks=P, step_ms=span / 1e3, bubble=bubble,
        ovh_us=mean(ovh), ovh_rank=ovh_rank, blocked_ms=blocked / 1e3,
        dispatch_ms=dispatch / 1e3,
        kernel_total_ms=kernel_total / 1e3,
        kinds={k: (statistics.median(v) / 1e3, len(v))
               for k, v in kinds.items()},
        stage_kinds={k: statistics.median(v) / 1e3
                     for k, v in stage_kinds.items()},
        lat_ms=(statistics.median(lat) / 1e3) if lat else 0.0,
        lat_n=len(lat), full_ms=mean(full), run_bubble=mean(rbub),
        gr_ms=(statistics.median(gr) / 1e3) if gr else 0.0, gr_n=len(gr),
        gr_held=max(gr_held) if gr_held else 0,
        actions=sum(steps[meas[0]][r]["actions"] for r in ranks))


def stage_costs(a):
    """--stage-costs F:B:W,... from the per-stage medians (ms), stages in
    order; a stage that ran only BW splits it as the medians of all B and W
    do (half each without them). None when a stage has no F."""
    sk = a["stage_kinds"]
    stages = sorted({s for (_, s) in sk})
    if not stages or stages != list(range(len(stages))):
        return None
    c = a["kinds"]
    tb, tw = c.get("B", (0, 0))[0], c.get("W", (0, 0))[0]
    share = tb / (tb + tw) if tb + tw > 0 else 0.5
    out = []
    for s in stages:
        f = sk.get(("F", s))
        b, w, bw = sk.get(("B", s)), sk.get(("W", s)), sk.get(("BW", s))
        if f is None:
            return None
        if b is None and w is None and bw is not None:
            b, w = bw * share, bw * (1 - share)
        out.append("%.6f:%.6f:%.6f" % (f, b or 0.0, w or 0.0))
    return ",".join(out)


def tgradreduce(a):
    """--tgradreduce: the GRADREDUCE exchange's median time less the message
    latency (the simulator adds --tcomm), per stage the rank holds (ms);
    None without GRADREDUCE events."""
    if not a["gr_n"] or not a["gr_held"]:
        return None
    return max(0.0, a["gr_ms"] - a["lat_ms"]) / a["gr_held"]


def calibration(a):
    """What the simulator is told besides the median op costs: per-stage
    costs, the runtime's time per compute action, the measured message
    latency, GRADREDUCE's exchange (docs/runtime.md, "Measured vs
    simulated")."""
    flags = ["--dispatch", "%.6f" % a["dispatch_ms"]]
    sc = stage_costs(a)
    if sc:
        flags += ["--cost-unit", "stage", "--stage-costs", sc]
    t = tgradreduce(a)
    if t is not None:
        flags += ["--tgradreduce", "%.6f" % t]
    return flags


def simulate(sched_bin, kind, P, M, a, calibrated=False):
    c = a["kinds"]
    cmd = [sched_bin, "--schedule", kind, "--ranks", str(P), "--microbatches",
           str(M), "--format", "json", "--tcomm", "%.6f" % a["lat_ms"]]
    for k, flag in (("F", "--tf"), ("B", "--tb"), ("W", "--tw"),
                    ("BW", "--tbw"), ("FB", "--tfb")):
        if k in c and not (calibrated and k == "BW"):
            cmd += [flag, "%.6f" % c[k][0]]
    if calibrated:
        cmd += calibration(a)
    j = json.loads(run(cmd))
    return j["summary"]["makespan"], j["summary"]["bubble_rate"], cmd


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(root, "build"))
    ap.add_argument("--ranks", default="4,2")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=2,
                    help="runs per case; the fastest (least disturbed) counts")
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--microbatch-size", type=int, default=2)
    ap.add_argument("--schedules", default=",".join(SCHEDULES))
    ap.add_argument("--model", default=os.path.join(root, "examples",
                                                    "gpt-tiny.json"))
    ap.add_argument("--workdir", help="keep programs and traces here")
    ap.add_argument("--markdown", action="store_true",
                    help="print the tables as Markdown")
    ap.add_argument("--verbose", action="store_true",
                    help="also print op costs and sim commands per run")
    o = ap.parse_args()
    if o.steps < 2:
        sys.exit("runtime_vs_sim: --steps must be >= 2 (step 1 is warm-up)")
    bindir = os.path.join(o.build, "bin")
    comp, runb, schedb = (os.path.join(bindir, n) for n in
                          ("pipeforge-compile", "pipeforge-run",
                           "pipeforge-sched"))
    for b in (comp, runb, schedb):
        if not os.access(b, os.X_OK):
            sys.exit("runtime_vs_sim: %s missing; ninja -C %s pipeforge-compile "
                     "pipeforge-run pipeforge-sched" % (b, o.build))
    work = o.workdir or tempfile.mkdtemp(prefix="pf-rvs-")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else os.cpu_count()
    M = o.microbatches
    tokens = M * o.microbatch_size * o.seq_len
    common = ["--microbatches", str(M), "--seq-len", str(o.seq_len),
              "--microbatch-size", str(o.microbatch_size)]
    t_start = time.time()

    def one(kind, P):
        base = os.path.join(work, "%s-%d" % (kind, P))
        prog = base + ".pfp"
        run([comp, o.model, "--schedule", kind, "--ranks", str(P)] + common +
            ["-o", prog])
        a = None
        for rep in range(o.repeat):
            trace = "%s.r%d.trace.json" % (base, rep)
            cmd = [runb, prog, "--steps", str(o.steps), "--trace", trace]
            if kind != "none":
                cmd = ["mpirun", "--oversubscribe", "-np", str(P)] + cmd
            r = analyse(trace, run(cmd, env=env), tokens)
            # Keep the least disturbed run.
            if a is None or r["step_ms"] < a["step_ms"]:
                a = r
        # The reference is F then BW per microbatch on one rank: 1f1b, 1 rank.
        sk, sp = ("1f1b", 1) if kind == "none" else (kind, P)
        a["sim_ms"], a["sim_bubble"], a["sim_cmd"] = simulate(schedb, sk, sp,
                                                              M, a)
        a["cal_ms"], a["cal_bubble"], a["cal_cmd"] = simulate(
            schedb, sk, sp, M, a, calibrated=True)
        return a

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if load > 0.5:
        print("runtime_vs_sim: WARNING: load average %.2f before starting: "
              "other processes compete for the %d cores and inflate every "
              "number below" % (load, cores))
    print("runtime_vs_sim: examples/gpt-tiny.json, %d microbatches x %d "
          "sequences x %d tokens, %d steps (step 1 dropped), best of %d "
          "runs, %d CPU cores"
          % (M, o.microbatch_size, o.seq_len, o.steps, o.repeat, cores))
    ref = one("none", 1)
    scheds = [s for s in o.schedules.split(",") if s]
    rank_list = [int(x) for x in o.ranks.split(",") if x]
    results = {P: [(s, one(s, P)) for s in scheds] for P in rank_list}

    md = o.markdown
    hdr = ["schedule", "measured step ms", "simulated ms", "ratio",
           "measured bubble", "simulated bubble", "calibrated ms",
           "calibrated bubble", "overhead us/action",
           "blocked ms/rank", "tcomm ms (n)", "gradreduce ms (n)",
           "full step ms",
           "pf-run bubble"]

    def table(title, rows):
        print()
        print(title)
        print()
        if md:
            print("| " + " | ".join(hdr) + " |")
            print("|" + "---|" * len(hdr))
        else:
            print("  ".join("%-10s" % h.split(" ")[0] if i == 0 else h
                            for i, h in enumerate(hdr)))
        for name, a in rows:
            cells = [name, "%.2f" % a["step_ms"], "%.2f" % a["sim_ms"],
                     "%.2f" % (a["step_ms"] / a["sim_ms"]),
                     "%.3f" % a["bubble"], "%.3f" % a["sim_bubble"],
                     "%.2f" % a["cal_ms"], "%.3f" % a["cal_bubble"],
                     "%.1f" % a["ovh_us"], "%.2f" % a["blocked_ms"],
                     "%.3f (%d)" % (a["lat_ms"], a["lat_n"]),
                     "%.3f (%d)" % (a["gr_ms"], a["gr_n"]),
                     "%.2f" % a["full_ms"], "%.3f" % a["run_bubble"]]
            if md:
                print("| " + " | ".join(cells) + " |")
            else:
                print("  ".join(c.rjust(len(h)) if i else c.ljust(10)
                                for i, (c, h) in enumerate(zip(cells, hdr))))

    table("single-process reference (--schedule none, 1 rank; simulated as "
          "1f1b on 1 rank)", [("none", ref)])
    for P in rank_list:
        note = (" -- OVERSUBSCRIBED: %d ranks on %d cores" % (P, cores)
                if P > cores else "")
        table("%d pipeline ranks%s" % (P, note), results[P])
        # Op costs.
        print()
        print("  measured op costs, ms (median over stages; n events):")
        for name, a in results[P]:
            print("    %-11s " % name + "  ".join(
                "%s %.3f (%d)" % (k, v[0], v[1])
                for k, v in sorted(a["kinds"].items())))
        if o.verbose:
            for name, a in results[P]:
                print("    %-11s per stage: " % name + "  ".join(
                    "%s%d %.3f" % (k, s, v) for (k, s), v in
                    sorted(a["stage_kinds"].items(), key=lambda x: (x[0][1],
                                                                    x[0][0]))))
                print("    %-11s overhead us/action by rank: " % name +
                      "  ".join("r%d %.1f" % (r, v)
                                for r, v in sorted(a["ovh_rank"].items())))
                print("    %-11s %s" % ("", " ".join(a["sim_cmd"][1:])))

    print()
    print("reference op costs, ms: " + "  ".join(
        "%s %.3f" % (k, v[0]) for k, v in sorted(ref["kinds"].items())))
    print("Sum of compute over ranks vs the reference step (CPU work "
          "inflation):")
    for P in rank_list:
        print("  %d ranks: " % P + "  ".join(
            "%s %.2fx" % (n, a["kernel_total_ms"] / ref["kernel_total_ms"])
            for n, a in results[P]))
    if any(P > cores for P in rank_list):
        print("""
NOTE: this machine has %d CPU cores, so the runs with more ranks than cores
are oversubscribed and the comparison is distorted:
  * at most %d ranks compute at once, so a step can be no shorter than the
    total compute / %d (about %.1f ms from the reference) however small the
    schedule's bubble; the simulator assumes one processor per rank.
  * op costs are measured while ranks time-slice: the same F is slower in
    the steady state (all ranks runnable) than in warm-up/cool-down, so the
    cost fed to the simulator is an inflated average and the bubble it
    predicts is not the one the CPU sees (idle ranks are not idle cores:
    another rank uses the core).
  * message latency and executor overhead include time a rank sits
    descheduled (a message whose sender or receiver is off-core arrives
    late; a rank preempted between two actions shows it as overhead).
  * the measured bubble (1 - busy / (P x span)) counts time a rank waited
    for a core as busy, so it is not comparable with a dedicated-core run.
The runs with ranks <= cores are the fair comparison.""" %
              (cores, cores, cores, ref["kernel_total_ms"] / cores))
    print("\n(%.0f s; programs and traces in %s)" % (time.time() - t_start,
                                                      work))


if __name__ == "__main__":
    main()
