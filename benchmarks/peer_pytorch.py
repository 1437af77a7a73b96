#!/usr/bin/env python3
"""PipeForge against PyTorch's own pipeline runtime, side by side.

The same GPT-2-style model (pre-LN, GELU tanh, fp32, dropout 0, untied
lm_head), the same initial weights (`pipeforge-run --steps 0
--dump-weights`), the same token windows (a PFTOK file, sampled as
rt::TokenFile does) and AdamW with the same hyper-parameters (lr 1e-3,
betas 0.9/0.999, eps 1e-8, no weight decay, no clipping) are trained by

  pipeforge   mpirun -np P pipeforge-run PROG --data TOKENS
  pytorch     torchrun --nproc-per-node P (this file, --worker): the stages
              PipeForge's partition chose, as torch.distributed.pipelining
              PipelineStage modules on gloo, driven by the matching
              schedule class

for every schedule both have (gpipe, 1f1b, interleaved, zbv, dualpipev),
plus the single-process baseline (PyTorch eager in one process, gradient
accumulation over the microbatches, against PipeForge's one-rank program).
One thread per rank on both sides. Each (schedule, side) is launched
--repeat times, the launches of the two sides interleaved; a launch's
number is the median tokens/s over its steps after --warmup; the table
shows the median over launches, the ratio PipeForge / PyTorch, and the
first and last loss of each side (rank 0's printed step loss; PyTorch: the
mean of the microbatch losses). With dropout 0 the two sides compute the
same function, so the losses agree to ~1e-4 relative (different summation
orders only); the script marks rows where they do not.

PyTorch is a benchmark dependency only (never needed by the build or the
tests): `bash scripts/setup.sh --bench` makes a virtual environment at
$PIPEFORGE_TORCH_VENV (default ~/.cache/pipeforge/torch-venv, the torch
tests' own) with torch from PyPI. This
script itself runs under any python3; it finds torch's interpreter by
--python, else $PIPEFORGE_TORCH_PYTHON, else $PIPEFORGE_TORCH_VENV/bin/python.

  python3 benchmarks/peer_pytorch.py --size small|medium [--ranks 2]
      [--schedules none,gpipe,1f1b,interleaved,zbv,dualpipev]
      [--steps N] [--warmup K] [--repeat R] [--python PY] [--build build]
      [--markdown] [--keep DIR]
"""
import argparse
import json
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

SIZES = {
    # layers, hidden, heads, seq, vocab, microbatch size, microbatches,
    # steps, warm-up, repeats (the defaults fit 10 minutes on 2 shared cores)
    "small": dict(n_layer=4, n_embd=256, n_head=4, seq=128, vocab=256,
                  mbs=2, mbs_count=8, steps=4, warmup=1, repeat=2),
    "medium": dict(n_layer=12, n_embd=768, n_head=12, seq=256, vocab=50257,
                   mbs=1, mbs_count=4, steps=2, warmup=1, repeat=1),
}
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


def build_torch_model(torch, cfg):
    nn, F = torch.nn, torch.nn.functional
    H, nh, eps = cfg["n_embd"], cfg["n_head"], 1e-5

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = nn.Linear(H, H), nn.Linear(H, H), nn.Linear(H, H)
            self.c_proj = nn.Linear(H, H)

        def forward(self, x):
            B, S, _ = x.shape
            sh = lambda t: t.view(B, S, nh, H // nh).transpose(1, 2)
            y = F.scaled_dot_product_attention(sh(self.q(x)), sh(self.k(x)),
                                               sh(self.v(x)), is_causal=True)
            return self.c_proj(y.transpose(1, 2).reshape(B, S, H))

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc, self.c_proj = nn.Linear(H, 4 * H), nn.Linear(4 * H, H)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn = nn.LayerNorm(H, eps=eps), Attn()
            self.ln_2, self.mlp = nn.LayerNorm(H, eps=eps), Mlp()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class Stage(nn.Module):
        """Layers `layers` of the model; the embeddings when `first`, the
        final norm and lm_head when `last`."""

        def __init__(self, layers, first, last):
            super().__init__()
            self.first, self.last = first, last
            if first:
                self.wte = nn.Embedding(cfg["vocab"], H)
                self.wpe = nn.Embedding(cfg["seq"], H)
            self.h = nn.ModuleDict({str(i): Block() for i in layers})
            if last:
                self.ln_f = nn.LayerNorm(H, eps=eps)
                self.lm_head = nn.Linear(H, cfg["vocab"], bias=False)

        def forward(self, x):
            if self.first:
                pos = torch.arange(x.shape[1], device=x.device)
                x = self.wte(x) + self.wpe(pos)
            for blk in self.h.values():
                x = blk(x)
            if self.last:
                x = self.lm_head(self.ln_f(x))
            return x

    return Stage


def load_pf_weights(torch, module, weights):
    with torch.no_grad():
        for name, p in module.named_parameters():
            pf = name[:-len(".weight")] if name in ("wte.weight", "wpe.weight") else name
            t = torch.frombuffer(bytearray(weights[pf]), dtype=torch.float32)
            p.copy_(t.view_as(p))


def worker(a):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    plan = json.load(open(a.plan))
    cfg, m, b, s = plan["cfg"], plan["microbatches"], plan["mbs"], plan["seq"]
    weights = read_weights(plan["weights"])
    toks = read_tokens(plan["tokens"])
    Stage = build_torch_model(torch, cfg)
    V = cfg["vocab"]
    F = torch.nn.functional

    def loss_fn(logits, target):
        return F.cross_entropy(logits.reshape(-1, V), target.reshape(-1))

    sched = plan["schedule"]
    stages = plan["stages"]  # [{index, layers, first, last, rank}]
    if sched == "none":
        rank, world = 0, 1
        mods = [Stage(st["layers"], st["first"], st["last"]) for st in stages]
        for mod in mods:
            load_pf_weights(torch, mod, weights)
        model = torch.nn.Sequential(*mods)
        params = list(model.parameters())
    else:
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        from torch.distributed import pipelining as pp
        mine = [st for st in stages if st["rank"] == rank]
        mods, pstages = [], []
        for st in mine:
            mod = Stage(st["layers"], st["first"], st["last"])
            load_pf_weights(torch, mod, weights)
            mods.append(mod)
            pstages.append(pp.PipelineStage(mod, st["index"], len(stages),
                                            torch.device("cpu")))
        cls = getattr(pp, TORCH_CLASS[sched])
        if len(pstages) == 1:
            runner = cls(pstages[0], n_microbatches=m, loss_fn=loss_fn)
        else:
            runner = cls(pstages, n_microbatches=m, loss_fn=loss_fn)
        params = [p for mod in mods for p in mod.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.0)
    holds_last = any(st["last"] for st in stages if sched == "none" or st["rank"] == rank)
    losses, times = [], []
    for step in range(plan["steps"]):
        xs, ys = batch(toks, plan["seed"], step, m, b, s)
        x, y = torch.tensor(xs, dtype=torch.long), torch.tensor(ys, dtype=torch.long)
        if sched != "none":
            dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        if sched == "none":
            tot = 0.0
            for i in range(m):
                l = loss_fn(model(x[i * b:(i + 1) * b]), y[i * b:(i + 1) * b])
                (l / m).backward()
                tot += l.item()
            step_loss = tot / m
        else:
            mb_losses = []
            kw = {}
            if any(st["first"] for st in mine):
                kw_args = (x,)
            else:
                kw_args = ()
            if holds_last:
                kw = dict(target=y, losses=mb_losses)
            runner.step(*kw_args, **kw)
            step_loss = (sum(float(l) for l in mb_losses) / m) if holds_last else None
        opt.step()
        if sched != "none":
            dist.barrier()
        times.append(time.perf_counter() - t0)
        losses.append(step_loss)
    if holds_last:
        print("RESULT " + json.dumps({"losses": losses, "times": times}), flush=True)
    if sched != "none":
        dist.destroy_process_group()


# --- the driver -------------------------------------------------------------

def run(cmd, env, timeout=1800):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])}... failed ({p.returncode}):\n"
                           + (p.stderr or p.stdout)[-3000:])
    return p.stdout


def pf_stages(compile_bin, prog, env):
    """Stage index -> layers, first/last, rank, from the program listing."""
    out = run([compile_bin, "--check", "--dump", prog], env)
    stages = {}
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("#") and " -> stage " in line:
            name = line.split()[1]
            st = int(line.split(" -> stage ")[1].split()[0])
            d = stages.setdefault(st, {"index": st, "layers": [], "first": False,
                                       "last": False, "rank": 0})
            if name == "wte":
                d["first"] = True
            elif name == "lm_head.weight":
                d["last"] = True
            elif name.startswith("h.") and name.endswith(".ln_1.weight"):
                d["layers"].append(int(name.split(".")[1]))
        elif line.startswith("stage ") and " on rank " in line:
            st = int(line.split()[1])
            stages.setdefault(st, {"index": st, "layers": [], "first": False,
                                   "last": False, "rank": 0})
            stages[st]["rank"] = int(line.split(" on rank ")[1].split()[0])
    return [stages[k] for k in sorted(stages)]


def pf_launch(bin_dir, prog, ranks, steps, tokens, env):
    cmd = [os.path.join(bin_dir, "pipeforge-run"), prog, "--steps", str(steps),
           "--data", tokens]
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
    for l in run(cmd, env).splitlines():
        if l.startswith("RESULT "):
            return json.loads(l[7:])
    raise RuntimeError("the PyTorch worker printed no RESULT line")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", metavar="PLAN", help=argparse.SUPPRESS)
    ap.add_argument("--size", choices=SIZES, default="small")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--schedules", default=",".join(SCHEDULES))
    ap.add_argument("--steps", type=int, help="steps per launch (warm-up included)")
    ap.add_argument("--warmup", type=int, help="steps dropped from the timing")
    ap.add_argument("--repeat", type=int, help="launches per (schedule, side)")
    ap.add_argument("--microbatches", type=int)
    ap.add_argument("--python", help="the interpreter that has torch")
    ap.add_argument("--build", default="build")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--keep", help="keep programs, weights and tokens here")
    a = ap.parse_args()
    if a.worker:
        a.plan = a.worker
        return worker(a)

    cfg = dict(SIZES[a.size])
    steps = a.steps or cfg["steps"]
    warmup = cfg["warmup"] if a.warmup is None else a.warmup
    repeat = a.repeat or cfg["repeat"]
    m = a.microbatches or cfg["mbs_count"]
    if steps <= warmup:
        sys.exit("peer_pytorch: --steps must exceed --warmup")
    venv = os.environ.get("PIPEFORGE_TORCH_VENV",
                          os.path.expanduser("~/.cache/pipeforge/torch-venv"))
    py = a.python or os.environ.get("PIPEFORGE_TORCH_PYTHON") or os.path.join(venv, "bin", "python")
    if subprocess.run([py, "-c", "import torch"], capture_output=True).returncode:
        sys.exit(f"peer_pytorch: '{py}' cannot import torch; run "
                 "`bash scripts/setup.sh --bench` or pass --python")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bin_dir = os.path.join(root, a.build, "bin")
    compile_bin = os.path.join(bin_dir, "pipeforge-compile")
    one = dict(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env = dict(os.environ, **one)
    work = a.keep or tempfile.mkdtemp(prefix="pf-peer-")
    os.makedirs(work, exist_ok=True)

    config = {"model_type": "gpt2", "n_layer": cfg["n_layer"], "n_embd": cfg["n_embd"],
              "n_head": cfg["n_head"], "n_inner": None, "vocab_size": cfg["vocab"],
              "n_positions": cfg["seq"], "layer_norm_epsilon": 1e-5,
              "initializer_range": 0.02, "attn_pdrop": 0.0, "resid_pdrop": 0.0,
              "embd_pdrop": 0.0, "activation_function": "gelu_new",
              "tie_word_embeddings": False}
    cfg_path = os.path.join(work, "model.json")
    json.dump(config, open(cfg_path, "w"))
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

    scheds = a.schedules.split(",")
    plans = {}
    for sc in scheds:
        prog = ref if sc == "none" else os.path.join(work, sc + ".pfp")
        if sc != "none":
            run([compile_bin, cfg_path, "--schedule", sc, "--ranks", str(a.ranks),
                 "-o", prog] + common, env)
        plan = {"cfg": cfg, "schedule": sc, "microbatches": m, "mbs": cfg["mbs"],
                "seq": cfg["seq"], "steps": steps, "seed": 1234, "weights": weights,
                "tokens": tokens, "stages": pf_stages(compile_bin, prog, env)}
        path = os.path.join(work, sc + ".plan.json")
        json.dump(plan, open(path, "w"))
        plans[sc] = (prog, path)

    tok_step = m * cfg["mbs"] * cfg["seq"]
    res = {sc: {"pf": [], "pt": [], "pf_loss": None, "pt_loss": None} for sc in scheds}
    t_start = time.time()
    for r in range(repeat):
        for sc in scheds:
            prog, plan = plans[sc]
            nr = 1 if sc == "none" else a.ranks
            sides = [("pf", None), ("pt", None)] if r % 2 == 0 else [("pt", None), ("pf", None)]
            for side, _ in sides:
                print(f"[{time.time() - t_start:5.0f} s] launch {r + 1}/{repeat}: "
                      f"{sc} {'PipeForge' if side == 'pf' else 'PyTorch'}",
                      file=sys.stderr, flush=True)
                try:
                    if side == "pf":
                        losses, tps = pf_launch(bin_dir, prog, nr, steps, tokens, env)
                    else:
                        out = torch_launch(py, plan, nr, env)
                        losses = out["losses"]
                        tps = [tok_step / t for t in out["times"]]
                except RuntimeError as e:
                    print(f"{sc} {side}: {e}", file=sys.stderr)
                    res[sc][side + "_err"] = True
                    continue
                res[sc][side].append(statistics.median(tps[warmup:]))
                res[sc][side + "_loss"] = losses
    elapsed = time.time() - t_start

    hdr = ["schedule", "PipeForge tok/s", "PyTorch tok/s", "ratio",
           "PF loss first/last", "PT loss first/last", "loss rel diff"]
    rows = []
    for sc in scheds:
        d = res[sc]
        pf = statistics.median(d["pf"]) if d["pf"] else float("nan")
        pt = statistics.median(d["pt"]) if d["pt"] else float("nan")
        lf, lt = d["pf_loss"], d["pt_loss"]
        if lf and lt:
            rel = max(abs(x - y) / abs(y) for x, y in zip(lf, lt))
            agree = f"{rel:.1e}" + ("" if rel <= 1e-4 else " (!)")
        else:
            agree = "n/a"
        fmt = lambda ls: f"{ls[0]:.5f} / {ls[-1]:.5f}" if ls else "FAIL"
        name = "none (1 process)" if sc == "none" else sc
        rows.append([name, f"{pf:.0f}", f"{pt:.0f}", f"{pf / pt:.2f}", fmt(lf), fmt(lt), agree])
    print(f"{a.size}: {cfg['n_layer']} layers, hidden {cfg['n_embd']}, seq {cfg['seq']}, "
          f"vocab {cfg['vocab']}; {a.ranks} ranks, {m} microbatches of {cfg['mbs']}; "
          f"{steps} steps ({warmup} warm-up), {repeat} launch(es) per side; "
          f"{elapsed:.0f} s")
    if a.markdown:
        print("| " + " | ".join(hdr) + " |")
        print("|" + "---|" * len(hdr))
        for r_ in rows:
            print("| " + " | ".join(r_) + " |")
    else:
        w = [max(len(x) for x in col) for col in zip(hdr, *rows)]
        for r_ in [hdr] + rows:
            print("  ".join(x.ljust(n) for x, n in zip(r_, w)))
    if not a.keep:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
