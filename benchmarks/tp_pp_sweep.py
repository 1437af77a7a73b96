#!/usr/bin/env python3
"""Tensor x pipeline parallel combinations of a GPT-2 medium-like model on 8
simulated GPUs: predicted step time and the share of tensor-parallel
communication (docs/tensor-parallel.md).

For each (tp, pp) with tp x pp = 8 the script runs the compiler's own cost
model on the model as one TP rank computes it:

    pipeforge-import CONFIG | pipeforge-opt --nn-shard-tensor="tp=T"
        --pp-partition="stages=P" --nn-cost-report

(per stage: FLOPs of F, B, W and the bytes each rank sends in the TP
collectives of F and B), turns the slowest stage into times (FLOPs at
--tflops x --mfu, TP bytes at --tp-gbps: the collectives block the stage,
as in PipeForge's executor), and replays --schedule on --microbatches with
pipeforge-sched's simulator (uniform stages at the slowest stage's times).

    benchmarks/tp_pp_sweep.py [--build build] [--schedule zb-h1]
        [--microbatches 32] [--seq-len 1024] [--microbatch-size 1]
        [--tflops 989] [--mfu 0.5] [--tp-gbps 450]

Prints one row per combination: per-stage F/B/W times with and without the
TP share, the step time, the bubble and the TP communication share of a
stage's work. Defaults: H100 SXM (989 dense bf16 TFLOPs, NVLink 450 GB/s
per direction), GPT-2 medium (24 layers, hidden 1024, 16 heads) with the
vocabulary padded to 50304 as Megatron-LM does (divisible by 8).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

GPT2_MEDIUM = {
    "model_type": "gpt2",
    "architectures": ["GPT2LMHeadModel"],
    "activation_function": "gelu_new",
    "n_layer": 24,
    "n_embd": 1024,
    "n_head": 16,
    "n_positions": 1024,
    "n_ctx": 1024,
    "vocab_size": 50304,
    "layer_norm_epsilon": 1e-05,
    "initializer_range": 0.02,
    "attn_pdrop": 0.1,
    "embd_pdrop": 0.1,
    "resid_pdrop": 0.1,
}


def run(cmd, stdin=None):
    r = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("tp_pp_sweep: %s failed:\n%s" % (" ".join(cmd), r.stderr))
    return r.stdout


def stage_costs(args, cfg, tp, pp):
    """Per stage: (F, B, W flops, tp F bytes, tp B bytes)."""
    bindir = os.path.join(args.build, "bin")
    ir = run([os.path.join(bindir, "pipeforge-import"), cfg, "--seq-len",
              str(args.seq_len), "--microbatch-size",
              str(args.microbatch_size)])
    passes = []
    if tp > 1:
        passes.append("--nn-shard-tensor=tp=%d" % tp)
    passes += ["--pp-partition=stages=%d" % pp,
               "--nn-cost-report=bytes-per-element=2"]
    out = run([os.path.join(bindir, "pipeforge-opt")] + passes +
              ["-o", os.devnull], stdin=ir)
    stages = []
    in_pipeline = False
    for line in out.splitlines():
        if line.startswith("pipeline @"):
            in_pipeline = True
            continue
        m = re.match(r"\s+stage \S+ r\d+\s+(.*)", line)
        if in_pipeline and m:
            f = [float(x) for x in m.group(1).split()]
            # F B W stash W_stash params [tp_F tp_B]
            comm = (f[6], f[7]) if len(f) >= 8 else (0.0, 0.0)
            stages.append((f[0], f[1], f[2], comm[0], comm[1]))
    if len(stages) != pp:
        sys.exit("tp_pp_sweep: expected %d stage rows, got %d:\n%s" %
                 (pp, len(stages), out))
    return stages


def simulate(args, pp, tf, tb, tw):
    if pp == 1:
        # One rank: no pipeline, the microbatches back to back.
        return args.microbatches * (tf + tb + tw), 0.0
    out = run([os.path.join(args.build, "bin", "pipeforge-sched"),
               "--schedule", args.schedule, "--ranks", str(pp),
               "--microbatches", str(args.microbatches), "--tf", repr(tf),
               "--tb", repr(tb), "--tw", repr(tw), "--format", "json"])
    s = json.loads(out)["summary"]
    return s["makespan"], s["bubble_rate"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--schedule", default="zb-h1")
    ap.add_argument("--microbatches", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--microbatch-size", type=int, default=1)
    ap.add_argument("--tflops", type=float, default=989.0)
    ap.add_argument("--mfu", type=float, default=0.5)
    ap.add_argument("--tp-gbps", type=float, default=450.0)
    args = ap.parse_args()

    flops_per_s = args.tflops * 1e12 * args.mfu
    bytes_per_s = args.tp_gbps * 1e9
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "gpt2-medium.json")
        with open(cfg, "w") as f:
            json.dump(GPT2_MEDIUM, f)
        print("GPT-2 medium-like (24 x 1024, 16 heads, vocab 50304), seq %d, "
              "microbatch %d, %d microbatches, %s; %.0f TFLOPs x %.2f, TP "
              "link %.0f GB/s" % (args.seq_len, args.microbatch_size,
                                   args.microbatches, args.schedule,
                                   args.tflops, args.mfu, args.tp_gbps))
        print("%3s %3s %9s %9s %9s %11s %9s %8s %10s" %
              ("tp", "pp", "F_ms", "B_ms", "W_ms", "tp_comm_ms", "step_ms",
               "bubble", "tp_share"))
        rows = []
        for tp in (1, 2, 4, 8):
            pp = 8 // tp
            st = stage_costs(args, cfg, tp, pp)
            # The slowest stage sets the pace.
            def t(s):
                return ((s[0] + s[1] + s[2]) / flops_per_s +
                        (s[3] + s[4]) / bytes_per_s)
            s = max(st, key=t)
            cf, cb = s[3] / bytes_per_s, s[4] / bytes_per_s
            tf = s[0] / flops_per_s + cf
            tb = s[1] / flops_per_s + cb
            tw = s[2] / flops_per_s
            step, bubble = simulate(args, pp, tf, tb, tw)
            share = (cf + cb) / (tf + tb + tw)
            rows.append((tp, pp, step))
            print("%3d %3d %9.3f %9.3f %9.3f %11.3f %9.1f %8.3f %9.1f%%" %
                  (tp, pp, tf * 1e3, tb * 1e3, tw * 1e3, (cf + cb) * 1e3,
                   step * 1e3, bubble, 100 * share))
        best = min(rows, key=lambda r: r[2])
        print("fastest: tp %d x pp %d (%.1f ms per step)" %
              (best[0], best[1], best[2] * 1e3))


if __name__ == "__main__":
    main()
