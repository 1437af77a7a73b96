"""The model families of benchmarks/peer_pytorch.py: their configs (the
Hugging Face-style config.json that pipeforge-compile imports), the PyTorch
modules that mirror PipeForge's definition of each (docs/import.md), and
their FLOP counts.

  gpt    GPT-2 style: pre-LN LayerNorm (eps 1e-5), q/k/v/c_proj linears with
         bias, GELU (tanh), learned positions, untied lm_head.
  llama  Llama style: RMSNorm (x * rsqrt(mean(x^2) + eps) * w), q/k/v/o
         without bias, grouped-query attention, rotary embeddings in the
         rotate-half convention (pairs (j, j + d/2), angle pos *
         theta^(-2j/d), positions 0..s-1), SwiGLU MLP (down(silu(gate x) *
         up x)), untied lm_head.
  moe    Mixtral style: the llama block with the MLP replaced by a sparse
         MoE: router `gate` (no bias), softmax over the experts, top-k,
         the k weights renormalised to sum 1, SwiGLU experts w1 (gate), w3
         (up), w2 (down); no capacity limit (no dropped tokens), no
         auxiliary loss.

Every family: fp32, dropout 0, mean cross-entropy over the tokens.

This module imports nothing outside the standard library at import time
(the driver runs under any python3); the torch pieces take `torch` as an
argument.
"""
import math

FAMILIES = ("gpt", "llama", "moe")

# Shapes per (size, family). mbs: sequences per microbatch; mbs_count:
# microbatches per step.
_BASE = {
    "small": dict(n_layer=4, n_embd=256, n_head=4, seq=128, vocab=256,
                  mbs=2, mbs_count=8),
    "medium": dict(n_layer=12, n_embd=768, n_head=12, seq=256, vocab=50257,
                   mbs=1, mbs_count=4),
}
_EXTRA = {
    ("small", "gpt"): {},
    ("medium", "gpt"): {},
    # Llama: GQA with half the heads as kv heads, SwiGLU width about 8/3 h
    # (a multiple of 16), Llama 3's rope theta and norm epsilon.
    ("small", "llama"): dict(n_kv_head=2, ffn=688, rope_theta=500000.0,
                             eps=1e-5),
    ("medium", "llama"): dict(n_kv_head=4, ffn=2048, rope_theta=500000.0,
                              eps=1e-5, vocab=32000),
    # Mixtral-style MoE: 8 experts, top 2, experts about 1.5 h wide (two
    # active experts cost about one dense Llama MLP).
    ("small", "moe"): dict(n_kv_head=2, ffn=384, experts=8, top_k=2,
                           rope_theta=1000000.0, eps=1e-5),
    ("medium", "moe"): dict(n_layer=8, n_kv_head=4, ffn=1024, experts=8,
                            top_k=2, rope_theta=1000000.0, eps=1e-5,
                            vocab=32000),
}


def model_cfg(size, family):
    cfg = dict(_BASE[size])
    cfg.update(_EXTRA[(size, family)])
    cfg["family"] = family
    return cfg


def describe(cfg):
    f = cfg["family"]
    s = (f"{f}: {cfg['n_layer']} layers, hidden {cfg['n_embd']}, "
         f"{cfg['n_head']} heads")
    if f != "gpt":
        s += f" ({cfg['n_kv_head']} kv)"
        s += (f", SwiGLU {cfg['ffn']}" if f == "llama" else
              f", {cfg['experts']} experts top-{cfg['top_k']} of width {cfg['ffn']}")
    return s + f", seq {cfg['seq']}, vocab {cfg['vocab']}"


def hf_config(cfg):
    """The config.json pipeforge-compile reads."""
    f = cfg["family"]
    if f == "gpt":
        return {"model_type": "gpt2", "n_layer": cfg["n_layer"],
                "n_embd": cfg["n_embd"], "n_head": cfg["n_head"],
                "n_inner": None, "vocab_size": cfg["vocab"],
                "n_positions": cfg["seq"], "layer_norm_epsilon": 1e-5,
                "initializer_range": 0.02, "attn_pdrop": 0.0,
                "resid_pdrop": 0.0, "embd_pdrop": 0.0,
                "activation_function": "gelu_new",
                "tie_word_embeddings": False}
    c = {"model_type": "llama" if f == "llama" else "mixtral",
         "num_hidden_layers": cfg["n_layer"], "hidden_size": cfg["n_embd"],
         "num_attention_heads": cfg["n_head"],
         "num_key_value_heads": cfg["n_kv_head"],
         "intermediate_size": cfg["ffn"], "vocab_size": cfg["vocab"],
         "max_position_embeddings": cfg["seq"],
         "rope_theta": cfg["rope_theta"], "rms_norm_eps": cfg["eps"],
         "initializer_range": 0.02, "attention_dropout": 0.0,
         "tie_word_embeddings": False}
    if f == "moe":
        c.update(num_local_experts=cfg["experts"],
                 num_experts_per_tok=cfg["top_k"])
    return c


# --- names in PipeForge's program listing ----------------------------------

def table_name(cfg):
    return "wte" if cfg["family"] == "gpt" else "embed_tokens"


def layer_of(cfg, name):
    """The layer index a parameter name belongs to, or None (counted once
    per layer, on the layer's first norm)."""
    key = (".ln_1.weight" if cfg["family"] == "gpt"
           else ".input_layernorm.weight")
    head = "h." if cfg["family"] == "gpt" else "layers."
    if name.startswith(head) and name.endswith(key):
        return int(name.split(".")[1])
    return None


# --- FLOPs ------------------------------------------------------------------

def linears(cfg):
    """(name, in, out, tokens fraction) of every matmul a token passes per
    layer: the fraction is the share of tokens that take it (MoE experts:
    top_k / experts of the tokens each, k of them in all)."""
    h, f = cfg["n_embd"], cfg["family"]
    if f == "gpt":
        return [("qkv", h, 3 * h, 1.0), ("attn_out", h, h, 1.0),
                ("mlp_up", h, 4 * h, 1.0), ("mlp_down", 4 * h, h, 1.0)]
    d = h // cfg["n_head"]
    kv = cfg["n_kv_head"] * d
    att = [("q", h, h, 1.0), ("kv", h, 2 * kv, 1.0), ("o", h, h, 1.0)]
    if f == "llama":
        return att + [("gate_up", h, 2 * cfg["ffn"], 1.0),
                      ("down", cfg["ffn"], h, 1.0)]
    k = cfg["top_k"]
    return att + [("router", h, cfg["experts"], 1.0),
                  ("expert_gate_up", h, 2 * cfg["ffn"], float(k)),
                  ("expert_down", cfg["ffn"], h, float(k))]


def flops_per_token(cfg):
    """Model FLOPs of one training token (forward + backward), the
    convention of Megatron-LM / PaLM: 6 x (the matmul parameters a token
    uses: the layers' linears, MoE: the router and top_k experts, and the
    lm_head; not the embedding lookup) plus the attention's score and value
    products, 6 x L x s x h per token for causal attention (half of the
    12 L s h of the full score matrix, which is what both sides compute)."""
    h, L, s = cfg["n_embd"], cfg["n_layer"], cfg["seq"]
    per_layer = sum(i * o * frac for _, i, o, frac in linears(cfg))
    matmul_params = L * per_layer + h * cfg["vocab"]
    return 6.0 * matmul_params + 6.0 * L * s * h


def gemm_shapes(cfg):
    """(M, N, K) of the forward GEMMs y[M, N] = x[M, K] W[N, K]^T of one
    microbatch, with their FLOP weight per microbatch; the sgemm rate is
    measured over these."""
    M = cfg["mbs"] * cfg["seq"]
    out = []
    for name, i, o, frac in linears(cfg):
        if name == "router":
            continue
        m = M
        if cfg["family"] == "moe" and name.startswith("expert"):
            m = max(1, int(M * frac / cfg["experts"]))  # rows per expert
            out.append((m, o, i, 2.0 * M * frac * i * o * cfg["n_layer"]))
        else:
            out.append((m, o, i, 2.0 * m * i * o * cfg["n_layer"]))
    out.append((M, cfg["vocab"], cfg["n_embd"], 2.0 * M * cfg["vocab"] * cfg["n_embd"]))
    return out


# --- the PyTorch modules ----------------------------------------------------

def build_stage_class(torch, cfg, gqa_mode="enable_gqa"):
    """Stage(layers, first, last): the given layers; the embeddings when
    first, the final norm and lm_head when last. Parameter names are
    PipeForge's (the embedding tables add '.weight')."""
    nn, F = torch.nn, torch.nn.functional
    fam, H, nh = cfg["family"], cfg["n_embd"], cfg["n_head"]
    d = H // nh

    if fam == "gpt":
        eps = 1e-5

        class Attn(nn.Module):
            def __init__(self):
                super().__init__()
                self.q, self.k, self.v = nn.Linear(H, H), nn.Linear(H, H), nn.Linear(H, H)
                self.c_proj = nn.Linear(H, H)

            def forward(self, x):
                B, S, _ = x.shape
                sh = lambda t: t.view(B, S, nh, d).transpose(1, 2)
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

            def forward(self, x, rope=None):
                x = x + self.attn(self.ln_1(x))
                return x + self.mlp(self.ln_2(x))

        class Stage(nn.Module):
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

    # Llama and the Mixtral-style MoE.
    kvh, eps, theta = cfg["n_kv_head"], cfg["eps"], cfg["rope_theta"]
    rep = nh // kvh

    def rope_tables(s):
        inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        ang = torch.outer(torch.arange(s, dtype=torch.float32), inv)
        emb = torch.cat((ang, ang), dim=-1)  # [s, d]
        return emb.cos(), emb.sin()

    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = nn.Linear(H, nh * d, bias=False)
            self.k_proj = nn.Linear(H, kvh * d, bias=False)
            self.v_proj = nn.Linear(H, kvh * d, bias=False)
            self.o_proj = nn.Linear(nh * d, H, bias=False)

        def forward(self, x, rope):
            B, S, _ = x.shape
            cos, sin = rope
            q = self.q_proj(x).view(B, S, nh, d).transpose(1, 2)
            k = self.k_proj(x).view(B, S, kvh, d).transpose(1, 2)
            v = self.v_proj(x).view(B, S, kvh, d).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            if rep == 1:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            elif gqa_mode == "enable_gqa":
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                   enable_gqa=True)
            else:
                y = F.scaled_dot_product_attention(
                    q, k.repeat_interleave(rep, dim=1),
                    v.repeat_interleave(rep, dim=1), is_causal=True)
            return self.o_proj(y.transpose(1, 2).reshape(B, S, nh * d))

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            f = cfg["ffn"]
            self.gate_proj = nn.Linear(H, f, bias=False)
            self.up_proj = nn.Linear(H, f, bias=False)
            self.down_proj = nn.Linear(f, H, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Experts(nn.Module):
        def __init__(self):
            super().__init__()
            E, f = cfg["experts"], cfg["ffn"]
            self.w1 = nn.Parameter(torch.empty(E, f, H))
            self.w2 = nn.Parameter(torch.empty(E, H, f))
            self.w3 = nn.Parameter(torch.empty(E, f, H))

    class Moe(nn.Module):
        """Softmax router, top-k, renormalised weights; the tokens sorted by
        expert, each expert one SwiGLU on its contiguous rows (as Hugging
        Face's Mixtral block loops over the experts), the outputs weighted
        and added back per token."""

        def __init__(self):
            super().__init__()
            self.gate = nn.Linear(H, cfg["experts"], bias=False)
            self.experts = Experts()

        def forward(self, x):
            E, k = cfg["experts"], cfg["top_k"]
            t = x.reshape(-1, H)
            probs = F.softmax(self.gate(t), dim=-1)
            wts, idx = probs.topk(k, dim=-1)
            wts = wts / wts.sum(-1, keepdim=True)
            flat = idx.reshape(-1)
            order = flat.argsort(stable=True)
            counts = torch.bincount(flat, minlength=E).tolist()
            tok = order // k
            xs = t.index_select(0, tok)
            ys, at = [], 0
            w1, w2, w3 = self.experts.w1, self.experts.w2, self.experts.w3
            for e, n in enumerate(counts):
                if n == 0:
                    continue
                xe = xs[at:at + n]
                ys.append(F.linear(F.silu(F.linear(xe, w1[e])) * F.linear(xe, w3[e]), w2[e]))
                at += n
            y = torch.cat(ys) * wts.reshape(-1, 1).index_select(0, order)
            return torch.zeros_like(t).index_add(0, tok, y).view_as(x)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = nn.RMSNorm(H, eps=eps)
            self.self_attn = Attn()
            self.post_attention_layernorm = nn.RMSNorm(H, eps=eps)
            if fam == "llama":
                self.mlp = Mlp()
            else:
                self.block_sparse_moe = Moe()

        def forward(self, x, rope):
            x = x + self.self_attn(self.input_layernorm(x), rope)
            n = self.post_attention_layernorm(x)
            return x + (self.mlp(n) if fam == "llama" else self.block_sparse_moe(n))

    class Stage(nn.Module):
        def __init__(self, layers, first, last):
            super().__init__()
            self.first, self.last = first, last
            if first:
                self.embed_tokens = nn.Embedding(cfg["vocab"], H)
            self.layers = nn.ModuleDict({str(i): Block() for i in layers})
            if last:
                self.norm = nn.RMSNorm(H, eps=eps)
                self.lm_head = nn.Linear(H, cfg["vocab"], bias=False)
            cos, sin = rope_tables(cfg["seq"])
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

        def forward(self, x):
            if self.first:
                x = self.embed_tokens(x)
            s = x.shape[1]
            rope = (self.rope_cos[:s], self.rope_sin[:s])
            for blk in self.layers.values():
                x = blk(x, rope)
            if self.last:
                x = self.lm_head(self.norm(x))
            return x

    return Stage


def pf_name(torch_name):
    """PipeForge's parameter name for a torch parameter name."""
    for t in ("wte.weight", "wpe.weight", "embed_tokens.weight"):
        if torch_name == t:
            return t[:-len(".weight")]
    return torch_name


def load_pf_weights(torch, module, weights):
    with torch.no_grad():
        for name, p in module.named_parameters():
            t = torch.frombuffer(bytearray(weights[pf_name(name)]), dtype=torch.float32)
            p.copy_(t.view_as(p))


def attention_probe(torch, cfg, reps=20):
    """Seconds per forward + backward of one microbatch's attention with
    enable_gqa=True and with the kv heads repeated: the faster is used."""
    import time
    F = torch.nn.functional
    nh, kvh = cfg["n_head"], cfg["n_kv_head"]
    d, b, s = cfg["n_embd"] // nh, cfg["mbs"], cfg["seq"]
    q = torch.randn(b, nh, s, d, requires_grad=True)
    k = torch.randn(b, kvh, s, d, requires_grad=True)
    v = torch.randn(b, kvh, s, d, requires_grad=True)

    def once(mode):
        if mode == "enable_gqa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            r = nh // kvh
            y = F.scaled_dot_product_attention(q, k.repeat_interleave(r, dim=1),
                                               v.repeat_interleave(r, dim=1),
                                               is_causal=True)
        y.sum().backward()

    out = {}
    for mode in ("enable_gqa", "repeat_kv", "enable_gqa", "repeat_kv"):
        once(mode)
        t0 = time.perf_counter()
        for _ in range(reps):
            once(mode)
        dt = (time.perf_counter() - t0) / reps
        out[mode] = min(out.get(mode, math.inf), dt)
    return out
