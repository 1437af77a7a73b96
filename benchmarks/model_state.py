#!/usr/bin/env python3
"""Model-state memory per rank: parameters, gradients and optimizer state,
measured by pipeforge-run --memory-report at each ZeRO level, for every
schedule family, beside the model of it (the planner's: AdamW keeps two
float32 tensors per parameter; ZeRO-1 shards them 1/dp and, on a two-copy
schedule, once more between the two ranks that hold the same stages;
ZeRO-2 shards the gradients held between steps the same way, ZeRO-3 the
parameters too; docs/optimizer.md).

    python3 benchmarks/model_state.py [--build build] [--models gpt-tiny,llama-tiny,moe-deepseek-tiny]
        [--schedules 1f1b,zbv,dualpipev,dualpipe] [--ranks 4] [--dp 1] [--zero 0,1,2,3]

Per row: the largest rank's parameter and gradient bytes held between
steps (with the step's peak where sharding frees them), its optimizer
state, the model state held (the three) measured and modelled, and the
ratio; DualPipe's rows show what sharding over the pair does to the
second copy. The whole-tensor shards make the measured share differ from
the model by the balance of the largest tensors. Each run trains one step
on --local-ranks (threads); the programs are compiled with --zero 3 (the
parameter gathers do nothing below level 3).

Python 3 standard library only.
"""
import argparse
import os
import re
import subprocess
import tempfile

LINE = re.compile(r"rank (\d+): parameters (\d+) bytes(?: \(peak (\d+)\))?, "
                  r"gradients (\d+) bytes(?: \(peak (\d+)\))?, "
                  r"optimizer state (\d+) bytes")


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True,
                          text=True).stdout


def report(bin_, prog, ranks, zero):
    out = run([os.path.join(bin_, "pipeforge-run"), prog, "--local-ranks",
               str(ranks), "--steps", "1", "--quiet", "--memory-report",
               "--zero", str(zero)])
    rows = {}
    for m in LINE.finditer(out):
        rows[int(m.group(1))] = tuple(int(m.group(k) or -1)
                                      for k in (2, 3, 4, 5, 6))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--models", default="gpt-tiny,llama-tiny,moe-deepseek-tiny")
    ap.add_argument("--schedules", default="1f1b,zbv,dualpipev,dualpipe")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--zero", default="0,1,2,3")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bin_ = os.path.join(a.build, "bin")
    print("| model | schedule | zero | params held (peak) | grads held (peak) "
          "| optimizer state | model state held | modelled | "
          "measured / modelled |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for model in a.models.split(","):
            cfg = os.path.join(root, "examples", model + ".json")
            for sched in a.schedules.split(","):
                prog = os.path.join(tmp, f"{model}-{sched}.pfp")
                c = subprocess.run(
                    [os.path.join(bin_, "pipeforge-compile"), cfg,
                     "--schedule", sched, "--ranks", str(a.ranks), "--dp",
                     str(a.dp), "--microbatches", str(a.microbatches),
                     "--seq-len", "16", "--zero", "3", "-o", prog],
                    capture_output=True, text=True)
                if c.returncode != 0:  # e.g. too few layers for the stages
                    why = c.stderr.strip().splitlines()[-1]
                    print(f"| {model} | {sched} | - | {why} | | | | |")
                    continue
                copies = 2 if sched in ("dualpipe", "chimera") else 1
                world = a.ranks * a.dp
                for zero in [int(z) for z in a.zero.split(",")]:
                    rows = report(bin_, prog, world, zero)
                    # The rank with the most parameters: where memory binds.
                    r = max(rows, key=lambda k: (max(rows[k][0], rows[k][1]), -k))
                    params, ppeak, grads, gpeak, state = rows[r]
                    full = max(params, ppeak)  # the stage's whole bytes
                    shards = a.dp * copies
                    held = params + grads + state
                    modelled = (full / (shards if zero >= 3 else 1) +
                                full / (shards if zero >= 2 else 1) +
                                2 * full / (shards if zero >= 1 else 1))

                    def peak(v, k):
                        return f"{v:,}" + (f" ({k:,})" if k >= 0 else "")
                    print(f"| {model} | {sched} | {zero} | "
                          f"{peak(params, ppeak)} | {peak(grads, gpeak)} | "
                          f"{state:,} | {held:,} | {modelled:,.0f} | "
                          f"{held / modelled:.3f} |")

if __name__ == "__main__":
    main()
