#!/usr/bin/env python3
"""Peak resident memory of loading a Hugging Face checkpoint, per rank
(issue 39: loading holds at most one tensor's extra copy per rank).

    hf_load_memory.py [--build build] [--layers 22] [--dtype bf16|f32]
                      [--keep DIR]

Writes a random Llama-shaped model of about 1B parameters as a Hugging Face
directory (config.json + model.safetensors, tensor by tensor from NumPy: no
framework holds the model), compiles it for 2 pipeline ranks, and runs
`mpirun -np 2 pipeforge-run --steps 0 --optimizer sgd` twice under
/usr/bin/time: from the program's own initialisers and --init-from the
directory. Prints a table of each rank's peak RSS in both runs, their
difference, and the largest tensor's float32 size (the bound). SGD keeps
the optimizer's state out of the picture (parameters and gradients only).
Needs numpy (the torch venv has it) and ~6 GB of disk and ~12 GB of memory.
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np


def llama_tensors(c):
    h, f, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kv = c["num_key_value_heads"] * (h // c["num_attention_heads"])
    out = [("model.embed_tokens.weight", [v, h])]
    for i in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % i
        out += [(p + "input_layernorm.weight", [h]),
                (p + "self_attn.q_proj.weight", [h, h]),
                (p + "self_attn.k_proj.weight", [kv, h]),
                (p + "self_attn.v_proj.weight", [kv, h]),
                (p + "self_attn.o_proj.weight", [h, h]),
                (p + "post_attention_layernorm.weight", [h]),
                (p + "mlp.gate_proj.weight", [f, h]),
                (p + "mlp.up_proj.weight", [f, h]),
                (p + "mlp.down_proj.weight", [h, f])]
    out += [("model.norm.weight", [h]), ("lm_head.weight", [v, h])]
    return out


def write_model(d, c, dtype):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    tensors = sorted(llama_tensors(c))
    size = 2 if dtype == "bf16" else 4
    header, off = {}, 0
    for name, shape in tensors:
        n = int(np.prod(shape))
        header[name] = {"dtype": "BF16" if dtype == "bf16" else "F32",
                        "shape": shape, "data_offsets": [off, off + n * size]}
        off += n * size
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    rng = np.random.default_rng(0)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for name, shape in tensors:
            x = (rng.standard_normal(int(np.prod(shape)), dtype=np.float32)
                 * 0.02)
            if dtype == "bf16":
                x = (x.view(np.uint32) >> 16).astype(np.uint16)
            f.write(x.tobytes())
    params = sum(int(np.prod(s)) for _, s in tensors)
    largest = max(int(np.prod(s)) for _, s in tensors)
    return params, largest


def peak_rss(cmd):
    """Each rank's peak RSS in MB (/usr/bin/time -f per process)."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("failed: %s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
    return sorted(int(x) / 1024 for x in re.findall(r"PEAKRSS (\d+)", r.stderr))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--layers", type=int, default=22)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--keep", default="")
    a = ap.parse_args()
    tools = os.path.abspath(os.path.join(a.build, "bin"))
    work = a.keep or tempfile.mkdtemp(prefix="pf-hfload-")
    c = {"model_type": "llama", "num_hidden_layers": a.layers,
         "hidden_size": 2048, "intermediate_size": 5632,
         "num_attention_heads": 32, "num_key_value_heads": 4,
         "vocab_size": 32000, "max_position_embeddings": 2048,
         "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
    d = os.path.join(work, "llama-1b")
    params, largest = write_model(d, c, a.dtype)
    prog = os.path.join(work, "p.pfp")
    subprocess.run([tools + "/pipeforge-compile", d, "--schedule", "1f1b",
                    "--ranks", "2", "--microbatches", "2", "--seq-len", "16",
                    "-o", prog], check=True)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    os.environ.update(env)
    run = ["mpirun", "-np", "2", "/usr/bin/time", "-f", "PEAKRSS %M",
           tools + "/pipeforge-run", prog, "--steps", "0", "--optimizer",
           "sgd", "--quiet"]
    base = peak_rss(run)
    load = peak_rss(run + ["--init-from", d])
    print("model: %.2fB parameters (%d layers), %s file %.1f GB; largest "
          "tensor %.0f MB as float32" % (params / 1e9, a.layers, a.dtype,
                                         os.path.getsize(os.path.join(
                                             d, "model.safetensors")) / 1e9,
                                         largest * 4 / 2**20))
    print("| process | peak RSS, initialisers (MB) | peak RSS, --init-from (MB) "
          "| difference (MB) |")
    print("|---|---|---|---|")
    for r, (x, y) in enumerate(zip(base, load)):
        print("| %d | %.0f | %.0f | %+.0f |" % (r, x, y, y - x))
    if not a.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
