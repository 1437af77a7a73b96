#!/usr/bin/env python3
"""PipeForge's AdamW, learning-rate schedule, weight-decay rule and clipping
against PyTorch (an independent reference) on the same parameters and
gradients.

    adamw_vs_torch.py TMPDIR CASE

writes TMPDIR/CASE.in.json, runs pipeforge-adamw-replay on it, runs
torch.optim.AdamW (two parameter groups: decayed and not) with
torch.optim.lr_scheduler.LambdaLR and torch.nn.utils.clip_grad_norm_ on the
same numbers, and compares the learning rate of every step and the final
parameters. The schedule's factor is written here from docs/optimizer.md,
not taken from PipeForge. Prints "CASE: ok ..." or exits 1.
"""
import json
import math
import subprocess
import sys

import torch

CASES = {
    # name: (weight_decay, max_grad_norm, decay_all, kind, warmup, decay_steps, min_lr)
    "constant": (0.0, 0.0, False, "constant", 0, 12, 0.0),
    "cosine-wd-clip": (0.1, 1.0, False, "cosine", 3, 12, 1e-4),
    "linear-warmup": (0.05, 0.0, False, "linear", 4, 10, 2e-4),
    "decay-all": (0.2, 0.5, True, "cosine", 0, 8, 0.0),
}
STEPS = 12
LR, BETAS, EPS = 1e-2, (0.9, 0.95), 1e-8


def factor(i, kind, warmup, decay_steps, min_ratio):
    """LambdaLR's factor for scheduler step i (0 before the first step)."""
    if i < warmup:
        return (i + 1) / warmup
    if kind == "constant":
        return 1.0
    if i >= decay_steps:
        return min_ratio
    p = (i - warmup) / (decay_steps - warmup)
    f = 0.5 * (1 + math.cos(math.pi * p)) if kind == "cosine" else 1 - p
    return min_ratio + (1 - min_ratio) * f


def main():
    tmp, case = sys.argv[1], sys.argv[2]
    wd, clip, decay_all, kind, warmup, decay_steps, min_lr = CASES[case]
    gen = torch.Generator().manual_seed(sum(map(ord, case)))
    shapes = {"embed.weight": [16, 8], "fc.weight": [8, 8], "fc.bias": [8],
              "ln.weight": [8], "head.weight": [16, 8]}
    params = {n: torch.randn(s, generator=gen) for n, s in shapes.items()}
    grads = [{n: torch.randn(s, generator=gen) * (0.5 + k % 3)
              for n, s in shapes.items()} for k in range(STEPS)]

    spec = {
        "lr": LR, "beta1": BETAS[0], "beta2": BETAS[1], "eps": EPS,
        "weight_decay": wd, "max_grad_norm": clip, "decay_all": decay_all,
        "schedule": {"kind": kind, "warmup": warmup,
                     "decay_steps": decay_steps, "min_lr": min_lr},
        "params": [{"name": n, "shape": shapes[n],
                    "data": params[n].flatten().tolist()} for n in shapes],
        "grads": [[g[n].flatten().tolist() for n in shapes] for g in grads],
    }
    inp, out = f"{tmp}/{case}.in.json", f"{tmp}/{case}.out.json"
    with open(inp, "w") as f:
        json.dump(spec, f)
    subprocess.run(["pipeforge-adamw-replay", inp, "-o", out], check=True)
    with open(out) as f:
        ours = json.load(f)

    tensors = {n: params[n].clone().requires_grad_(True) for n in shapes}
    decayed = [n for n in shapes if decay_all or len(shapes[n]) >= 2]
    groups = [{"params": [tensors[n] for n in decayed], "weight_decay": wd},
              {"params": [tensors[n] for n in shapes if n not in decayed],
               "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: factor(i, kind, warmup, decay_steps, min_lr / LR))
    lrs = []
    for g in grads:
        lrs.append(opt.param_groups[0]["lr"])
        for n in shapes:
            tensors[n].grad = g[n].clone()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(list(tensors.values()), clip)
        opt.step()
        sched.step()

    ok = True
    lr_err = max(abs(a - b) for a, b in zip(lrs, ours["lrs"]))
    if lr_err > 1e-12 * LR:
        print(f"{case}: learning rates differ by {lr_err:g}: torch {lrs} "
              f"ours {ours['lrs']}")
        ok = False
    if ours["decay"] != [n in decayed for n in shapes]:
        print(f"{case}: decay flags differ: {ours['decay']}")
        ok = False
    worst = 0.0
    for p in ours["params"]:
        ref = tensors[p["name"]].detach().flatten()
        got = torch.tensor(p["data"])
        err = ((got - ref).abs() / (ref.abs() + 1e-3)).max().item()
        worst = max(worst, err)
    if worst > 2e-5:
        print(f"{case}: parameters differ (max relative error {worst:g})")
        ok = False
    moved = max((tensors[n].detach() - params[n]).abs().max().item()
                for n in shapes)
    if ok:
        print(f"{case}: ok: {STEPS} steps, lr {lrs[0]:.6g} .. {lrs[-1]:.6g}, "
              f"max relative parameter error {worst:.2g}, moved {moved:.3g}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
