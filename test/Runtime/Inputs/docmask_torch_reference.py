#!/usr/bin/env python3
"""pipeforge-run --doc-mask against a plain PyTorch Llama with an explicit
block-diagonal causal mask (docs/runtime-data.md, "Attention within
documents").

    docmask_torch_reference.py TOOLS CONFIG OUTDIR megatron|eos

The documents come from a Megatron-LM dataset's index (megatron: the
dataset is written here in the MMIDIDX layout) or from an end-of-document
token (eos: a PFTOK file whose documents each end with token 255, and
pipeforge-run --eos 255). The PyTorch model is written from the published
Llama architecture (RMSNorm, grouped-query attention with RoPE in the
rotate-half convention, SwiGLU MLP, untied LM head, mean cross-entropy);
nothing of PipeForge's kernels is used, only its initial weights
(pipeforge-run --steps 0 --dump-weights) and its window rule
(docs/runtime-data.md: row r of microbatch g starts at sample_key(seed,
step, g, r) mod (N - s)). Attention gets, per row, the [s, s] boolean mask
"key j is visible to query i iff j <= i and both are in the same document"
and RoPE the positions i - (the first token of i's document): the window's
document starts are computed here from the document list or the tokens.

PipeForge runs the program compiled with 1f1b on 2 pipeline ranks (as
threads, --local-ranks 2), with --doc-mask. Checks:
  - the first step's loss within 1e-5 relative;
  - its gradients: a one-step SGD run with lr L gives g = (w0 - w1) / L;
    per tensor max|g - g_torch| <= 1e-5 max|g_torch| + 1e-7;
  - the mask matters: the loss without it differs by more than 1e-3.
Exit 1 on a mismatch.
"""
import json
import math
import os
import random
import struct
import subprocess
import sys

import torch
import torch.nn.functional as F

# PipeForge's file formats, window keys and the shared model pieces, as the
# DeepSeek reference writes them.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deepseek_torch_reference import (read_weights, rms_norm,  # noqa: E402
                                      rotate_half, sample_key,
                                      write_token_file)

SEQ, MB_SIZE, M, RANKS = 32, 2, 4, 2
SGD_LR = 1024.0  # a power of two: (w0 - w1) / L is exact
SEED = 1234      # pipeforge-compile's default --seed
EOS = 255


# --- PipeForge's inputs: weights, data files, windows ---------------------

def write_megatron(prefix, docs):
    """MMIDIDX, uint16 (dtype code 8), one sequence per document."""
    lengths = [len(d) for d in docs]
    pointers = [2 * sum(lengths[:i]) for i in range(len(docs))]
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QB", 1, 8))
        f.write(struct.pack("<QQ", len(docs), len(docs) + 1))
        f.write(struct.pack("<%di" % len(docs), *lengths))
        f.write(struct.pack("<%dq" % len(docs), *pointers))
        f.write(struct.pack("<%dq" % (len(docs) + 1), *range(len(docs) + 1)))
    with open(prefix + ".bin", "wb") as f:
        stream = [t for d in docs for t in d]
        f.write(struct.pack("<%dH" % len(stream), *stream))


def batches(stream, doc_starts, mode, step):
    """The M microbatches of a step: (tokens, targets, document starts),
    each [MB_SIZE, SEQ]. A token's document start is the position in its
    row of the first token of its document (0 if that is before the
    window)."""
    out = []
    for g in range(M):
        rows, starts = [], []
        for r in range(MB_SIZE):
            off = sample_key(SEED, step, g, r) % (len(stream) - SEQ)
            rows.append(stream[off:off + SEQ + 1])
            if mode == "eos":
                ds, cur = [], 0
                for i in range(SEQ):
                    if i > 0 and stream[off + i - 1] == EOS:
                        cur = i
                    ds.append(cur)
            else:
                ds = [max(max(s for s in doc_starts if s <= off + i) - off, 0)
                      for i in range(SEQ)]
            starts.append(ds)
        win = torch.tensor(rows)
        out.append((win[:, :-1], win[:, 1:], torch.tensor(starts)))
    return out


# --- The model, from the published architecture --------------------------

def rope(x, pos, theta):
    """x [b, H, s, d], pos [b, s]: pairs (j, j + d/2) turn by
    pos * theta^(-2j/d)."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = pos.to(torch.float32).unsqueeze(-1) * inv  # [b, s, d/2]
    emb = torch.cat((ang, ang), dim=-1).unsqueeze(1)  # [b, 1, s, d]
    return x * emb.cos() + rotate_half(x) * emb.sin()


class Llama:
    def __init__(self, cfg, params):
        self.c, self.p = cfg, params

    def attention(self, x, pre, starts, masked):
        c, a = self.c, pre + "self_attn."
        b, s, h = x.shape
        H, KV = c["num_attention_heads"], c["num_key_value_heads"]
        d = h // H
        q = (x @ self.p[a + "q_proj.weight"].T).view(b, s, H, d).transpose(1, 2)
        k = (x @ self.p[a + "k_proj.weight"].T).view(b, s, KV, d).transpose(1, 2)
        v = (x @ self.p[a + "v_proj.weight"].T).view(b, s, KV, d).transpose(1, 2)
        i = torch.arange(s)
        if not masked:
            starts = torch.zeros_like(starts)
        pos = i.unsqueeze(0) - starts  # position within the document
        theta = c.get("rope_theta", 10000.0)
        q, k = rope(q, pos, theta), rope(k, pos, theta)
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        # The explicit block-diagonal causal mask [b, s, s].
        j = i.view(1, 1, s)
        visible = (j <= i.view(1, s, 1)) & (j >= starts.unsqueeze(-1))
        probs = scores.masked_fill(~visible.unsqueeze(1), float("-inf"))
        o = (probs.softmax(-1) @ v).transpose(1, 2).reshape(b, s, H * d)
        return o @ self.p[a + "o_proj.weight"].T

    def loss(self, tokens, targets, starts, masked=True):
        c, p = self.c, self.p
        eps = c["rms_norm_eps"]
        x = p["embed_tokens"][tokens]
        for li in range(c["num_hidden_layers"]):
            pre = "layers.%d." % li
            x = x + self.attention(
                rms_norm(x, p[pre + "input_layernorm.weight"], eps), pre,
                starts, masked)
            n = rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps)
            m = pre + "mlp."
            x = x + (F.silu(n @ p[m + "gate_proj.weight"].T) *
                     (n @ p[m + "up_proj.weight"].T)) @ p[m + "down_proj.weight"].T
        logits = rms_norm(x, p["norm.weight"], eps) @ p["lm_head.weight"].T
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               targets.reshape(-1))


def shapes(c):
    h, V, f = c["hidden_size"], c["vocab_size"], c["intermediate_size"]
    H, KV = c["num_attention_heads"], c["num_key_value_heads"]
    d = h // H
    out = {"embed_tokens": [V, h], "norm.weight": [h], "lm_head.weight": [V, h]}
    for i in range(c["num_hidden_layers"]):
        p, a, m = "layers.%d." % i, "layers.%d.self_attn." % i, "layers.%d.mlp." % i
        out.update({
            p + "input_layernorm.weight": [h],
            p + "post_attention_layernorm.weight": [h],
            a + "q_proj.weight": [H * d, h], a + "k_proj.weight": [KV * d, h],
            a + "v_proj.weight": [KV * d, h], a + "o_proj.weight": [h, H * d],
            m + "gate_proj.weight": [f, h], m + "up_proj.weight": [f, h],
            m + "down_proj.weight": [h, f]})
    return out


# --- Driver -------------------------------------------------------------

def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("command failed: %s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
    return r.stdout


def main():
    tools, config, out, mode = sys.argv[1:5]
    assert mode in ("megatron", "eos")
    os.makedirs(out, exist_ok=True)
    with open(config) as f:
        c = json.load(f)
    assert c["model_type"] == "llama" and not c.get("tie_word_embeddings")
    # Documents of 3 to 20 tokens; with eos each ends with EOS (and no
    # other token is EOS).
    rnd = random.Random(7)
    docs = []
    for _ in range(300):
        n = rnd.randint(3, 20)
        body = [rnd.randrange(0, EOS) for _ in range(n)]
        docs.append(body + [EOS] if mode == "eos" else body)
    stream = [t for d in docs for t in d]
    doc_starts, at = [], 0
    for d in docs:
        doc_starts.append(at)
        at += len(d)
    if mode == "eos":
        data = os.path.join(out, "docs.pftok")
        write_token_file(data, stream, c["vocab_size"])
        doc_args = ["--doc-mask", "--eos", str(EOS)]
    else:
        data = os.path.join(out, "docs")
        write_megatron(data, docs)
        doc_args = ["--doc-mask"]

    prog = os.path.join(out, "llama.pfp")
    run([tools + "/pipeforge-compile", config, "--schedule", "1f1b",
         "--ranks", str(RANKS), "--microbatches", str(M), "--seq-len", str(SEQ),
         "--microbatch-size", str(MB_SIZE), "-o", prog])
    pf = [tools + "/pipeforge-run", prog, "--local-ranks", str(RANKS),
          "--data", data] + doc_args
    w0f, w1f = os.path.join(out, "w0.bin"), os.path.join(out, "w1.bin")
    run(pf + ["--steps", "0", "--dump-weights", w0f])
    sgd = run(pf + ["--steps", "1", "--optimizer", "sgd", "--lr", str(SGD_LR),
                    "--dump-weights", w1f])
    w0, w1 = read_weights(w0f), read_weights(w1f)
    shp = shapes(c)
    if sorted(w0) != sorted(shp):
        sys.exit("tensor names differ: %s" % sorted(set(w0) ^ set(shp)))
    params = {n: w0[n].clone().view(shp[n]).requires_grad_(True) for n in shp}
    model = Llama(c, params)

    ok = True
    step0 = batches(stream, doc_starts, mode, 0)
    multi = sum(int((s != 0).any()) for _, _, s in step0)
    loss = torch.stack([model.loss(t, y, s) for t, y, s in step0]).mean()
    loss.backward()
    pf_loss = [float(l.split()[3]) for l in sgd.splitlines()
               if l.startswith("step ")][0]
    rel = abs(pf_loss - loss.item()) / abs(loss.item())
    print("%s: step 1 loss: pipeforge %.6f torch %.6f (relative %.1e)"
          % (mode, pf_loss, loss.item(), rel))
    ok &= rel <= 1e-5
    with torch.no_grad():
        plain = torch.stack([model.loss(t, y, s, masked=False)
                             for t, y, s in step0]).mean().item()
    print("%s: without the mask torch's loss is %.6f; %d of %d microbatches "
          "hold several documents" % (mode, plain, multi, M))
    ok &= abs(plain - loss.item()) > 1e-3 * abs(loss.item()) and multi == M
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
    print("%s: gradients: %d tensors, worst %s at %.2f of the tolerance"
          % (mode, len(shp), worst_name, worst))
    print("MATCH" if ok else "MISMATCH")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
