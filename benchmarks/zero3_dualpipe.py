#!/usr/bin/env python3
"""DualPipe with and without ZeRO-3, on CPU ranks (issue 42, item 3).

DualPipe keeps two copies of every stage (rank r holds stages r and P-1-r,
its peer the other copy of both). ZeRO-3 (pipeforge-run --zero 3 on a
program compiled with --zero 3) shards them over the pair (and the
data-parallel replicas): between steps a rank holds the parameters,
gradients and AdamW state of the tensors it updates. This prints, for one
model on P ranks:

- memory: parameters and gradients a rank holds between steps (and the
  step's peak), its AdamW state, for DualPipe at ZeRO 0, 2 and 3 beside
  DualPipeV and 1F1B unsharded (the rank with the most parameters), from
  pipeforge-run --memory-report;
- time: tokens/s of DualPipe at ZeRO 0 and 3 under mpirun, alternating
  the two over --rounds launches, median (min-max) of the steps after the
  first of every launch, and the ratio.

    python3 benchmarks/zero3_dualpipe.py [--build build] [--ranks 4]
        [--rounds 3] [--steps 5] [--model llama|gpt]

The models: a Llama of hidden 256, 8 layers, 8 heads (2 KV), SwiGLU 688,
sequence 128, microbatch 2 (the one zb_recompute.py times), and a GPT-2
of the same size; 2 x ranks microbatches. Python 3 standard library only;
needs mpirun.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile

from zb_recompute import MODEL

# The Llama zb_recompute.py times.
LLAMA = MODEL
GPT = {
    "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 8,
    "n_embd": 256, "n_head": 8, "vocab_size": 256, "n_positions": 128,
    "layer_norm_epsilon": 1e-05, "initializer_range": 0.02,
    "tie_word_embeddings": False,
}
STEP = re.compile(r"^step (\d+) loss \S+ tokens/s (\d+)", re.M)
MEM = re.compile(r"^rank (\d+): parameters (\d+) bytes(?: \(peak (\d+)\))?, "
                 r"gradients (\d+) bytes(?: \(peak (\d+)\))?, "
                 r"optimizer state (\d+) bytes", re.M)


def run(cmd, env=None):
    return subprocess.run(cmd, check=True, capture_output=True, text=True,
                          env=env).stdout


def mib(n):
    return f"{n / 2**20:.2f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--model", choices=("llama", "gpt"), default="llama")
    a = ap.parse_args()
    bin_ = os.path.join(a.build, "bin")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    mb = 2 * a.ranks
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "model.json")
        with open(cfg, "w") as f:
            json.dump(LLAMA if a.model == "llama" else GPT, f)

        def compile_(sched, zero):
            out = os.path.join(tmp, f"{sched}-z{zero}.pfp")
            run([os.path.join(bin_, "pipeforge-compile"), cfg, "--schedule",
                 sched, "--ranks", str(a.ranks), "--microbatches", str(mb),
                 "--seq-len", "128", "--microbatch-size", "2", "--zero",
                 str(3 if zero == 3 else 0), "-o", out])
            return out

        rows = [("dualpipe", 0), ("dualpipe", 2), ("dualpipe", 3),
                ("dualpipev", 0), ("1f1b", 0)]
        progs = {r: compile_(*r) for r in rows}
        print(f"model: {a.model}, hidden 256, 8 layers, seq 128, "
              f"microbatch 2, {mb} microbatches, {a.ranks} ranks")
        print()
        print("| schedule | zero | parameters held (peak), MiB | "
              "gradients held (peak), MiB | AdamW state, MiB |")
        print("|---|---|---|---|---|")
        for r in rows:
            out = run([os.path.join(bin_, "pipeforge-run"), progs[r],
                       "--local-ranks", str(a.ranks), "--steps", "1",
                       "--quiet", "--memory-report", "--zero", str(r[1])])
            ranks = [m.groups() for m in MEM.finditer(out)]
            g = max(ranks, key=lambda t: int(t[1]))  # most parameters
            p, pp, gr, gp, st = int(g[1]), g[2], int(g[3]), g[4], int(g[5])
            ppeak = f" ({mib(int(pp))})" if pp else ""
            gpeak = f" ({mib(int(gp))})" if gp else ""
            print(f"| {r[0]} | {r[1]} | {mib(p)}{ppeak} | {mib(gr)}{gpeak} "
                  f"| {mib(st)} |")
        print()
        rates = {0: [], 3: []}
        for _ in range(a.rounds):
            for z in (0, 3):
                out = run(["mpirun", "-np", str(a.ranks),
                           os.path.join(bin_, "pipeforge-run"),
                           progs[("dualpipe", z)], "--steps", str(a.steps),
                           "--zero", str(z)], env=env)
                rates[z] += [int(t) for s, t in STEP.findall(out)
                             if int(s) > 1]
        print("| DualPipe | tokens/s median (min-max) | ratio to ZeRO 0 |")
        print("|---|---|---|")
        base = statistics.median(rates[0])
        for z in (0, 3):
            v = rates[z]
            print(f"| zero {z} | {statistics.median(v):.0f} "
                  f"({min(v)}-{max(v)}) | "
                  f"{statistics.median(v) / base:.3f} |")


if __name__ == "__main__":
    main()
