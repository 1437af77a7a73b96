"""PipeForge's schedule CSVs in PyTorch's own pipeline runtime.

For every schedule PyTorch can hold (one copy of the stages), pipeforge-sched
writes the CSV in PyTorch's dialect (--csv-dialect pytorch) in both of
PyTorch's forms, compute_only and compute_comms; four gloo processes on the
CPU load it with torch.distributed.pipelining's
_PipelineScheduleRuntime._load_csv and train a float64 MLP of one
Linear+Tanh per stage for two SGD steps. The gradients of both steps and the
weights after them must equal a single process's (the mean of the
microbatches' MSE losses) within 1e-10 relative; so must each schedule's
compute_comms form under --zero 3, whose UNSHARD/RESHARD cells are the
schedule's own gathers (no-ops for PyTorch's stages without FSDP, as in
its own lowering). Then PyTorch's own
compute_comms dumps (its lowering of PipeForge's compute_only CSVs, and its
generators ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble,
ScheduleZBVZeroBubble, ScheduleDualPipeV) import with pipeforge-sched
--import-csv and verify.

    pytorch_runtime.py PFTOOLS_DIR WORK_DIR
"""
import csv
import os
import subprocess
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

P = 4          # ranks
M = 8          # microbatches
D = 6          # width of the MLP
ROWS = 2       # rows per microbatch
LR = 0.1
STEPS = 2
TOL = 1e-10

SCHEDULES = [
    ("1f1b", []),
    ("interleaved", ["--chunks", "2"]),
    ("zb-h1", []),
    ("zb-h2", []),
    ("zbv", []),
    ("dualpipev", []),
    ("auto", ["--no-ilp", "--search-moves", "2000"]),
]
FORMATS = ["compute_only", "compute_comms"]
GENERATORS = ["ScheduleInterleaved1F1B", "ScheduleInterleavedZeroBubble",
              "ScheduleZBVZeroBubble", "ScheduleDualPipeV"]


def stage_layout(path):
    """(number of stages, stage -> rank) from the compute cells of a CSV."""
    from torch.distributed.pipelining.schedules import _Action
    home = {}
    with open(path, newline="") as f:
        for rank, row in enumerate(csv.reader(f)):
            for text in row:
                a = _Action.from_str(text)
                if a is None:
                    continue
                for part in a.sub_actions or (a,):
                    if part.is_compute_op:
                        home.setdefault(part.stage_index, rank)
    return len(home), home


def build_model(n):
    torch.manual_seed(1234)
    return [torch.nn.Sequential(torch.nn.Linear(D, D, dtype=torch.float64),
                                torch.nn.Tanh()) for _ in range(n)]


def data():
    g = torch.Generator().manual_seed(99)
    x = torch.randn(M * ROWS, D, dtype=torch.float64, generator=g)
    y = torch.randn(M * ROWS, D, dtype=torch.float64, generator=g)
    return x, y


def sgd(params):
    with torch.no_grad():
        for p in params:
            p -= LR * p.grad


def reference(n):
    """Gradients of each step and final weights, one process."""
    layers = build_model(n)
    x, y = data()
    grads = []
    for _ in range(STEPS):
        for l in layers:
            l.zero_grad()
        loss = 0
        for xm, ym in zip(x.chunk(M), y.chunk(M)):
            h = xm
            for l in layers:
                h = l(h)
            loss = loss + torch.nn.functional.mse_loss(h, ym)
        (loss / M).backward()
        grads.append([[p.grad.clone() for p in l.parameters()] for l in layers])
        sgd([p for l in layers for p in l.parameters()])
    return grads, [[p.detach().clone() for p in l.parameters()] for l in layers]


def worker(rank, cases, work):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + work + "/store",
                            rank=rank, world_size=P,
                            timeout=timedelta(seconds=60))
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining import schedules as S
    cpu = torch.device("cpu")
    loss_fn = torch.nn.functional.mse_loss
    for name, path, fmt in cases:
        n, home = stage_layout(path)
        layers = build_model(n)
        mine = sorted(s for s, r in home.items() if r == rank)
        stages = [PipelineStage(layers[s], s, n, cpu) for s in mine]
        sched = S._PipelineScheduleRuntime(stages, n_microbatches=M,
                                           loss_fn=loss_fn)
        sched._load_csv(path, format=fmt)
        if fmt == "compute_only" and rank == 0:
            # PyTorch's own lowering of PipeForge's order, as its dump.
            sched._dump_csv(f"{work}/{name}.torch-comms.csv",
                            format="compute_comms")
        x, y = data()
        out = {"grads": [], "weights": None}
        for _ in range(STEPS):
            for s in mine:
                layers[s].zero_grad()
            args = (x,) if 0 in mine else ()
            target = y if n - 1 in mine else None
            sched.step(*args, target=target)
            out["grads"].append({s: [p.grad.clone()
                                     for p in layers[s].parameters()]
                                 for s in mine})
            sgd([p for s in mine for p in layers[s].parameters()])
        out["weights"] = {s: [p.detach().clone()
                              for p in layers[s].parameters()]
                          for s in mine}
        torch.save(out, f"{work}/{name}.{fmt}.r{rank}.pt")
        dist.barrier()
    # PipeForge's own dialect (no waits for the sends, no REDUCE_GRAD) is
    # not PyTorch's compute_comms form: its loader refuses it.
    if rank == 0:
        path = f"{work}/1f1b.pipeforge.csv"
        n, home = stage_layout(path)
        layers = build_model(n)
        sched = S._PipelineScheduleRuntime(
            [PipelineStage(layers[0], 0, n, cpu)], n_microbatches=M,
            loss_fn=loss_fn)
        try:
            sched._load_csv(path, format="compute_comms")
            why = "accepted"
        except ValueError as e:
            why = str(e)
        with open(f"{work}/pipeforge-dialect.txt", "w") as f:
            f.write(why)
    # PyTorch's generators, dumped in their compute_comms form.
    for gen in GENERATORS:
        v_shape = gen in ("ScheduleZBVZeroBubble", "ScheduleDualPipeV")
        mine = [rank, 2 * P - 1 - rank] if v_shape else [rank, rank + P]
        layers = build_model(2 * P)
        stages = [PipelineStage(layers[s], s, 2 * P, cpu) for s in mine]
        sched = getattr(S, gen)(stages, n_microbatches=M,
                                loss_fn=loss_fn)
        if rank == 0:
            sched._dump_csv(f"{work}/{gen}.csv", format="compute_comms")
    dist.barrier()
    dist.destroy_process_group()


def close(a, b):
    return (a - b).abs().max().item() <= TOL * max(1.0, b.abs().max().item())


def main():
    tools, work = sys.argv[1], sys.argv[2]
    sched = os.path.join(tools, "pipeforge-sched")
    os.makedirs(work, exist_ok=True)
    t0 = time.time()
    cases = []
    for kind, extra in SCHEDULES:
        for fmt in FORMATS:
            name = f"{kind}"
            path = f"{work}/{kind}.{fmt}.csv"
            cmd = [sched, "--schedule", kind, "--ranks", str(P),
                   "--microbatches", str(M), *extra, "--format", "csv",
                   "--csv-dialect", "pytorch", "-o", path]
            if fmt == "compute_only":
                cmd.append("--compute-only")
            subprocess.run(cmd, check=True)
            cases.append((name, path, fmt))
        # ZeRO-3: the schedule's own gathers where they stand.
        path = f"{work}/{kind}-zero3.compute_comms.csv"
        subprocess.run([sched, "--schedule", kind, "--ranks", str(P),
                        "--microbatches", str(M), *extra, "--zero", "3",
                        "--format", "csv", "--csv-dialect", "pytorch", "-o",
                        path], check=True)
        cases.append((f"{kind}-zero3", path, "compute_comms"))
    subprocess.run([sched, "--schedule", "1f1b", "--ranks", str(P),
                    "--microbatches", str(M), "--format", "csv", "-o",
                    f"{work}/1f1b.pipeforge.csv"], check=True)
    mp.spawn(worker, args=(cases, work), nprocs=P, join=True)
    refs = {}
    for name, path, fmt in cases:
        n, home = stage_layout(path)
        if n not in refs:
            refs[n] = reference(n)
        grads, weights = refs[n]
        ok = True
        for r in range(P):
            out = torch.load(f"{work}/{name}.{fmt}.r{r}.pt")
            for step in range(STEPS):
                for s, gs in out["grads"][step].items():
                    ok &= all(close(a, b) for a, b in zip(gs, grads[step][s]))
            for s, ws in out["weights"].items():
                ok &= all(close(a, b) for a, b in zip(ws, weights[s]))
        print(f"{name} {fmt}: {n} stages, {STEPS} steps in PyTorch's runtime "
              f"{'OK' if ok else 'DIFFER'}: gradients and weights equal one "
              "process")
    with open(f"{work}/pipeforge-dialect.txt") as f:
        print(f"PipeForge's dialect as compute_comms: {f.read()}")
    from torch.distributed.pipelining.schedules import _Action
    try:
        _Action.from_str("GRADREDUCE_r1")
        print("GRADREDUCE_r1: parsed")
    except RuntimeError as e:
        print(f"GRADREDUCE_r1: {str(e).split(',')[0]}")
    # PyTorch's compute_comms dumps import and verify.
    dumps = [(f"{kind}.torch-comms", f"{work}/{kind}.torch-comms.csv")
             for kind, _ in SCHEDULES]
    dumps += [(gen, f"{work}/{gen}.csv") for gen in GENERATORS]
    for label, path in dumps:
        r = subprocess.run([sched, "--import-csv", path], capture_output=True,
                           text=True)
        head = r.stdout.splitlines()[0] if r.stdout else ""
        print(f"import {label}: rc {r.returncode}: {head}"
              + (f" [{r.stderr.strip()}]" if r.returncode else ""))
    print(f"done in {time.time() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
