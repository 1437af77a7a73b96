#!/usr/bin/env python3
"""The tiny DeepSeek-V3 trained by PipeForge against a plain PyTorch model of
the same architecture (an independent reference, docs/import.md "Checked
against PyTorch").

    deepseek_torch_reference.py TOOLS CONFIG OUTDIR [MPIRUN...]

The PyTorch model below is written from the published architecture
(DeepSeek-V3 / HF modeling_deepseek.py): Multi-head Latent Attention with
the low-rank q (q_a, RMSNorm, q_b) and kv (kv_a with the decoupled RoPE key,
RMSNorm, kv_b) projections, RoPE on the rope dimensions only, softmax scale
1/sqrt(dn + dr), causal; DeepSeekMoE with sigmoid scores, group-limited
top-k (a group scores the sum of its two best experts, the topk_group best
groups are kept), the chosen experts' unbiased scores renormalised and
scaled by routed_scaling_factor, SwiGLU experts, the shared expert added,
the first first_k_dense_replace layers dense; embeddings, final RMSNorm, LM
head, mean cross-entropy. Nothing of PipeForge's kernels is used: only its
initial weights (pipeforge-run --steps 0 --dump-weights) and its data
(a PFTOK token file written here, windows chosen by the documented hash).
RoPE follows PipeForge's rotate-half convention (docs/import.md "RoPE
convention": a fixed permutation of HF's interleaved rope rows).

DeepSeek-V3's auxiliary-loss-free load balancing (topk_method noaux_tc):
each MoE layer's bias e_score_correction_bias (zero at first) is added to
the scores for the choice only (the groups' scores and the top-k); after
each optimizer step b_e += gamma * sign(mean load - load_e), load_e the
tokens routed to expert e over the step's microbatches (gamma =
bias_update_speed, 0.001 by default).

PipeForge runs the program compiled with dualpipev on 2 pipeline ranks x 2
expert-parallel ranks (MPIRUN -np 4). Checks:
  - the first step's gradients: a one-step SGD run with lr L gives
    g = (w0 - w1) / L; per tensor max|g - g_torch| <= 1e-5 max|g_torch| + 1e-7;
  - the losses of STEPS AdamW steps (weight decay on matrices only) within
    1e-5 relative of torch.optim.AdamW with the same settings, and the
    biases after them bitwise.
Prints the worst tensor and the routing margins (the smallest gap between
the last chosen and the first unchosen expert or group): a tie flipping
between the implementations would show there. Exit 1 on a mismatch.
"""
import json
import math
import os
import struct
import subprocess
import sys

import torch
import torch.nn.functional as F

STEPS = 3
SEQ, MB_SIZE, M, EP, RANKS = 16, 2, 4, 2, 2
LR, BETAS, EPS, WD = 1e-3, (0.9, 0.999), 1e-8, 0.1
SGD_LR = 1024.0  # a power of two: (w0 - w1) / L is exact
SEED = 1234      # pipeforge-compile's default --seed
MASK64 = (1 << 64) - 1


# --- PipeForge's inputs: weights file and token-file windows -------------

def read_weights(path):
    """PFWEIGHTS1: a line "NAME COUNT" then COUNT little-endian floats."""
    out = {}
    with open(path, "rb") as f:
        assert f.readline() == b"PFWEIGHTS1\n", path
        while True:
            line = f.readline()
            if not line:
                return out
            name, n = line.split()
            data = f.read(4 * int(n))
            out[name.decode()] = torch.frombuffer(bytearray(data),
                                                  dtype=torch.float32)


def fnv1a64(b):
    h = 0xcbf29ce484222325
    for x in b:
        h = ((h ^ x) * 0x100000001b3) & MASK64
    return h


def write_token_file(path, tokens, vocab):
    """PFTOK (docs/runtime-data.md): header, u16 tokens, FNV-1a 64."""
    b = bytearray(b"PFTOK\0\0\0")
    b += struct.pack("<IIQQ", 1, 2, len(tokens), vocab)
    b += struct.pack("<%dH" % len(tokens), *tokens)
    b += struct.pack("<Q", fnv1a64(b))
    with open(path, "wb") as f:
        f.write(b)


def splitmix(x):
    x = (x + 0x9e3779b97f4a7c15) & MASK64
    x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & MASK64
    return x ^ (x >> 31)


def sample_key(seed, step, mb, row):
    h = splitmix(seed ^ 0x7066646174617631)
    h = splitmix(h ^ step)
    h = splitmix(h ^ mb)
    return splitmix(h ^ row)


def batches(tokens, step):
    """The EP * M microbatches of a step (step counted from 0): row r of
    microbatch g is the window at sample_key(seed, step, g, r) mod (N - s)."""
    n = len(tokens)
    out = []
    for g in range(EP * M):
        rows = [sample_key(SEED, step, g, r) % (n - SEQ) for r in range(MB_SIZE)]
        win = torch.tensor([tokens[o:o + SEQ + 1] for o in rows])
        out.append((win[:, :-1], win[:, 1:]))
    return out


# --- The model, from the published architecture --------------------------

def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope(x, theta):
    """x [b, H, s, d]: rotary embedding, pairs (j, j + d/2), angle
    pos * theta^(-2j/d)."""
    d, s = x.shape[-1], x.shape[-2]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = torch.outer(torch.arange(s, dtype=torch.float32), inv)
    emb = torch.cat((ang, ang), dim=-1)
    return x * emb.cos() + rotate_half(x) * emb.sin()


class Margins:
    """The smallest routing gaps seen (a near-tie could flip)."""

    def __init__(self):
        self.expert = math.inf
        self.group = math.inf


class DeepSeekV3:
    def __init__(self, cfg, params, biases):
        self.c, self.p = cfg, params
        self.margins = Margins()
        # The load-balancing biases (not parameters: no gradient) and the
        # current step's load per MoE layer.
        self.biases = biases
        self.load = {m: torch.zeros_like(b) for m, b in biases.items()}

    def update_biases(self):
        """After a step: b += gamma * sign(mean(load) - load), loads reset."""
        gamma = self.c.get("bias_update_speed", 0.001)
        for m, b in self.biases.items():
            load = self.load[m]
            b += torch.sign(load.mean() - load) * torch.tensor(
                gamma, dtype=torch.float32)
            load.zero_()

    def w(self, name):
        return self.p[name]

    def mla(self, x, pre):
        c, a = self.c, pre + "self_attn."
        b, s, _ = x.shape
        H, dn, dr, dv = (c["num_attention_heads"], c["qk_nope_head_dim"],
                         c["qk_rope_head_dim"], c["v_head_dim"])
        # The low-rank projections' norms: epsilon 1e-6 whatever
        # rms_norm_eps says (HF's DeepseekV3Attention builds them so).
        eps = 1e-6
        q = rms_norm(x @ self.w(a + "q_a_proj.weight").T,
                     self.w(a + "q_a_layernorm.weight"), eps)
        q = (q @ self.w(a + "q_b_proj.weight").T).view(b, s, H, dn + dr)
        q = q.transpose(1, 2)
        q_nope, q_pe = q.split([dn, dr], dim=-1)
        # kv_a_proj_with_mqa: [c_kv (kv_lora_rank) | k_pe (dr)].
        c_kv = x @ self.w(a + "kv_a_proj_with_mqa.latent.weight").T
        k_pe = (x @ self.w(a + "kv_a_proj_with_mqa.rope.weight").T)
        k_pe = k_pe.view(b, s, 1, dr).transpose(1, 2)
        c_kv = rms_norm(c_kv, self.w(a + "kv_a_layernorm.weight"), eps)
        # kv_b_proj: per head dn key rows then dv value rows.
        k_nope = (c_kv @ self.w(a + "kv_b_proj.k_nope.weight").T)
        k_nope = k_nope.view(b, s, H, dn).transpose(1, 2)
        v = (c_kv @ self.w(a + "kv_b_proj.v.weight").T)
        v = v.view(b, s, H, dv).transpose(1, 2)
        theta = c.get("rope_theta", 10000.0)
        q_pe, k_pe = rope(q_pe, theta), rope(k_pe, theta)
        qs = torch.cat((q_nope, q_pe), dim=-1)
        ks = torch.cat((k_nope, k_pe.expand(b, H, s, dr)), dim=-1)
        scores = (qs @ ks.transpose(-1, -2)) / math.sqrt(dn + dr)
        mask = torch.ones(s, s, dtype=torch.bool).triu(1)
        probs = scores.masked_fill(mask, float("-inf")).softmax(-1)
        o = (probs @ v).transpose(1, 2).reshape(b, s, H * dv)
        return o @ self.w(a + "o_proj.weight").T

    @staticmethod
    def swiglu(x, gate, up, down):
        return (F.silu(x @ gate.T) * (x @ up.T)) @ down.T

    def moe(self, x, m):
        c = self.c
        E, k = c["n_routed_experts"], c["num_experts_per_tok"]
        G, TG = c.get("n_group", 1), c.get("topk_group", 1)
        t = x.reshape(-1, x.shape[-1])
        scores = (t @ self.w(m + "gate.weight").T).sigmoid()
        # The choice: the scores plus the bias (noaux_tc). Group-limited: a
        # group's score is the sum of its two best choice values.
        s_det = scores.detach() + self.biases[m + "gate.e_score_correction_bias"]
        gs = s_det.view(-1, G, E // G).topk(2, dim=-1).values.sum(-1)
        gsorted = gs.sort(dim=-1, descending=True).values
        if TG < G:
            self.margins.group = min(
                self.margins.group,
                (gsorted[:, TG - 1] - gsorted[:, TG]).min().item())
        keep = torch.zeros_like(gs).scatter_(
            1, gs.topk(TG, dim=-1).indices, 1.0)
        keep = keep.unsqueeze(-1).expand(-1, G, E // G).reshape(-1, E)
        # (-inf, not HF's 0.0: a biased choice value may be negative.)
        choice = s_det.masked_fill(keep == 0, float("-inf"))
        csorted = choice.sort(dim=-1, descending=True).values
        self.margins.expert = min(
            self.margins.expert, (csorted[:, k - 1] - csorted[:, k]).min().item())
        idx = choice.topk(k, dim=-1).indices
        self.load[m + "gate.e_score_correction_bias"] += torch.bincount(
            idx.reshape(-1), minlength=E).to(torch.float32)
        wts = scores.gather(1, idx)  # the unbiased scores
        if c.get("norm_topk_prob", True):
            wts = wts / (wts.sum(-1, keepdim=True) + 1e-20)
        wts = wts * c.get("routed_scaling_factor", 1.0)
        gate = self.w(m + "experts.gate_proj")
        up = self.w(m + "experts.up_proj")
        down = self.w(m + "experts.down_proj")
        y = torch.zeros_like(t)
        for e in range(E):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            out = self.swiglu(t[tok], gate[e], up[e], down[e])
            y = y.index_add(0, tok, out * wts[tok, slot].unsqueeze(-1))
        y = y.view_as(x)
        sh = m + "shared_experts."
        return y + self.swiglu(x, self.w(sh + "gate_proj.weight"),
                               self.w(sh + "up_proj.weight"),
                               self.w(sh + "down_proj.weight"))

    def loss(self, tokens, targets):
        c = self.c
        eps = c["rms_norm_eps"]
        x = self.w("embed_tokens")[tokens]
        for i in range(c["num_hidden_layers"]):
            pre = "layers.%d." % i
            x = x + self.mla(rms_norm(x, self.w(pre + "input_layernorm.weight"),
                                      eps), pre)
            n = rms_norm(x, self.w(pre + "post_attention_layernorm.weight"), eps)
            m = pre + "mlp."
            if i >= c.get("first_k_dense_replace", 0):
                x = x + self.moe(n, m)
            else:
                x = x + self.swiglu(n, self.w(m + "gate_proj.weight"),
                                    self.w(m + "up_proj.weight"),
                                    self.w(m + "down_proj.weight"))
        logits = rms_norm(x, self.w("norm.weight"), eps) @ self.w("lm_head.weight").T
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               targets.reshape(-1))


def bias_names(c):
    """The MoE layers' load-balancing biases (noaux_tc), [E] each."""
    return ["layers.%d.mlp.gate.e_score_correction_bias" % i
            for i in range(c.get("first_k_dense_replace", 0),
                           c["num_hidden_layers"])]


def shapes(c):
    """Each parameter's shape (the dump is flat), by HF's layout."""
    h, V = c["hidden_size"], c["vocab_size"]
    H, dn, dr, dv = (c["num_attention_heads"], c["qk_nope_head_dim"],
                     c["qk_rope_head_dim"], c["v_head_dim"])
    qr, kr = c["q_lora_rank"], c["kv_lora_rank"]
    E, f, fi = c["n_routed_experts"], c["moe_intermediate_size"], c["intermediate_size"]
    fs = c.get("n_shared_experts", 0) * f
    out = {"embed_tokens": [V, h], "norm.weight": [h], "lm_head.weight": [V, h]}
    for i in range(c["num_hidden_layers"]):
        p, a, m = "layers.%d." % i, "layers.%d.self_attn." % i, "layers.%d.mlp." % i
        out.update({
            p + "input_layernorm.weight": [h],
            p + "post_attention_layernorm.weight": [h],
            a + "q_a_proj.weight": [qr, h], a + "q_a_layernorm.weight": [qr],
            a + "q_b_proj.weight": [H * (dn + dr), qr],
            a + "kv_a_proj_with_mqa.latent.weight": [kr, h],
            a + "kv_a_proj_with_mqa.rope.weight": [dr, h],
            a + "kv_a_layernorm.weight": [kr],
            a + "kv_b_proj.k_nope.weight": [H * dn, kr],
            a + "kv_b_proj.v.weight": [H * dv, kr],
            a + "o_proj.weight": [h, H * dv]})
        if i >= c.get("first_k_dense_replace", 0):
            out.update({
                m + "gate.weight": [E, h], m + "experts.gate_proj": [E, f, h],
                m + "experts.up_proj": [E, f, h],
                m + "experts.down_proj": [E, h, f],
                m + "shared_experts.gate_proj.weight": [fs, h],
                m + "shared_experts.up_proj.weight": [fs, h],
                m + "shared_experts.down_proj.weight": [h, fs]})
        else:
            out.update({m + "gate_proj.weight": [fi, h],
                        m + "up_proj.weight": [fi, h],
                        m + "down_proj.weight": [h, fi]})
    return out


# --- Driver -------------------------------------------------------------

def run(cmd, log=None):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("command failed: %s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
    if log:
        with open(log, "w") as f:
            f.write(r.stdout)
    return r.stdout


def losses(text):
    return [float(l.split()[3]) for l in text.splitlines()
            if l.startswith("step ")]


def main():
    tools, config, out = sys.argv[1], sys.argv[2], sys.argv[3]
    mpirun = sys.argv[4:] or ["mpirun", "--oversubscribe"]
    os.makedirs(out, exist_ok=True)
    with open(config) as f:
        c = json.load(f)
    assert c["model_type"] == "deepseek_v3" and c.get("scoring_func") == "sigmoid"
    torch.manual_seed(0)
    tokens = torch.randint(0, c["vocab_size"], (4096,)).tolist()
    tok = os.path.join(out, "data.tok")
    write_token_file(tok, tokens, c["vocab_size"])

    prog = os.path.join(out, "dsv3.pfp")
    run([tools + "/pipeforge-compile", config, "--schedule", "dualpipev",
         "--ranks", str(RANKS), "--ep", str(EP), "--microbatches", str(M),
         "--seq-len", str(SEQ), "--microbatch-size", str(MB_SIZE), "-o", prog])
    pf = mpirun + ["-np", str(RANKS * EP), tools + "/pipeforge-run", prog,
                   "--data", tok]
    w0f, w1f = os.path.join(out, "w0.bin"), os.path.join(out, "w1.bin")
    run(pf + ["--steps", "0", "--dump-weights", w0f])
    sgd = run(pf + ["--steps", "1", "--optimizer", "sgd", "--lr", str(SGD_LR),
                    "--dump-weights", w1f], os.path.join(out, "sgd.log"))
    w3f = os.path.join(out, "w3.bin")
    adamw = run(pf + ["--steps", str(STEPS), "--lr", str(LR),
                      "--weight-decay", str(WD), "--dump-weights", w3f],
                os.path.join(out, "adamw.log"))
    w0, w1, w3 = read_weights(w0f), read_weights(w1f), read_weights(w3f)
    shp = shapes(c)
    bnames = bias_names(c)
    if sorted(w0) != sorted(list(shp) + bnames):
        sys.exit("tensor names differ: %s"
                 % sorted(set(w0) ^ (set(shp) | set(bnames))))
    params = {n: w0[n].clone().view(shp[n]).requires_grad_(True) for n in shp}

    def fresh_biases():
        return {n: w0[n].clone() for n in bnames}
    model = DeepSeekV3(c, params, fresh_biases())

    ok = True
    # The first step's gradients (mean over the EP * M microbatches).
    data = [batches(tokens, s) for s in range(STEPS)]
    loss = torch.stack([model.loss(t, y) for t, y in data[0]]).mean()
    loss.backward()
    pf_loss = losses(sgd)[0]
    rel = abs(pf_loss - loss.item()) / abs(loss.item())
    print("step 1 loss: pipeforge %.6f torch %.6f (relative %.1e)"
          % (pf_loss, loss.item(), rel))
    ok &= rel <= 1e-5
    worst, worst_name = 0.0, ""
    for n in shp:
        g_pf = ((w0[n] - w1[n]) / SGD_LR).view(shp[n])
        g_t = params[n].grad
        ratio = (g_pf - g_t).abs().max().item() / (
            1e-5 * g_t.abs().max().item() + 1e-7)
        if ratio > worst:
            worst, worst_name = ratio, n
        if ratio > 1:
            print("gradient of %s differs: max |diff| %.3g, max |g| %.3g"
                  % (n, (g_pf - g_t).abs().max().item(), g_t.abs().max().item()))
            ok = False
    print("gradients: %d tensors, worst %s at %.2f of the tolerance"
          % (len(shp), worst_name, worst))
    print("routing margins: expert %.2e, group %.2e"
          % (model.margins.expert, model.margins.group))

    # STEPS AdamW steps: weight decay on tensors of rank >= 2.
    for p in params.values():
        p.grad = None
    decayed = [p for p in params.values() if p.dim() >= 2]
    plain = [p for p in params.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decayed, "weight_decay": WD},
                             {"params": plain, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS)
    model.biases = fresh_biases()
    model.load = {n: torch.zeros_like(b) for n, b in model.biases.items()}
    ref = []
    for s in range(STEPS):
        opt.zero_grad()
        loss = torch.stack([model.loss(t, y) for t, y in data[s]]).mean()
        loss.backward()
        opt.step()
        model.update_biases()
        ref.append(loss.item())
    got = losses(adamw)
    if len(got) != STEPS:
        sys.exit("expected %d step lines:\n%s" % (STEPS, adamw))
    worst_loss = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
    print("adamw losses: pipeforge %s torch %s (worst relative %.1e)"
          % (" ".join("%.6f" % x for x in got),
             " ".join("%.6f" % x for x in ref), worst_loss))
    ok &= worst_loss <= 1e-5
    # The biases after the steps: the same loads, the same float additions.
    moved = 0
    for n in bnames:
        b_pf, b_t = w3[n], model.biases[n]
        moved += int((b_pf != w0[n]).sum().item())
        if not torch.equal(b_pf, b_t):
            print("bias %s differs: pipeforge %s torch %s"
                  % (n, b_pf.tolist(), b_t.tolist()))
            ok = False
    print("biases after %d steps: %d tensors, %d of %d values moved, %s"
          % (STEPS, len(bnames), moved, sum(w0[n].numel() for n in bnames),
             "bitwise equal" if ok else "differ"))
    print("MATCH" if ok else "MISMATCH")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
