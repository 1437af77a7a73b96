#!/usr/bin/env python3
"""Tokenizing speed: pipeforge-tokenize --tokenizer against the `tokenizers`
package, one thread each, on the same corpus (benchmarks/README.md,
"Tokenizer speed").

    ~/.cache/pipeforge/torch-venv/bin/python benchmarks/tokenize_speed.py \
        [--tools build/bin] [--mb 20] [--runs 5] [--out DIR]

The corpus is generated (no hub is reachable): web-like documents of 1-10
KB, mostly English sentences with numbers, punctuation, paragraphs and some
code, one in ten with another script (CJK, Cyrillic, Arabic, Devanagari,
accented Latin) or emoji. Four byte-level BPE tokenizers of 32,000 tokens
are trained on it with `tokenizers`: GPT-2's shape (ByteLevel with its
regex), Llama 3's (Split + ByteLevel), Qwen2's (NFC, Split + ByteLevel)
and DeepSeek-V3's (three Splits + ByteLevel).

Each measurement is one fresh process, repeated --runs times; the table
gives the median and the range of MB/s (10^6 bytes of UTF-8 text per
second):
  pipeforge encode     the encoding loop as pipeforge-tokenize reports it
  pipeforge end to end the whole process: loading tokenizer.json, reading
                       the text, encoding, writing the token file
  tokenizers batch     Tokenizer.encode_batch(docs) in one thread
                       (RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false)
  tokenizers loop      Tokenizer.encode(doc) for each document
The token counts of both sides are compared (the ids themselves are
compared by test/Runtime/tokenize-vs-hf.test).
"""
import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import time

from tokenizers import (Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, trainers)

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
DEEPSEEK = [r"\p{N}{1,3}",
            "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
            r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|"
            r"[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|"
            r"\s*[\r\n]+|\s+(?!\S)|\s+"]
SEPARATOR = "\n=====\n"

WORDS = ("the of and to a in is it you that he was for on are with as I his "
         "they be at one have this from or had by hot word but what some we "
         "can out other were all there when up use your how said an each she "
         "which do their time if will way about many then them write would "
         "like so these her long make thing see him two has look more day "
         "could go come did number sound no most people my over know water "
         "than call first who may down side been now find any new work part "
         "take get place made live where after back little only round man "
         "year came show every good me give our under name very through just "
         "form sentence great think say help low line differ turn cause much "
         "mean before move right boy old too same tell does set three want "
         "air well also play small end put home read hand port large spell "
         "add even land here must big high such follow act why ask men change "
         "went light kind off need house picture try us again animal point "
         "mother world near build self earth father head stand own page "
         "should country found answer school grow study still learn plant "
         "cover food sun four between state keep eye never last let thought "
         "city tree cross farm hard start might story saw far sea draw left "
         "late run don't while press close night real life few north").split()
OTHER = ["这是一个关于分词速度的测试句子。", "東京は日本の首都です。カタカナも使います。",
         "Привет, как дела? Всё хорошо.", "مرحبا بكم في هذا الاختبار",
         "यह एक परीक्षण वाक्य है।", "Ça va très bien, merci beaucoup !",
         "Größe, Übung und Straße", "😀 👍🏽 👨‍👩‍👧 🎉"]
CODE = ["def main():\n    for i in range(10):\n        print(i)\n",
        "int f(int x) { return x * 2 + 1; }\n", "https://example.com/path?q=1"]


def sentence(r):
    n = r.randrange(4, 25)
    words = [r.choice(WORDS) for _ in range(n)]
    if r.random() < 0.3:
        words.insert(r.randrange(n), str(r.randrange(1, 10 ** r.randrange(1, 7))))
    s = " ".join(words)
    s = s[0].upper() + s[1:]
    if r.random() < 0.2:
        k = r.randrange(1, len(words))
        s = s.replace(" ", ", ", 1) if k % 2 else s
    return s + r.choice([".", ".", ".", "?", "!", ":"])


def document(r):
    paras = []
    for _ in range(r.randrange(1, 8)):
        ss = [sentence(r) for _ in range(r.randrange(1, 8))]
        if r.random() < 0.1:
            ss.append(r.choice(OTHER))
        if r.random() < 0.03:
            ss.append("\n" + r.choice(CODE))
        paras.append(" ".join(ss))
    return "\n\n".join(paras)


def make_corpus(path, mb, seed=39):
    r = random.Random(seed)
    docs, total = [], 0
    while total < mb * 1e6:
        d = document(r)
        docs.append(d)
        total += len(d.encode())
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(SEPARATOR.join(docs))
    return docs


def train(kind, docs, path):
    bl = pre_tokenizers.ByteLevel
    tok = Tokenizer(models.BPE(ignore_merges=(kind == "llama3")))
    if kind == "gpt2":
        tok.pre_tokenizer = bl(add_prefix_space=False)
    elif kind in ("llama3", "qwen2"):
        if kind == "qwen2":
            tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3 if kind == "llama3" else QWEN2),
                                 behavior="isolated"),
            bl(add_prefix_space=False, use_regex=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(p), behavior="isolated") for p in DEEPSEEK]
            + [bl(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=32000, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=bl.alphabet(), show_progress=False)
    tok.train_from_iterator(docs[: max(1, len(docs) // 4)], trainer=trainer)
    tok.save(path)


HF_CHILD = r"""
import sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
docs = open(sys.argv[2], encoding="utf-8").read().split(sys.argv[4])
n = sum(len(d.encode()) for d in docs)
t = time.perf_counter()
if sys.argv[3] == "batch":
    k = sum(len(e.ids) for e in tok.encode_batch(docs))
else:
    k = sum(len(tok.encode(d).ids) for d in docs)
dt = time.perf_counter() - t
print(n / 1e6 / dt, k)
"""


def run_tokenizers(tok_path, corpus, mode):
    env = dict(os.environ, RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    out = subprocess.run([sys.executable, "-c", HF_CHILD, tok_path, corpus, mode,
                          SEPARATOR], capture_output=True, text=True, env=env,
                         check=True).stdout.split()
    return float(out[0]), int(out[1])


def run_pipeforge(tools, tok_path, corpus, out):
    t = time.perf_counter()
    p = subprocess.run([os.path.join(tools, "pipeforge-tokenize"), "--tokenizer",
                        tok_path, corpus, "-o", out, "--eos", "none",
                        "--doc-separator", SEPARATOR.replace("\n", "\\n")],
                       capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t
    m = re.search(r"(\d+) tokens .*\nencoded ([0-9.]+) MB in ([0-9.]+) s", p.stdout)
    mb, secs = float(m.group(2)), float(m.group(3))
    return mb / secs, mb / wall, int(m.group(1))


def fmt(xs):
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tools", default="build/bin")
    ap.add_argument("--mb", type=float, default=20)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default="/tmp/pipeforge-tokenize-speed")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    corpus = os.path.join(a.out, "corpus.txt")
    docs = make_corpus(corpus, a.mb)
    size = sum(len(d.encode()) for d in docs) / 1e6
    print(f"corpus: {len(docs)} documents, {size:.1f} MB; {a.runs} runs each; "
          f"cpu: {os.cpu_count()} cores")
    rows = []
    for kind in ["gpt2", "llama3", "qwen2", "deepseek3"]:
        path = os.path.join(a.out, kind + ".json")
        if not os.path.exists(path):
            train(kind, docs, path)
        pf_enc, pf_wall, hf_batch, hf_loop = [], [], [], []
        counts = set()
        for _ in range(a.runs):
            e, w, n = run_pipeforge(a.tools, path, corpus,
                                    os.path.join(a.out, kind + ".pftok"))
            pf_enc.append(e)
            pf_wall.append(w)
            counts.add(("pipeforge", n))
            b, n = run_tokenizers(path, corpus, "batch")
            hf_batch.append(b)
            counts.add(("tokenizers", n))
            lo, n = run_tokenizers(path, corpus, "loop")
            hf_loop.append(lo)
        tokens = {n for _, n in counts}
        if len(tokens) != 1:
            raise SystemExit(f"{kind}: token counts differ: {sorted(counts)}")
        rows.append((kind, tokens.pop(), pf_enc, pf_wall, hf_batch, hf_loop))
    print()
    print("| tokenizer | tokens | pipeforge encode | pipeforge end to end | "
          "tokenizers batch | tokenizers loop | encode / batch |")
    print("|---|---|---|---|---|---|---|")
    for kind, n, e, w, b, lo in rows:
        print(f"| {kind} | {n} | {fmt(e)} | {fmt(w)} | {fmt(b)} | {fmt(lo)} | "
              f"{statistics.median(e) / statistics.median(b):.1f}x |")


if __name__ == "__main__":
    main()
