#!/usr/bin/env python3
"""Zero-bubble schedules with activation recomputation, on CPU ranks.

Users of other frameworks have reported a zero-bubble schedule with
recomputation an order of magnitude slower than 1F1B with recomputation
(the weight pass re-ran the forward). This measures PipeForge's 1F1B,
ZB-H1 and ZB-V with --recompute=none and =full on the same model, ranks
and data under mpirun, alternating the configurations over several rounds,
and prints the median tokens/s of each (steps after the first), its range,
and the ratio to 1F1B with the same recomputation.

    python3 benchmarks/zb_recompute.py [--build build] [--rounds 3] [--steps 5]
        [--ranks 2] [--schedules 1f1b,zb-h1,zbv]

The model: a Llama of hidden 256, 8 layers, 8 heads (2 KV), sequence 128,
microbatch 2, 8 microbatches. Python 3 standard library only; needs mpirun.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile

MODEL = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 8, "hidden_size": 256, "num_attention_heads": 8,
    "num_key_value_heads": 2, "intermediate_size": 688, "vocab_size": 256,
    "max_position_embeddings": 128, "rope_theta": 10000.0,
    "rms_norm_eps": 1e-06, "initializer_range": 0.02,
    "tie_word_embeddings": False,
}
STEP = re.compile(r"^step (\d+) loss \S+ tokens/s (\d+)", re.M)


def run(cmd, env=None):
    return subprocess.run(cmd, check=True, capture_output=True, text=True,
                          env=env).stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--schedules", default="1f1b,zb-h1,zbv")
    a = ap.parse_args()
    bin_ = os.path.join(a.build, "bin")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    configs = [(s, r) for r in ("none", "full")
               for s in a.schedules.split(",")]
    rates = {c: [] for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "llama-med.json")
        with open(cfg, "w") as f:
            json.dump(MODEL, f)
        for s, r in configs:
            run([os.path.join(bin_, "pipeforge-compile"), cfg, "--schedule",
                 s, "--ranks", str(a.ranks), "--microbatches", "8",
                 "--seq-len", "128", "--microbatch-size", "2",
                 f"--recompute={r}", "-o", os.path.join(tmp, f"{s}-{r}.pfp")])
        for _ in range(a.rounds):
            for s, r in configs:
                out = run(["mpirun", "-np", str(a.ranks),
                           os.path.join(bin_, "pipeforge-run"),
                           os.path.join(tmp, f"{s}-{r}.pfp"), "--steps",
                           str(a.steps)], env)
                rates[(s, r)] += [int(t) for n, t in STEP.findall(out)
                                  if int(n) > 1]
    print("| schedule | recompute | tokens/s (median) | min-max | vs 1F1B, same recompute |")
    print("|---|---|---|---|---|")
    for s, r in configs:
        med = statistics.median(rates[(s, r)])
        base = statistics.median(rates[(a.schedules.split(",")[0], r)])
        print(f"| {s} | {r} | {med:.0f} | {min(rates[(s, r)])}-"
              f"{max(rates[(s, r)])} | {med / base:.2f}x |")


if __name__ == "__main__":
    main()
