#!/usr/bin/env python3
"""Model-state memory per rank: parameters, gradients and optimizer state,
measured by pipeforge-run --memory-report, without and with --zero 1, for
every schedule family, beside the model of it (the planner's: AdamW keeps
two float32 tensors per parameter, sharded 1/dp by ZeRO-1 and, on a
two-copy schedule, once more between the two ranks that hold the same
stages; docs/optimizer.md).

    python3 benchmarks/model_state.py [--build build] [--models gpt-tiny,llama-tiny,moe-deepseek-tiny]
        [--schedules 1f1b,zbv,dualpipev,dualpipe] [--ranks 4] [--dp 1]

Per row: the largest rank's parameter bytes, its optimizer-state bytes
measured and modelled, and the ratio; DualPipe's row shows what ZeRO-1
over the pair does to the second copy. The whole-tensor shards make the
measured share differ from the model by the balance of the largest
tensors. Each run trains one step on --local-ranks (threads).

Python 3 standard library only.
"""
import argparse
import os
import re
import subprocess
import tempfile

LINE = re.compile(r"rank (\d+): parameters (\d+) bytes, gradients (\d+) bytes, "
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
        rows[int(m.group(1))] = tuple(int(m.group(k)) for k in (2, 3, 4))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--models", default="gpt-tiny,llama-tiny,moe-deepseek-tiny")
    ap.add_argument("--schedules", default="1f1b,zbv,dualpipev,dualpipe")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--microbatches", type=int, default=8)
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bin_ = os.path.join(a.build, "bin")
    print("| model | schedule | zero | params (bytes) | grads (bytes) | "
          "optimizer state (bytes) | modelled | measured / modelled |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for model in a.models.split(","):
            cfg = os.path.join(root, "examples", model + ".json")
            for sched in a.schedules.split(","):
                prog = os.path.join(tmp, f"{model}-{sched}.pfp")
                c = subprocess.run(
                    [os.path.join(bin_, "pipeforge-compile"), cfg,
                     "--schedule", sched, "--ranks", str(a.ranks), "--dp",
                     str(a.dp), "--microbatches", str(a.microbatches),
                     "--seq-len", "16", "-o", prog],
                    capture_output=True, text=True)
                if c.returncode != 0:  # e.g. too few layers for the stages
                    why = c.stderr.strip().splitlines()[-1]
                    print(f"| {model} | {sched} | - | {why} | | | | |")
                    continue
                copies = 2 if sched in ("dualpipe", "chimera") else 1
                world = a.ranks * a.dp
                for zero in (0, 1):
                    rows = report(bin_, prog, world, zero)
                    # The rank with the most parameters: where memory binds.
                    r = max(rows, key=lambda k: (rows[k][0], -k))
                    params, grads, state = rows[r]
                    shards = a.dp * copies if zero else 1
                    modelled = 2 * params / shards
                    print(f"| {model} | {sched} | {zero} | {params:,} | "
                          f"{grads:,} | {state:,} | {modelled:,.0f} | "
                          f"{state / modelled:.3f} |")


if __name__ == "__main__":
    main()
