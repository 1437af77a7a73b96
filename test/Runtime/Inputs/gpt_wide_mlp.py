#!/usr/bin/env python3
"""examples/gpt-tiny.json with a wider MLP (n_inner) and optionally other
fields changed: `gpt_wide_mlp.py SRC OUT n_inner=1000000 n_embd=1024`.
test/Runtime/memory-check*.test."""
import json
import sys

cfg = json.load(open(sys.argv[1]))
for kv in sys.argv[3:]:
    k, v = kv.split("=")
    cfg[k] = int(v)
json.dump(cfg, open(sys.argv[2], "w"), indent=1)
