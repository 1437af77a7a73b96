#!/usr/bin/env python3
"""PipeForge against PyTorch's own pipeline runtime, side by side.

The same model (--model gpt, llama, moe: benchmarks/peer_models.py), the
same initial weights (`pipeforge-run --steps 0 --dump-weights`), the same
token windows (a PFTOK file, sampled as rt::TokenFile does) and AdamW with
the same hyper-parameters (lr 1e-3, betas 0.9/0.999, eps 1e-8, no weight
decay, no clipping) are trained by

  pipeforge   mpirun -np P pipeforge-run PROG --data TOKENS --trace T
  pytorch     torchrun --nproc-per-node P (this file, --worker): the stages
              PipeForge's partition chose, as torch.distributed.pipelining
              PipelineStage modules on gloo, driven by the matching
              schedule class

for every schedule both have (gpipe, 1f1b, interleaved, zbv, dualpipev),
plus the single-process baseline (PyTorch eager in one process, gradient
accumulation over the microbatches, against PipeForge's one-rank program).

PyTorch runs at its fastest CPU settings: torch.optim.AdamW(fused=True),
schedule.step(..., return_outputs=False) (no gathering of the logits on
the last stage), F.scaled_dot_product_attention, and for grouped-query
attention the faster of enable_gqa=True and repeated kv heads (timed at
start-up, printed), zero_grad(set_to_none=True). One thread per rank on
both sides (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, torch.set_num_threads(1)).

Timing: each (schedule) is launched --repeat times per side, as pairs
whose order alternates (PipeForge first, then PyTorch first, ...); a
launch's number is the median tokens/s over its --steps timed steps (after
--warmup). Around every launch the script reads /proc/stat (all CPU time
of the machine) and its children's CPU time (getrusage RUSAGE_CHILDREN);
the difference over the launch's wall time is the CPU other processes
took, in cores. Every pair starts after up to --quiet-wait seconds of
waiting for a quiet machine (1 s samples); a pair where either launch saw
more than --max-other cores is redone, at most --retries times per pair
and --max-redos times per model; the least disturbed try is kept and the table shows its
disturbance (the largest over the kept pairs) and the redos. The table gives the median and min-max
over the kept launches of each side, and the median and min-max of the
per-pair ratios PipeForge / PyTorch, plus the first and last loss of each
side (rank 0's printed step loss; PyTorch: the mean of the microbatch
losses). With dropout 0 both compute the same function, so the losses
agree to ~1e-4 relative (summation order only; MoE: also a routing choice
that flips on a near-tie); rows where they do not are marked.

Roofline and where the time goes: the script measures the machine's
single-thread sgemm rate with the GEMM library each side uses (PyTorch:
torch.mm with one thread, MKL in the PyPI wheel; PipeForge: the library
pipeforge-run links, oneDNN's dnnl_sgemm else cblas_sgemm, called through
ctypes), over the model's forward GEMM shapes (y = x W^T, FLOP-weighted).
Model FLOPs per token = 6 x matmul parameters used + 6 L s h (causal
attention; peer_models.flops_per_token). Per side and schedule, the step's
core-seconds (ranks x step time) split into
  at sgemm rate   model FLOPs / sgemm rate: the roofline fraction
  other compute   the rest of the compute actions (non-GEMM operators,
                  GEMMs below the rate, per-op overhead); PipeForge's split
                  into its GEMMs' time beyond the sgemm rate and the rest,
                  from its trace's per-step GEMM time (args.gemm_us)
  optimizer       PipeForge: step time after its last action (gradient
                  reductions + AdamW); PyTorch: optimizer.step()
  idle            bubble and communication waits (the rest)
A last table bounds what removing PipeForge's operators can give: its ratio
divided by (1 - the non-GEMM share of its compute), i.e. its GEMMs at the
rate measured in the step and everything else (bubbles, waits, optimizer)
shrinking with the compute.
PipeForge's compute is its trace's compute events less their receive waits
(args.wait_us); PyTorch's the wall time of PipelineStage.forward_one_chunk,
backward_one_chunk, backward_weight_one_chunk and the loss function (the
forward and backward in one process).

PyTorch is a benchmark dependency only (never needed by the build or the
tests): `bash scripts/setup.sh --bench` makes a virtual environment at
$PIPEFORGE_TORCH_VENV (default ~/.cache/pipeforge/torch-venv, the torch
tests' own) with torch from PyPI. This script itself runs under any
python3; it finds torch's interpreter by --python, else
$PIPEFORGE_TORCH_PYTHON, else $PIPEFORGE_TORCH_VENV/bin/python.

  python3 benchmarks/peer_pytorch.py [--model gpt,llama,moe|all]
      [--size small|medium] [--ranks 2]
      [--schedules none,gpipe,1f1b,interleaved,zbv,dualpipev]
      [--steps N] [--warmup K] [--repeat R] [--max-other C] [--retries N]
      [--max-redos N] [--quiet-wait S] [--python PY] [--build build] [--markdown] [--keep DIR]
"""
import argparse
import json
import math
import os
import random
import resource
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_models as pm  # noqa: E402  (standard library only)

# Timed steps, warm-up steps and launches per side per size (small: about
# 10 minutes per model on 2 shared cores with every schedule).
RUNS = {"small": dict(steps=5, warmup=1, repeat=3),
        "medium": dict(steps=5, warmup=1, repeat=3)}
SCHEDULES = ["none", "gpipe", "1f1b", "interleaved", "zbv", "dualpipev"]
TORCH_CLASS = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B",
               "interleaved": "ScheduleInterleaved1F1B",
               "zbv": "ScheduleZBVZeroBubble", "dualpipev": "ScheduleDualPipeV"}
M64 = (1 << 64) - 1


# --- data: the PFTOK file and rt::TokenFile's window sampling --------------

def fnv1a64(data, h=0xcbf29ce484222325):
    for byte in data:
        h = ((h ^ byte) * 0x100000001b3) & M64
    return h


def splitmix(x):
    x = (x + 0x9e3779b97f4a7c15) & M64
    x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & M64
    x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & M64
    return x ^ (x >> 31)


def sample_key(seed, step, mb, row):
    h = splitmix(seed ^ 0x7066646174617631)  # "pfdatav1"
    h = splitmix(h ^ step)
    h = splitmix(h ^ mb)
    return splitmix(h ^ row)


def write_token_file(path, n, vocab, seed=7):
    rng = random.Random(seed)
    toks = [rng.randrange(vocab) for _ in range(n)]
    body = b"PFTOK\0\0\0" + struct.pack("<IIQQ", 1, 2, n, vocab)
    body += struct.pack(f"<{n}H", *toks)
    with open(path, "wb") as f:
        f.write(body + struct.pack("<Q", fnv1a64(body)))


def read_tokens(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack_from("<Q", b, 16)[0]
    return list(struct.unpack_from(f"<{n}H", b, 32))


def batch(toks, seed, step, m, b, s):
    """tokens, targets: m*b rows of s (microbatch-major), as TokenFile."""
    windows = len(toks) - s
    xs, ys = [], []
    for mb in range(m):
        for row in range(b):
            off = sample_key(seed, step, mb, row) % windows
            xs.append(toks[off:off + s])
            ys.append(toks[off + 1:off + s + 1])
    return xs, ys


# --- the PyTorch side (runs under torch's interpreter) ---------------------

def read_weights(path):
    out = {}
    with open(path, "rb") as f:
        assert f.readline() == b"PFWEIGHTS1\n", "not a PipeForge weights file"
        while True:
            line = f.readline()
            if not line:
                break
            name, n = line.split()
            out[name.decode()] = f.read(4 * int(n))
    return out


class Clock:
    """Accumulated wall time of the compute calls it wraps."""

    def __init__(self):
        self.t = 0.0

    def wrap(self, fn):
        def timed(*args, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                self.t += time.perf_counter() - t0
        return timed


def worker(a):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    plan = json.load(open(a.plan))
    cfg, m, b, s = plan["cfg"], plan["microbatches"], plan["mbs"], plan["seq"]
    weights = read_weights(plan["weights"])
    toks = read_tokens(plan["tokens"])
    Stage = pm.build_stage_class(torch, cfg, plan.get("gqa", "enable_gqa"))
    V = cfg["vocab"]
    F = torch.nn.functional
    clock = Clock()

    @clock.wrap
    def loss_fn(logits, target):
        return F.cross_entropy(logits.reshape(-1, V), target.reshape(-1))

    sched = plan["schedule"]
    stages = plan["stages"]  # [{index, layers, first, last, rank}]
    if sched == "none":
        rank = 0
        mine = stages
        mods = [Stage(st["layers"], st["first"], st["last"]) for st in stages]
        for mod in mods:
            pm.load_pf_weights(torch, mod, weights)
        model = torch.nn.Sequential(*mods)
        params = list(model.parameters())
    else:
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        from torch.distributed import pipelining as pp
        mine = [st for st in stages if st["rank"] == rank]
        mods, pstages = [], []
        for st in mine:
            mod = Stage(st["layers"], st["first"], st["last"])
            pm.load_pf_weights(torch, mod, weights)
            mods.append(mod)
            ps = pp.PipelineStage(mod, st["index"], len(stages), torch.device("cpu"))
            for meth in ("forward_one_chunk", "backward_one_chunk",
                         "backward_weight_one_chunk"):
                if hasattr(ps, meth):
                    setattr(ps, meth, clock.wrap(getattr(ps, meth)))
            pstages.append(ps)
        cls = getattr(pp, TORCH_CLASS[sched])
        if len(pstages) == 1:
            runner = cls(pstages[0], n_microbatches=m, loss_fn=loss_fn)
        else:
            runner = cls(pstages, n_microbatches=m, loss_fn=loss_fn)
        params = [p for mod in mods for p in mod.parameters()]
    # PyTorch's fastest AdamW on CPU: one fused kernel over all tensors.
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.0, fused=True)
    holds_first = any(st["first"] for st in mine)
    holds_last = any(st["last"] for st in mine)
    losses, times, compute, optim = [], [], [], []
    for step in range(plan["steps"]):
        xs, ys = batch(toks, plan["seed"], step, m, b, s)
        x, y = torch.tensor(xs, dtype=torch.long), torch.tensor(ys, dtype=torch.long)
        if sched != "none":
            dist.barrier()
        clock.t = 0.0
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if sched == "none":
            tot = 0.0
            tc = time.perf_counter()
            for i in range(m):
                l = loss_fn(model(x[i * b:(i + 1) * b]), y[i * b:(i + 1) * b])
                (l / m).backward()
                tot += l.item()
            clock.t = time.perf_counter() - tc
            step_loss = tot / m
        else:
            mb_losses = []
            args = (x,) if holds_first else ()
            kw = dict(target=y, losses=mb_losses) if holds_last else {}
            runner.step(*args, return_outputs=False, **kw)
            step_loss = (sum(float(l) for l in mb_losses) / m) if holds_last else None
        t1 = time.perf_counter()
        opt.step()
        t2 = time.perf_counter()
        if sched != "none":
            dist.barrier()
        times.append(time.perf_counter() - t0)
        compute.append(clock.t)
        optim.append(t2 - t1)
        losses.append(step_loss)
    # One write(2) of the whole line: the ranks share torchrun's stdout, and
    # print() under PYTHONUNBUFFERED writes the line and its newline apart.
    sys.stdout.flush()
    os.write(1, ("RESULT " + json.dumps({"rank": rank, "last": holds_last,
                                         "losses": losses, "times": times,
                                         "compute": compute, "optim": optim})
                 + "\n").encode())
    if sched != "none":
        dist.destroy_process_group()


def sgemm_rate(fn, shapes, min_time=0.1, rounds=3):
    """FLOP-weighted single-thread rate over shapes [(M, N, K, weight)]:
    fn(M, N, K) returns a callable doing y[M, N] = x[M, K] W[N, K]^T; each
    shape's rate is the best of `rounds` timings of at least min_time.
    Returns (total GFLOP/s, [GFLOP/s per shape])."""
    per, t_total, w_total = [], 0.0, 0.0
    for M, N, K, w in shapes:
        f = fn(M, N, K)
        f()
        rate = 0.0
        for _ in range(rounds):
            n, t0 = 0, time.perf_counter()
            while True:
                f()
                n += 1
                dt = time.perf_counter() - t0
                if dt >= min_time and n >= 3:
                    break
            rate = max(rate, 2.0 * M * N * K * n / dt / 1e9)
        per.append(rate)
        t_total += w / rate
        w_total += w
    return w_total / t_total, per


def probe(a):
    """Start-up measurements under torch's interpreter: the attention mode
    and the sgemm rate of each side's GEMM library. Prints one JSON line."""
    import ctypes
    import numpy as np
    import torch
    torch.set_num_threads(1)
    plan = json.load(open(a.probe))
    cfg = plan["cfg"]
    out = {}
    if cfg["family"] != "gpt" and cfg["n_kv_head"] != cfg["n_head"]:
        t = pm.attention_probe(torch, cfg)
        out["gqa_times"] = t
        out["gqa"] = min(t, key=t.get)
    shapes = [tuple(x) for x in plan["shapes"]]

    def torch_mm(M, N, K):
        x, w = torch.randn(M, K), torch.randn(N, K)
        y = torch.empty(M, N)
        return lambda: torch.mm(x, w.t(), out=y)
    out["pt_rate"], out["pt_shapes"] = sgemm_rate(torch_mm, shapes)

    lib_path, kind = plan["pf_lib"], plan["pf_lib_kind"]
    if lib_path:
        lib = ctypes.CDLL(lib_path)
        i64, f32, vp = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
        if kind == "dnnl":
            g = lib.dnnl_sgemm
            g.argtypes = [ctypes.c_char, ctypes.c_char, i64, i64, i64, f32, vp,
                          i64, vp, i64, f32, vp, i64]
            g.restype = ctypes.c_int
        else:
            g = lib.cblas_sgemm
            ci = ctypes.c_int
            g.argtypes = [ci, ci, ci, ci, ci, ci, f32, vp, ci, vp, ci, f32, vp, ci]
            g.restype = None

        def pf_mm(M, N, K):
            rng = np.random.default_rng(0)
            x = rng.standard_normal((M, K), dtype=np.float32)
            w = rng.standard_normal((N, K), dtype=np.float32)
            y = np.empty((M, N), dtype=np.float32)
            px, pw, py = x.ctypes.data, w.ctypes.data, y.ctypes.data
            keep = (x, w, y)  # the closures hold the arrays alive
            if kind == "dnnl":
                return lambda k=keep: g(b"N", b"T", M, N, K, 1.0, px, K, pw, K, 0.0, py, N)
            # CblasRowMajor 101, CblasNoTrans 111, CblasTrans 112
            return lambda k=keep: g(101, 111, 112, M, N, K, 1.0, px, K, pw, K, 0.0, py, N)
        out["pf_rate"], out["pf_shapes"] = sgemm_rate(pf_mm, shapes)
    print("PROBE " + json.dumps(out), flush=True)


# --- the driver -------------------------------------------------------------

CLK = os.sysconf("SC_CLK_TCK")


def machine_busy_s():
    """CPU seconds the whole machine has spent busy (/proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (v + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / CLK


def own_s():
    """CPU seconds of this process and its reaped descendants."""
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    s = resource.getrusage(resource.RUSAGE_SELF)
    return c.ru_utime + c.ru_stime + s.ru_utime + s.ru_stime


class Meter:
    """The CPU other processes took while a launch ran, in cores."""

    def __enter__(self):
        self.t, self.busy, self.own = time.time(), machine_busy_s(), own_s()
        return self

    def __exit__(self, *exc):
        self.wall = time.time() - self.t
        other = (machine_busy_s() - self.busy) - (own_s() - self.own)
        self.other = max(0.0, other) / max(self.wall, 1e-3)
        return False


def wait_quiet(limit_s, max_other):
    """Wait (1 s samples, at most limit_s) until other processes use less
    than max_other cores; returns the last sample."""
    t_end, other = time.time() + limit_s, 0.0
    while True:
        with Meter() as mt:
            time.sleep(1.0)
        other = mt.other
        if other <= max_other or time.time() >= t_end:
            return other


def run(cmd, env, timeout=3600):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])}... failed ({p.returncode}):\n"
                           + (p.stderr or p.stdout)[-3000:])
    return p.stdout


def pf_stages(compile_bin, prog, env, cfg):
    """Stage index -> layers, first/last, rank, from the program listing."""
    out = run([compile_bin, "--check", "--dump", prog], env)
    stages = {}
    blank = lambda st: {"index": st, "layers": [], "first": False, "last": False, "rank": 0}
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("#") and " -> stage " in line:
            name = line.split()[1]
            st = int(line.split(" -> stage ")[1].split()[0])
            d = stages.setdefault(st, blank(st))
            layer = pm.layer_of(cfg, name)
            if name == pm.table_name(cfg):
                d["first"] = True
            elif name == "lm_head.weight":
                d["last"] = True
            elif layer is not None:
                d["layers"].append(layer)
        elif line.startswith("stage ") and " on rank " in line:
            st = int(line.split()[1])
            stages.setdefault(st, blank(st))
            stages[st]["rank"] = int(line.split(" on rank ")[1].split()[0])
    return [stages[k] for k in sorted(stages)]


def pf_trace_split(path, warmup, step_times):
    """Per timed step, summed over ranks: (step seconds, ranks, compute,
    after-actions, idle, GEMM) seconds from pipeforge-run's trace (GEMM:
    the step events' gemm_us, None where the backend did not time them),
    and the seconds per op kind (ops_us) as a dict.
    step_times: rank 0's step seconds (from tokens/s), 1-based steps ->
    index k-1."""
    with open(path) as f:
        t = json.load(f)
    ev = t["traceEvents"] if isinstance(t, dict) else t
    steps, comp = {}, {}
    for e in ev:
        if e.get("ph") != "X":
            continue
        if e.get("tid") == 2 and e.get("name", "").startswith("step "):
            a_ = e.get("args") or {}
            steps[(e["pid"], int(e["name"].split()[1]))] = (
                e["ts"], e["dur"], a_.get("gemm_us"), a_.get("ops_us") or {})
        elif e.get("tid") == 0:
            comp.setdefault(e["pid"], []).append(e)
    out = []
    for k in range(warmup + 1, len(step_times) + 1):
        T = step_times[k - 1]
        busy = post = idle = 0.0
        gemm, ops = 0.0, {}
        pids = [p for (p, kk) in steps if kk == k]
        for p in pids:
            ts, dur, g_us, o_us = steps[(p, k)]
            gemm = None if gemm is None or g_us is None else gemm + g_us * 1e-6
            for name, us in o_us.items():
                ops[name] = ops.get(name, 0.0) + us * 1e-6
            end_kept, b = -1.0, 0.0
            for e in sorted(comp.get(p, []), key=lambda e: e["ts"]):
                if e["ts"] < ts or e["ts"] > ts + dur or e["ts"] < end_kept:
                    continue  # other step, or nested in a fused pair
                end_kept = e["ts"] + e["dur"]
                b += e["dur"] - (e.get("args") or {}).get("wait_us", 0.0)
            busy += b * 1e-6
            idle += (dur - b) * 1e-6
            post += max(0.0, T - dur * 1e-6)
        out.append((T, len(pids), busy, post, idle, gemm, ops))
    return out


def pf_launch(bin_dir, prog, ranks, steps, warmup, tokens, trace, env):
    cmd = [os.path.join(bin_dir, "pipeforge-run"), prog, "--steps", str(steps),
           "--data", tokens, "--trace", trace]
    if ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(ranks)] + cmd
    losses, tps = [], []
    for l in run(cmd, env).splitlines():
        if l.startswith("step "):
            f = l.split()
            losses.append(float(f[3]))
            tps.append(float(f[5]))
    return losses, tps


def torch_launch(py, plan_path, ranks, env):
    me = os.path.abspath(__file__)
    if ranks > 1:
        cmd = [py, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={ranks}", me, "--worker", plan_path]
    else:
        cmd = [py, me, "--worker", plan_path]
    out = run(cmd, env).replace("RESULT ", "\nRESULT ")
    res = [json.loads(l[7:]) for l in out.splitlines() if l.startswith("RESULT ")]
    if len(res) != ranks:
        raise RuntimeError(f"{len(res)} of {ranks} PyTorch ranks printed a RESULT line")
    return res


def gemm_library(bin_dir):
    """(path, 'dnnl'|'cblas') of the float GEMM pipeforge-run links."""
    try:
        out = subprocess.run(["ldd", os.path.join(bin_dir, "pipeforge-run")],
                             capture_output=True, text=True).stdout
    except OSError:
        return None, None
    libs = {}
    for l in out.splitlines():
        f = l.split()
        if len(f) >= 3 and f[1] == "=>":
            libs[f[0]] = f[2]
    for name, path in libs.items():
        if name.startswith("libdnnl"):
            return path, "dnnl"
    for name, path in libs.items():
        if name.startswith(("libopenblas", "libblis", "libblas", "libmkl_rt")):
            return path, "cblas"
    return None, None


def fmt_range(xs, fmt="{:.0f}"):
    if not xs:
        return "n/a"
    return (fmt.format(statistics.median(xs)) + " (" + fmt.format(min(xs)) + "-"
            + fmt.format(max(xs)) + ")")


def print_table(hdr, rows, markdown):
    if markdown:
        print("| " + " | ".join(hdr) + " |")
        print("|" + "---|" * len(hdr))
        for r_ in rows:
            print("| " + " | ".join(r_) + " |")
    else:
        w = [max(len(x) for x in col) for col in zip(hdr, *rows)]
        for r_ in [hdr] + rows:
            print("  ".join(x.ljust(n) for x, n in zip(r_, w)))
    print()


def bench_model(a, family, py, bin_dir, env, runs, work):
    cfg = pm.model_cfg(a.size, family)
    steps, warmup, repeat = runs["steps"], runs["warmup"], runs["repeat"]
    m = a.microbatches or cfg["mbs_count"]
    cfg["mbs_count"] = m
    compile_bin = os.path.join(bin_dir, "pipeforge-compile")
    os.makedirs(work, exist_ok=True)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)

    cfg_path = os.path.join(work, "model.json")
    json.dump(pm.hf_config(cfg), open(cfg_path, "w"), indent=1)
    tokens = os.path.join(work, "tokens.tok")
    write_token_file(tokens, 20000, cfg["vocab"])
    common = ["--microbatches", str(m), "--microbatch-size", str(cfg["mbs"]),
              "--seq-len", str(cfg["seq"])]
    # The initial weights, from the single-process program (every layout
    # initialises the same values from the seed and the parameter name).
    ref = os.path.join(work, "none.pfp")
    run([compile_bin, cfg_path, "--schedule", "none", "-o", ref] + common, env)
    weights = os.path.join(work, "init.bin")
    run([os.path.join(bin_dir, "pipeforge-run"), ref, "--steps", "0",
         "--dump-weights", weights, "--data", tokens], env)

    # Start-up probe: attention mode, sgemm rates.
    lib, kind = gemm_library(bin_dir)
    probe_plan = os.path.join(work, "probe.json")
    json.dump({"cfg": cfg, "shapes": pm.gemm_shapes(cfg), "pf_lib": lib,
               "pf_lib_kind": kind}, open(probe_plan, "w"))
    # On a disturbed machine the probe is redone (as a launch pair is) and
    # the best rate of each side kept: the rate is a physical limit.
    pr = None
    for attempt in range(a.retries + 1):
        if attempt:
            wait_quiet(a.quiet_wait, a.max_other)
        with Meter() as mt:
            out = run([py, os.path.abspath(__file__), "--probe", probe_plan], env)
        got = json.loads([l for l in out.splitlines() if l.startswith("PROBE ")][0][6:])
        log(f"{family}: sgemm probe: PyTorch {got['pt_rate']:.0f}, PipeForge "
            f"{got.get('pf_rate', float('nan')):.0f} GFLOP/s; other CPU {mt.other:.2f} cores")
        got["other"] = mt.other
        if pr is None:
            pr = got
        else:
            for k in ("pt_rate", "pf_rate"):
                if got.get(k, 0) > pr.get(k, 0):
                    pr[k], pr[k[:3] + "shapes"] = got[k], got[k[:3] + "shapes"]
        if mt.other <= a.max_other:
            break
    pr["other"] = mt.other  # the last try's (a quiet one unless none was)
    gqa = pr.get("gqa", "enable_gqa")

    scheds = a.schedules.split(",")
    plans = {}
    for sc in scheds:
        prog = ref if sc == "none" else os.path.join(work, sc + ".pfp")
        if sc != "none":
            run([compile_bin, cfg_path, "--schedule", sc, "--ranks", str(a.ranks),
                 "-o", prog] + common, env)
        plan = {"cfg": cfg, "schedule": sc, "microbatches": m, "mbs": cfg["mbs"],
                "seq": cfg["seq"], "steps": steps + warmup, "seed": 1234,
                "weights": weights, "tokens": tokens, "gqa": gqa,
                "stages": pf_stages(compile_bin, prog, env, cfg)}
        path = os.path.join(work, sc + ".plan.json")
        json.dump(plan, open(path, "w"))
        plans[sc] = (prog, path)

    tok_step = m * cfg["mbs"] * cfg["seq"]
    fpt = pm.flops_per_token(cfg)
    res = {sc: {"pf": [], "pt": [], "ratio": [], "other": [], "redone": 0,
                "pf_split": [], "pt_split": [], "pf_loss": None, "pt_loss": None,
                "err": []} for sc in scheds}
    t_start = time.time()

    def one(side, sc, nr):
        prog, plan = plans[sc]
        if side == "pf":
            trace = os.path.join(work, sc + ".trace.json")
            losses, tps = pf_launch(bin_dir, prog, nr, steps + warmup, warmup,
                                    tokens, trace, env)
            times = [tok_step / x for x in tps]
            split = pf_trace_split(trace, warmup, times)
            # (T, ranks, compute, optimizer, idle) per timed step
            return losses, tps[warmup:], split
        out = torch_launch(py, plan, nr, env)
        last = [o for o in out if o["last"]][0]
        split = []
        for k in range(warmup, steps + warmup):
            T = max(o["times"][k] for o in out)
            c = sum(o["compute"][k] for o in out)
            op = sum(o["optim"][k] for o in out)
            split.append((T, nr, c, op, nr * T - c - op))
        return last["losses"], [tok_step / t for t in last["times"][warmup:]], split

    redos = [0]
    for r in range(repeat):
        for sc in scheds:
            nr = 1 if sc == "none" else a.ranks
            order = ["pf", "pt"] if r % 2 == 0 else ["pt", "pf"]
            best = None
            for attempt in range(a.retries + 1):
                if attempt and redos[0] >= a.max_redos:
                    log(f"   not redone: --max-redos {a.max_redos} reached")
                    break
                if attempt:
                    redos[0] += 1
                    res[sc]["redone"] += 1
                # Every pair starts on a quiet machine where it can: a 1 s
                # sample, repeated for up to --quiet-wait seconds.
                q = wait_quiet(a.quiet_wait, a.max_other)
                if attempt or q > a.max_other:
                    log(f"   {'redo; ' if attempt else ''}quiet check: other "
                        f"processes {q:.2f} cores")
                tries = {}
                try:
                    for side in order:
                        with Meter() as mt:
                            got = one(side, sc, nr)
                        tries[side] = (got, mt.other)
                        tpsm = statistics.median(got[1])
                        log(f"[{time.time() - t_start:5.0f} s] {family} {r + 1}/{repeat} "
                            f"{sc:11s} {'PipeForge' if side == 'pf' else 'PyTorch  '} "
                            f"{tpsm:8.0f} tok/s  other CPU {mt.other:.2f} cores"
                            f"  ({mt.wall:.0f} s)")
                except (RuntimeError, subprocess.TimeoutExpired, IndexError,
                        KeyError, ValueError) as e:
                    log(f"{family} {sc}: {e}")
                    res[sc]["err"].append(str(e)[:200])
                    break
                dist = max(v[1] for v in tries.values())
                if best is None or dist < best[1]:
                    best = (tries, dist)
                if dist <= a.max_other:
                    break
            if best is None:
                continue
            tries, dist = best
            d = res[sc]
            med = {}
            for side in ("pf", "pt"):
                (losses, tps, split), _ = tries[side]
                med[side] = statistics.median(tps)
                d[side].append(med[side])
                d[side + "_split"].extend(split)
                d[side + "_loss"] = losses
            d["ratio"].append(med["pf"] / med["pt"])
            d["other"].append(dist)
    elapsed = time.time() - t_start
    return dict(cfg=cfg, scheds=scheds, res=res, probe=pr, gqa=gqa, lib=lib,
                kind=kind, fpt=fpt, tok_step=tok_step, elapsed=elapsed,
                steps=steps, warmup=warmup, repeat=repeat, m=m)


def report(a, R):
    cfg, res, pr = R["cfg"], R["res"], R["probe"]
    print(f"{a.size} {pm.describe(cfg)}; {a.ranks} ranks, {R['m']} microbatches "
          f"of {cfg['mbs']}; {R['steps']} timed steps (+{R['warmup']} warm-up), "
          f"{R['repeat']} launch pair(s) per schedule; {R['elapsed']:.0f} s")
    if "gqa" in pr:
        t = pr["gqa_times"]
        print(f"PyTorch GQA attention: {R['gqa']} (fwd+bwd of one microbatch: "
              f"enable_gqa {t['enable_gqa'] * 1e3:.2f} ms, repeated kv heads "
              f"{t['repeat_kv'] * 1e3:.2f} ms)")
    pt_rate, pf_rate = pr["pt_rate"], pr.get("pf_rate")
    libname = os.path.basename(R["lib"]) if R["lib"] else "none found"
    print(f"single-thread sgemm at the model's GEMM shapes: PyTorch (torch.mm) "
          f"{pt_rate:.0f} GFLOP/s, PipeForge ({libname}, "
          f"{'dnnl_sgemm' if R['kind'] == 'dnnl' else 'cblas_sgemm'}) "
          + (f"{pf_rate:.0f} GFLOP/s" if pf_rate else "n/a")
          + f" (probe: other CPU {pr.get('other', 0):.2f} cores)"
          + f"; model {R['fpt'] / 1e6:.1f} MFLOP per token")
    print()
    hdr = ["schedule", "PipeForge tok/s", "PyTorch tok/s", "ratio",
           "other CPU (cores)", "redone", "PF loss first/last",
           "PT loss first/last", "loss rel diff"]
    rows = []
    for sc in R["scheds"]:
        d = res[sc]
        lf, lt = d["pf_loss"], d["pt_loss"]
        if lf and lt:
            rel = max(abs(x - y) / abs(y) for x, y in zip(lf, lt))
            agree = f"{rel:.1e}" + ("" if rel <= 1e-4 else " (!)")
        else:
            agree = "n/a"
        fl = lambda ls: f"{ls[0]:.5f} / {ls[-1]:.5f}" if ls else "FAIL"
        name = "none (1 process)" if sc == "none" else sc
        rows.append([name, fmt_range(d["pf"]), fmt_range(d["pt"]),
                     fmt_range(d["ratio"], "{:.2f}"),
                     f"{max(d['other']):.2f}" if d["other"] else "n/a",
                     str(d["redone"]), fl(lf), fl(lt), agree])
    print_table(hdr, rows, a.markdown)

    hdr = ["schedule", "side", "GFLOP/s per core", "of sgemm (at sgemm rate)",
           "other compute", "(of which GEMMs below the rate / non-GEMM)",
           "optimizer", "idle (bubble + comm)"]
    rows, ceil_rows = [], []
    for sc in R["scheds"]:
        d = res[sc]
        for side, rate, label in (("pf", pf_rate, "PipeForge"), ("pt", pt_rate, "PyTorch")):
            sp = d[side + "_split"]
            if not sp or not rate:
                continue
            # medians over the timed steps of every kept launch
            T = statistics.median(x[0] for x in sp)
            nr = sp[0][1]
            core_s = nr * T
            gf = R["fpt"] * R["tok_step"] / T / nr / 1e9
            roof = gf / rate
            comp = statistics.median(x[2] for x in sp) / core_s
            opt = statistics.median(x[3] for x in sp) / core_s
            idle = statistics.median(x[4] for x in sp) / core_s
            pct = lambda v: f"{100 * v:.0f}%"
            gemms = [x[5] for x in sp if len(x) > 5 and x[5] is not None]
            split = "n/a"
            if gemms:
                g = statistics.median(gemms) / core_s
                split = f"{pct(g - roof)} / {pct(comp - g)}"
                # The ratio if PipeForge's non-GEMM compute took no time,
                # its GEMMs kept their measured rate and everything else
                # (bubbles, waits, the optimizer) shrank with the compute:
                # an upper bound of what removing operators can give.
                if side == "pf" and d["ratio"] and comp > 0:
                    free = (comp - g) / comp
                    ratio = statistics.median(d["ratio"])
                    ceil_rows.append(["none (1 process)" if sc == "none" else sc,
                                      f"{ratio:.2f}", pct(g / comp), pct(free),
                                      f"{ratio / (1 - free):.2f}"])
            rows.append(["none (1 process)" if sc == "none" else sc, label,
                         f"{gf:.1f}", pct(roof), pct(comp - roof), split,
                         pct(opt), pct(idle)])
    print("Where the step's core-seconds go (ranks x step time; medians over "
          "the timed steps; 'of sgemm' = model FLOP/s per core / that side's "
          "sgemm rate; PipeForge's GEMMs timed in its trace):")
    print_table(hdr, rows, a.markdown)
    if ceil_rows:
        print("PipeForge's GEMM bound: the ratio if its non-GEMM compute took no "
              "time (GEMMs at their measured rate; bubbles, waits and the "
              "optimizer shrinking with the compute: ratio / (1 - non-GEMM "
              "share of the compute)):")
        print_table(["schedule", "ratio", "GEMMs of PF compute",
                     "non-GEMM of PF compute", "ratio bound"], ceil_rows,
                    a.markdown)
    # PipeForge's compute by op kind (its trace's ops_us), per schedule.
    shares = {}
    for sc in R["scheds"]:
        sp = [x for x in res[sc]["pf_split"] if len(x) > 6 and x[6]]
        if not sp:
            continue
        names = set().union(*(x[6] for x in sp))
        shares[sc] = {n: statistics.median(x[6].get(n, 0.0) / x[2] for x in sp)
                      for n in names}
    if shares:
        order = sorted(set().union(*shares.values()),
                       key=lambda n: -max(v.get(n, 0.0) for v in shares.values()))
        rows = [[n] + [f"{100 * shares[sc].get(n, 0.0):.1f}%" if sc in shares
                       else "n/a" for sc in R["scheds"]] for n in order]
        print("PipeForge's compute by op kind (share of its compute time, "
              "medians over the timed steps; its trace's ops_us):")
        print_table(["op"] + ["none (1 process)" if sc == "none" else sc
                              for sc in R["scheds"]], rows, a.markdown)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", metavar="PLAN", help=argparse.SUPPRESS)
    ap.add_argument("--probe", metavar="PLAN", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="gpt",
                    help="comma list of gpt, llama, moe, or all (default gpt)")
    ap.add_argument("--size", choices=sorted(RUNS), default="small")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--schedules", default=",".join(SCHEDULES))
    ap.add_argument("--steps", type=int, help="timed steps per launch (default 5)")
    ap.add_argument("--warmup", type=int, help="untimed steps first (default 1)")
    ap.add_argument("--repeat", type=int, help="launch pairs per schedule (default 3)")
    ap.add_argument("--microbatches", type=int)
    ap.add_argument("--max-other", type=float, default=0.10,
                    help="redo a pair when other processes took more CPU than "
                         "this many cores during a launch (default 0.10)")
    ap.add_argument("--retries", type=int, default=2,
                    help="redos per pair at most (default 2)")
    ap.add_argument("--max-redos", type=int, default=12,
                    help="redone pairs per model at most (default 12)")
    ap.add_argument("--quiet-wait", type=float, default=20.0,
                    help="seconds to wait for a quiet machine before a redo "
                         "(default 20)")
    ap.add_argument("--python", help="the interpreter that has torch")
    ap.add_argument("--build", default="build")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--keep", help="keep programs, weights, tokens and traces here")
    a = ap.parse_args()
    if a.worker:
        a.plan = a.worker
        return worker(a)
    # A kill still removes the work folder (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if a.probe:
        return probe(a)

    runs = dict(RUNS[a.size])
    for k in ("steps", "warmup", "repeat"):
        if getattr(a, k) is not None:
            runs[k] = getattr(a, k)
    if runs["steps"] < 1 or runs["repeat"] < 1 or runs["warmup"] < 0:
        sys.exit("peer_pytorch: --steps and --repeat must be >= 1, --warmup >= 0")
    fams = pm.FAMILIES if a.model == "all" else a.model.split(",")
    for f in fams:
        if f not in pm.FAMILIES:
            sys.exit(f"peer_pytorch: unknown --model '{f}' (gpt, llama, moe, all)")
    venv = os.environ.get("PIPEFORGE_TORCH_VENV",
                          os.path.expanduser("~/.cache/pipeforge/torch-venv"))
    py = a.python or os.environ.get("PIPEFORGE_TORCH_PYTHON") or os.path.join(venv, "bin", "python")
    if subprocess.run([py, "-c", "import torch"], capture_output=True).returncode:
        sys.exit(f"peer_pytorch: '{py}' cannot import torch; run "
                 "`bash scripts/setup.sh --bench` or pass --python")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bin_dir = os.path.join(root, a.build, "bin")
    one = dict(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    env = dict(os.environ, **one)
    if a.keep:
        os.makedirs(a.keep, exist_ok=True)
    for f in fams:
        work = os.path.join(a.keep, f) if a.keep else tempfile.mkdtemp(prefix="pf-peer-")
        try:
            R = bench_model(a, f, py, bin_dir, env, runs, work)
        finally:
            if not a.keep:
                shutil.rmtree(work, ignore_errors=True)
        report(a, R)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
