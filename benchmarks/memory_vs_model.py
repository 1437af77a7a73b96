#!/usr/bin/env python3
"""Measured activation memory against the schedule's memory model.

For each schedule and recomputation policy: compile examples/gpt-tiny.json
on 2 pipeline ranks, train one step on --local-ranks with --memory-report,
and print, per rank, the measured peak of the stash bytes (F's stash for B
and W, B's W-stash for W) next to pipeforge-sched's predicted peak
activation in M_B (the schedule's memory model with its default
M_W = 0.5 M_B). The model's unit M_B is one microbatch's activations on a
rank's share of the model (docs/schedule-library.md): measured, the F stash
of one microbatch summed over the rank's stages of one model copy (two
chunks of an interleaved or V placement add up; DualPipe's two copies count
once). "peak / M_B" is the measured peak in that unit, to compare with the
prediction.

    python3 benchmarks/memory_vs_model.py [--build build] [--microbatches 8]
        [--schedules gpipe,1f1b,...] [--recompute none,selective,full]

Python 3 standard library only.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

SCHEDULES = "gpipe,1f1b,interleaved,zb-h1,zb-h2,zbv,dualpipev,dualpipe"


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--schedules", default=SCHEDULES)
    ap.add_argument("--recompute", default="none,selective,full")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bin_ = os.path.join(a.build, "bin")
    model = os.path.join(root, "examples", "gpt-tiny.json")
    line = re.compile(r"rank (\d+): peak stash (\d+) bytes(?: = ([0-9.]+) M_B)?"
                      r" \(one microbatch: (.*)\)")
    print("| schedule | recompute | rank | measured peak (bytes) | measured M_B "
          "(bytes) | measured peak / M_B | model peak (M_B) |")  # noqa
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for sched in a.schedules.split(","):
            model_peak = json.loads(run([
                os.path.join(bin_, "pipeforge-sched"), "--schedule", sched,
                "--ranks", "2", "--microbatches", str(a.microbatches),
                "--format", "json"]))["summary"]["peak_activation"]
            for rc in a.recompute.split(","):
                prog = os.path.join(tmp, f"{sched}-{rc}.pfp")
                run([os.path.join(bin_, "pipeforge-compile"), model,
                     "--schedule", sched, "--ranks", "2", "--microbatches",
                     str(a.microbatches), "--seq-len", "16",
                     "--microbatch-size", "2", f"--recompute={rc}", "-o", prog])
                out = run([os.path.join(bin_, "pipeforge-run"), prog,
                           "--local-ranks", "2", "--steps", "1", "--quiet",
                           "--memory-report"])
                for m in line.finditer(out):
                    r, peak, _, stages = m.groups()
                    # M_B: one microbatch's F stash over the rank's stages,
                    # per model copy.
                    fs = re.findall(r"stage \d+( \(copy \d\))? (\d+) bytes",
                                    stages)
                    copies = 2 if any(c for c, _ in fs) else 1
                    mb = sum(int(b) for _, b in fs) / copies if fs else 0
                    ratio = f"{int(peak) / mb:.2f}" if mb else "-"
                    print(f"| {sched} | {rc} | {r} | {peak} | {mb:.0f} | {ratio} | "
                          f"{model_peak[int(r)]:.2f} |")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
