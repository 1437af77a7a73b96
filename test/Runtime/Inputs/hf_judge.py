#!/usr/bin/env python3
"""transformers as the judge of PipeForge's Hugging Face interchange
(docs/huggingface.md, "Checked by transformers").

    hf_judge.py TOOLS OUTDIR FAMILY [FAMILY...]

For each family (gpt2, llama, mixtral, qwen2_moe, deepseek_v2, deepseek_v3):
  1. transformers builds a tiny random model from a config and saves it
     (save_pretrained; float32, or bfloat16 for --bf16 families, sharded for
     the ones in SHARDED), as a user's Hugging Face model directory is;
  2. pipeforge-compile compiles the directory (its config.json) pipelined:
     DualPipeV with expert parallelism for the MoE families, tensor x
     pipeline parallelism for llama, ZB-V with two data-parallel replicas
     and ZeRO-1 for gpt2;
  3. round trip: pipeforge-run --init-from DIR --steps 0 --save-hf OUT: every
     tensor of OUT equals DIR's bitwise (converted to float32), and the
     config loads;
  4. the loss of PipeForge's first step (--init-from, before any update)
     equals transformers' loss of the same microbatches within 1e-5
     relative;
  5. PipeForge trains 3 AdamW steps and exports (--save-hf; and
     pipeforge-export of the step's checkpoint, bitwise the same); transformers
     loads the export with no missing or unexpected keys, and its loss on a
     held-out batch equals PipeForge's evaluation of the same batch (a run
     --init-from the export at learning rate 0) within 1e-5 relative.
Prints one line per check and MATCH at the end; exits 1 on a mismatch.
"""
import json
import os
import subprocess
import sys

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deepseek_torch_reference import sample_key, write_token_file  # noqa

SEQ, MB_SIZE, M = 16, 2, 4
SEED = 1234  # pipeforge-compile's default --seed
VOCAB = 128
TOL = 1e-5

CONFIGS = {
    "gpt2": dict(model_type="gpt2", n_layer=4, n_embd=32, n_head=4,
                 vocab_size=VOCAB, n_positions=SEQ, bos_token_id=0,
                 eos_token_id=0, attn_pdrop=0.0, resid_pdrop=0.0,
                 embd_pdrop=0.0),
    "llama": dict(model_type="llama", num_hidden_layers=4, hidden_size=32,
                  intermediate_size=64, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=VOCAB,
                  max_position_embeddings=SEQ, rope_theta=10000.0,
                  rms_norm_eps=1e-5, tie_word_embeddings=True,
                  bos_token_id=0, eos_token_id=1),
    "mixtral": dict(model_type="mixtral", num_hidden_layers=4,
                    hidden_size=32, intermediate_size=48,
                    num_attention_heads=4, num_key_value_heads=2,
                    vocab_size=VOCAB, max_position_embeddings=SEQ,
                    num_local_experts=4, num_experts_per_tok=2,
                    rope_theta=1000000.0, bos_token_id=0, eos_token_id=1),
    "qwen2_moe": dict(model_type="qwen2_moe", num_hidden_layers=4,
                      hidden_size=32, intermediate_size=64,
                      moe_intermediate_size=16,
                      shared_expert_intermediate_size=32,
                      num_attention_heads=4, num_key_value_heads=2,
                      vocab_size=VOCAB, max_position_embeddings=SEQ,
                      num_experts=4, num_experts_per_tok=2,
                      norm_topk_prob=False, mlp_only_layers=[0],
                      rope_theta=1000000.0, bos_token_id=0, eos_token_id=1),
    "deepseek_v2": dict(model_type="deepseek_v2", num_hidden_layers=4,
                        hidden_size=32, intermediate_size=64,
                        moe_intermediate_size=16, num_attention_heads=4,
                        num_key_value_heads=4, q_lora_rank=None,
                        kv_lora_rank=16, qk_nope_head_dim=8,
                        qk_rope_head_dim=4, v_head_dim=8,
                        n_routed_experts=4, n_shared_experts=1,
                        num_experts_per_tok=2, first_k_dense_replace=1,
                        # greedy routes over all experts in HF's V2,
                        # whatever the groups and norm_topk_prob say.
                        topk_method="greedy", n_group=2, topk_group=1,
                        routed_scaling_factor=1.0, norm_topk_prob=True,
                        vocab_size=VOCAB, max_position_embeddings=SEQ,
                        rms_norm_eps=1e-5, bos_token_id=0, eos_token_id=1),
    "deepseek_v3": dict(model_type="deepseek_v3", num_hidden_layers=4,
                        hidden_size=32, intermediate_size=64,
                        moe_intermediate_size=16, num_attention_heads=4,
                        num_key_value_heads=4, q_lora_rank=24,
                        kv_lora_rank=16, qk_nope_head_dim=8,
                        qk_rope_head_dim=4, v_head_dim=8,
                        n_routed_experts=8, n_shared_experts=1,
                        num_experts_per_tok=2, first_k_dense_replace=1,
                        n_group=4, topk_group=2, topk_method="noaux_tc",
                        routed_scaling_factor=2.5, norm_topk_prob=True,
                        vocab_size=VOCAB, max_position_embeddings=SEQ,
                        rms_norm_eps=1e-5, rope_scaling=None,
                        bos_token_id=0, eos_token_id=1),
}
# How each family is compiled: (ranks, extra compile flags, processes);
# GPT-2 also trains with ZeRO-1 (RUN_FLAGS).
LAYOUT = {
    "gpt2": (2, ["--schedule", "zbv", "--dp", "2"], 4),
    "llama": (2, ["--schedule", "1f1b", "--tp", "2"], 4),
    "mixtral": (2, ["--schedule", "dualpipev", "--ep", "2"], 4),
    "qwen2_moe": (2, ["--schedule", "dualpipev", "--ep", "2"], 4),
    "deepseek_v2": (2, ["--schedule", "dualpipev", "--ep", "2"], 4),
    "deepseek_v3": (2, ["--schedule", "dualpipev", "--ep", "2"], 4),
}
RUN_FLAGS = {"gpt2": ["--zero", "1"]}
BF16 = {"mixtral"}      # saved in bfloat16: converted on load
SHARDED = {"qwen2_moe"}  # saved in several shards with an index


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("command failed: %s\n%s%s" % (" ".join(cmd), r.stdout,
                                                r.stderr))
    return r.stdout


def losses(text):
    return [float(l.split()[3]) for l in text.splitlines()
            if l.startswith("step ")]


def batches(tokens, step, count):
    """PipeForge's microbatches of a step: row r of global microbatch g is
    the window at sample_key(seed, step, g, r) mod (N - s)."""
    n = len(tokens)
    out = []
    for g in range(count):
        rows = [sample_key(SEED, step, g, r) % (n - SEQ) for r in range(MB_SIZE)]
        win = torch.tensor([tokens[o:o + SEQ + 1] for o in rows])
        out.append((win[:, :-1], win[:, 1:]))
    return out


def hf_loss(model, data):
    with torch.no_grad():
        ls = []
        for x, y in data:
            logits = model(input_ids=x).logits.float()
            ls.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                      y.reshape(-1)))
        return torch.stack(ls).mean().item()


def rel(a, b):
    return abs(a - b) / abs(b)


def judge(tools, out, family, mpirun):
    d = os.path.join(out, family)
    os.makedirs(d, exist_ok=True)
    cfg = dict(CONFIGS[family])
    # Weights far from the near-uniform predictions of the default 0.02, so
    # that a misplaced row changes the loss by far more than the tolerance.
    cfg["initializer_range"] = 0.2
    mt = cfg.pop("model_type")
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(mt, **cfg)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    # Non-trivial values everywhere (norm weights, biases, the routing
    # bias), so that a misplaced tensor shows.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.01 * torch.randn_like(b))
    src = os.path.join(d, "hf")
    dtype = torch.bfloat16 if family in BF16 else torch.float32
    model.to(dtype).save_pretrained(
        src, max_shard_size="40KB" if family in SHARDED else "5GB")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        src, dtype=torch.float32).eval()
    ok = True

    ranks, flags, procs = LAYOUT[family]
    prog = os.path.join(d, "prog.pfp")
    run([tools + "/pipeforge-compile", src, "--ranks", str(ranks),
         "--microbatches", str(M), "--seq-len", str(SEQ),
         "--microbatch-size", str(MB_SIZE), "-o", prog] + flags)
    # Global microbatches per step: M per expert-parallel rank and replica.
    ep = 2 if "--ep" in flags else 1
    ep *= 2 if "--dp" in flags else 1
    pf = mpirun + ["-np", str(procs), tools + "/pipeforge-run", prog] + \
        RUN_FLAGS.get(family, [])

    torch.manual_seed(1)
    train = torch.randint(0, VOCAB, (2048,)).tolist()
    held = torch.randint(0, VOCAB, (2048,)).tolist()
    train_tok, held_tok = os.path.join(d, "train.tok"), os.path.join(d, "held.tok")
    write_token_file(train_tok, train, VOCAB)
    write_token_file(held_tok, held, VOCAB)

    # 3. Round trip, bitwise.
    rt = os.path.join(d, "roundtrip")
    run(pf + ["--init-from", src, "--steps", "0", "--save-hf", rt,
              "--data", train_tok])
    a, b = load_dir(src), load_dir(rt)
    same = sorted(a) == sorted(b) and all(
        torch.equal(a[k].float(), b[k]) for k in a)
    print("%s: round trip: %d tensors, %s" % (
        family, len(a), "bitwise equal" if same else
        "DIFFERENT: %s" % sorted(k for k in set(a) | set(b)
                                 if k not in a or k not in b or
                                 not torch.equal(a[k].float(), b[k]))[:5]))
    ok &= same

    # 4. The first step's loss against transformers'.
    ck = os.path.join(d, "ckpt")
    text = run(pf + ["--init-from", src, "--steps", "3", "--data", train_tok,
                     "--save-hf", os.path.join(d, "trained"),
                     "--checkpoint-dir", ck, "--save-every", "3"])
    ref = hf_loss(model, batches(train, 0, M * ep))
    got = losses(text)[0]
    print("%s: loss at the imported weights: pipeforge %.6f transformers "
          "%.6f (relative %.1e)" % (family, got, ref, rel(got, ref)))
    ok &= rel(got, ref) <= TOL

    # The checkpoint of the same step, exported offline from its rank
    # files, is the same model.
    exported = os.path.join(d, "exported")
    run([tools + "/pipeforge-export", os.path.join(ck, "step-00000003"),
         "-o", exported])
    a, b = load_dir(os.path.join(d, "trained")), load_dir(exported)
    same = sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
    print("%s: pipeforge-export of the step-3 checkpoint: %s" % (
        family, "bitwise equal to --save-hf" if same else "DIFFERENT"))
    ok &= same

    # 5. The trained export, loaded by transformers, on held-out data.
    trained, info = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.join(d, "trained"), dtype=torch.float32,
        output_loading_info=True)
    keys_ok = not any(info[k] for k in ("missing_keys", "unexpected_keys",
                                        "mismatched_keys"))
    print("%s: export loads: %s" % (family, "no missing or unexpected keys"
                                    if keys_ok else info))
    ok &= keys_ok
    text = run(pf + ["--init-from", os.path.join(d, "trained"), "--steps",
                     "1", "--lr", "0", "--data", held_tok])
    got = losses(text)[0]
    ref = hf_loss(trained.eval(), batches(held, 0, M * ep))
    print("%s: held-out loss after 3 steps: pipeforge %.6f transformers %.6f "
          "(relative %.1e)" % (family, got, ref, rel(got, ref)))
    ok &= rel(got, ref) <= TOL
    return ok


def load_dir(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            out.update(load_file(os.path.join(d, f)))
    return out


def main():
    tools, out = sys.argv[1], sys.argv[2]
    fams = sys.argv[3:] or list(CONFIGS)
    mpirun = ["mpirun", "--oversubscribe"]
    transformers.logging.set_verbosity_error()
    ok = True
    for fam in fams:
        ok &= judge(tools, out, fam, mpirun)
    print("MATCH" if ok else "MISMATCH")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
