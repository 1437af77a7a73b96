#!/usr/bin/env python3
"""pipeforge-tokenize --tokenizer against the reference libraries.

    tokenize_vs_hf.py TOOLS OUTDIR [--mb MB] [--only NAME]

No hub is reachable, so the tokenizers are trained here on a generated
mixed corpus (Latin with accents and combining marks, Greek, Cyrillic,
Arabic, Hebrew, Devanagari, Thai, CJK, Hangul, emoji with skin tones, ZWJ
sequences, flags and keycaps, runs of spaces / tabs / newlines / Unicode
spaces, digits and long numbers in several scripts, contractions in any
case, code, URLs, and special tokens inside the text), then saved as
tokenizer.json files of the byte-level BPE families:

  gpt2        ByteLevel(use_regex) pre-tokenizer, <|endoftext|>
  gpt2-prefix the same with add_prefix_space, a lstrip/rstrip added token
              and a single_word one
  llama3      Split(Llama 3's regex) + ByteLevel(use_regex=False),
              ignore_merges, a <|begin_of_text|> template, an EOS from
              tokenizer_config.json, reserved special tokens up to id
              70000 (so 4-byte tokens)
  qwen2       Qwen2's NFC normalizer, Split(Qwen2's regex: single digits) +
              ByteLevel, merges saved as "a b" strings
  deepseek3   DeepSeek-V3's three Splits (digits, CJK, the rest) + ByteLevel

and one SentencePiece BPE model (byte fallback, as Llama 2's). For each,
pipeforge-tokenize writes the corpus' documents (several input files, some
split by --doc-separator, one of several MB with very long runs) and every
id must equal `tokenizers`' encode(doc).ids (SentencePiece's encode) with
the EOS appended; --decode must give the library's decode. Prints one line
per tokenizer and MATCH at the end; exit 1 on the first difference, with
its document and position.
"""
import argparse
import json
import os
import random
import shutil
import struct
import subprocess
import sys

from tokenizers import (Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers, AddedToken)

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
DEEPSEEK = [r"\p{N}{1,3}",
            "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
            r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|"
            r"[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|"
            r"\s*[\r\n]+|\s+(?!\S)|\s+"]
SEPARATOR = "\n\n=== DOC ===\n\n"

# --- the corpus ------------------------------------------------------------

WORDS = ("the of and to in is was for on that with as by at from his her "
         "they we you it be this are not have had but which one all were "
         "when there can an your their said each she do how if will up "
         "other about out many then them these so some would make like "
         "him into time has look two more write go see number no way could "
         "people my than first water been call who oil its now find long "
         "down day did get come made may part over new sound take only "
         "little work know place year live me back give most very after "
         "thing our just name good sentence man think say great where help "
         "through much before line right too mean old any same tell boy "
         "follow came want show also around form three small set put end "
         "does another well large must big even such because turn here why "
         "ask went men read need land different home us move try kind hand "
         "picture again change off play spell air away animal house point "
         "page letter mother answer found study still learn should America "
         "world tokenizer pipeline gradient microbatch schedule").split()
CONTRACTIONS = ["don't", "it's", "we're", "they've", "I'm", "you'll", "he'd",
                "IT'S", "WE'RE", "They'VE", "I'M", "YOU'LL", "HE'D", "'s",
                "'T", "it'ſ", "O'Neil", "rock'n'roll", "'", "''", "'re's",
                "don’t", "l'été"]
SCRIPTS = [
    "café naïve façade über mañana Ærøskøbing Dvořák Łódź São Paulo",
    "cafe\u0301 nai\u0308ve A\u030a e\u0301\u0301\u0301 x\u0327\u0306",
    "Καλημέρα κόσμε, ΑΒΓ αβγ ΐ ϴ", "Привет, мир! Ёлка ёж ЩЩщ",
    "مرحبا بالعالم مَرْحَبًا ١٢٣٤٥", "שלום עולם שָׁלוֹם",
    "नमस्ते दुनिया क्षत्रिय ०१२३", "สวัสดีชาวโลก ภาษาไทย ๑๒๓",
    "你好世界，这是一个测试。中文分词很难", "こんにちは世界、カタカナとひらがな。ﾊﾝｶｸ",
    "안녕하세요 세계 한국어 \u1100\u1161\u11a8", "「引用」『二重』（括弧）【見出し】〜",
    "ＡＢＣ　ｄｅｆ　１２３", "ǅemal ʰa ª º ǈ Ǳ",
    "ſ ſſ Kelvin \u212a \u212b ﬁ ﬂ ß ẞ", "Ⅻ Ⅳ ² ³ ¼ ½ ① ⑩ ∞",
    "\ue000\ue001 private", "zero\u200bwidth\u200c\u200djoin\ufeffbom",
    "a\u00a0b\u3000c\u2009d\u202fe\u205ff\u1680g", "x\x1cy\x1dz\x1e\x1fw",
    "line\x0bfeed\x0cform\x85nel\u2028ls\u2029ps",
    # For NFC: decomposed letters, singletons, exclusions, reordering, jamo.
    "A\u030a \u212b \u2126 \uf900 \u0958 \ufb1d a\u0301\u0323 o\u0308\u0304 \u0344"
    " \u0f73 \u1100\u1161\u11a8 \uac00\u11a8 \u0301a x\u0301",
]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🇺🇸🇫🇷", "❤️", "1️⃣", "#️⃣", "©",
         "™", "🧑🏿‍💻", "👩‍❤️‍💋‍👨", "🙂🙃", "✈︎", "☃", "🐍🦀"]
SYMBOLS = ["!!!", "...", "?!", "---", "()", "[]", "{}", "@#$%^&*", "\\",
           "`~", "<<>>", "->", "=>", "//", "/* */", "§¶", "€$£¥₿", "±×÷",
           "—–", "“quoted”", "«guillemets»", "„low“", "…", "•", "‰", "™®"]
CODE = ["for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
        "def f(x):\n    return x**2  # square\n",
        "https://example.com/a/b?c=d&e=f#frag", "user@example.org",
        "x+=1;y-=2;z*=3", "if(a&&b||!c){return;}", "<div class=\"x\">",
        "C:\\Users\\name\\file.txt", "$HOME/.config", "0x1F600 0b1010 1e-9"]


def number(r):
    k = r.choice([1, 2, 3, 4, 5, 7, 10, 16, 20, 40])
    s = str(r.randrange(10 ** (k - 1), 10 ** k))
    form = r.random()
    if form < 0.1:
        return s[:1] + "." + s[1:]
    if form < 0.2:
        return f"{int(s):,}"
    if form < 0.25:
        return s.translate(str.maketrans("0123456789", "０１２３４５６７８９"))
    if form < 0.3:
        return s.translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))
    return s


def spaces(r):
    return r.choice([" ", "  ", "   ", " " * r.randrange(4, 40), "\t",
                     "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n",
                     " \n", "\n ", " \n \t ", "\t\n", "  \n\n  ", "\r",
                     "\u00a0", "\u3000", " \u3000 ", "\n" * r.randrange(4, 12)])


def piece(r, specials):
    x = r.random()
    if x < 0.45:
        w = r.choice(WORDS)
        y = r.random()
        if y < 0.1:
            w = w.capitalize()
        elif y < 0.13:
            w = w.upper()
        return w
    if x < 0.52:
        return r.choice(CONTRACTIONS)
    if x < 0.62:
        s = r.choice(SCRIPTS)
        words = s.split(" ")
        i = r.randrange(len(words))
        return " ".join(words[i:i + r.randrange(1, 4)])
    if x < 0.68:
        return "".join(r.choice(EMOJI) for _ in range(r.randrange(1, 4)))
    if x < 0.76:
        return number(r)
    if x < 0.84:
        return r.choice(SYMBOLS)
    if x < 0.88:
        return r.choice(CODE)
    if x < 0.90 and specials:
        return r.choice(specials)
    if x < 0.93:
        return r.choice(WORDS) + r.choice(SYMBOLS)
    return "".join(r.choice("abcdefghijklmnopqrstuvwxyzéüßø") for _ in
                   range(r.randrange(1, 15)))


def document(r, n, specials):
    out = []
    for _ in range(n):
        out.append(piece(r, specials))
        out.append(spaces(r) if r.random() < 0.35 else " ")
    # Start and end with anything, not always a word and a space.
    return "".join(out)[r.randrange(0, 3):]


def corpus(seed, mb, specials):
    """(files, one of them split by SEPARATOR): a list of (name, docs, sep)."""
    r = random.Random(seed)
    files, total = [], 0
    while total < mb * 1e6:
        docs = [document(r, r.choice([1, 2, 5, 20, 100, 400, 1500]), specials)
                for _ in range(r.randrange(1, 30))]
        sep = r.random() < 0.6
        files.append((f"part{len(files):03d}.txt", docs, sep))
        total += sum(len(d.encode()) for d in docs)
    # One large document: a file longer than the scanner's 64 KiB windows,
    # with runs that cross them.
    big = [document(r, 3000, specials), " " * 200000, "x",
           "a" * 150000, "\n" * 70000, "9" * 100001, " " * 70000 + "\n",
           "中" * 40000, "😀" * 30000, "\t \n" * 30000, document(r, 3000, specials)]
    files.append(("big.txt", ["".join(big)], False))
    return files


def write_files(dirname, files):
    os.makedirs(dirname, exist_ok=True)
    paths = []
    for name, docs, sep in files:
        p = os.path.join(dirname, name)
        with open(p, "w", encoding="utf-8", newline="") as f:
            f.write(SEPARATOR.join(docs) if sep else docs[0])
        paths.append(p)
    return paths


def documents(files, use_separator):
    """The documents as pipeforge-tokenize sees them: one per file, or
    split at SEPARATOR; empty ones dropped."""
    out = []
    for _, docs, sep in files:
        text = SEPARATOR.join(docs) if sep else docs[0]
        parts = text.split(SEPARATOR) if use_separator else [text]
        out.extend(p for p in parts if p)
    return out

# --- the tokenizers --------------------------------------------------------


def train_bpe(name, files, outdir, vocab_size):
    # Not on the large document: the trainer is quadratic in a word's length.
    texts = [d for _, docs, _ in files[:-1] for d in docs]
    bl = pre_tokenizers.ByteLevel
    if name in ("gpt2", "gpt2-prefix"):
        specials = ["<|endoftext|>"]
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = bl(add_prefix_space=(name == "gpt2-prefix"))
    elif name in ("llama3", "qwen2"):
        specials = ["<|begin_of_text|>", "<|end_of_text|>",
                    "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
        if name == "qwen2":
            specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        tok = Tokenizer(models.BPE(ignore_merges=(name == "llama3")))
        if name == "qwen2":
            tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3 if name == "llama3" else QWEN2),
                                 behavior="isolated", invert=False),
            bl(add_prefix_space=False, use_regex=False)])
    elif name == "deepseek3":
        specials = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
                    "<｜▁pad▁｜>"]
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False)
             for p in DEEPSEEK] + [bl(add_prefix_space=False, use_regex=False)])
    else:
        raise SystemExit("unknown tokenizer " + name)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=bl.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    if name == "qwen2":
        # A normalized added token: matched on the NFC text, so in both forms.
        tok.add_tokens([AddedToken("cafe\u0301!", normalized=True)])
    if name == "gpt2-prefix":
        tok.add_tokens([AddedToken("<mask>", lstrip=True, rstrip=True),
                        AddedToken("ony", single_word=True),
                        AddedToken("zz top", normalized=True)])
    if name == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])
    if name == "deepseek3":
        bos = tok.token_to_id("<｜begin▁of▁sentence｜>")
        tok.post_processor = processors.TemplateProcessing(
            single="<｜begin▁of▁sentence｜> $A",
            special_tokens=[("<｜begin▁of▁sentence｜>", bos)])
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "tokenizer.json")
    tok.save(path)
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    if name == "llama3":
        # Reserved special tokens up to id 70000, as Llama 3 has 256 of them
        # beyond its 128000: ids above 65535 need 4-byte tokens.
        top = max(j["model"]["vocab"].values())
        # In the model's vocab too: tokenizers renumbers an added token that
        # is not, but keeps the vocab's ids.
        for k, i in enumerate([top + 1, 65535, 65536, 70000]):
            j["model"]["vocab"][f"<|reserved_special_token_{k}|>"] = i
            j["added_tokens"].append({
                "id": i, "content": f"<|reserved_special_token_{k}|>",
                "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True})
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump({"eos_token": "<|eot_id|>", "bos_token": "<|begin_of_text|>"}, f)
    if name == "qwen2":
        # The older "a b" form of the merges (tokenizers < 0.20 wrote it).
        j["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m
                                for m in j["model"]["merges"]]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    return path, Tokenizer.from_file(path)


def default_eos(name, tok):
    return tok.token_to_id({"gpt2": "<|endoftext|>", "gpt2-prefix": "<|endoftext|>",
                            "llama3": "<|eot_id|>", "qwen2": "<|endoftext|>",
                            "deepseek3": "<｜end▁of▁sentence｜>"}[name])

# --- checking ----------------------------------------------------------------


def read_pftok(path):
    with open(path, "rb") as f:
        b = f.read()
    assert b[:8] == b"PFTOK\0\0\0", path
    _, width, n, vocab = struct.unpack_from("<IIQQ", b, 8)
    fmt = {2: "H", 4: "I"}[width]
    return list(struct.unpack_from("<%d%s" % (n, fmt), b, 32)), width, vocab


def run(cmd):
    p = subprocess.run(cmd, capture_output=True)
    if p.returncode != 0:
        sys.stdout.write(p.stdout.decode(errors="replace"))
        sys.stdout.write(p.stderr.decode(errors="replace"))
        raise SystemExit("FAILED: " + " ".join(cmd))
    return p.stdout


def compare(name, docs, expected_docs, got, eos, describe):
    exp = [i for d in expected_docs for i in d]
    if exp == got:
        return
    # Find the document and position of the first difference.
    pos = 0
    for k, d in enumerate(expected_docs):
        if got[pos:pos + len(d)] != d:
            j = next((j for j in range(len(d)) if pos + j >= len(got) or
                      got[pos + j] != d[j]), len(d))
            print(f"{name}: MISMATCH in document {k} at token {j}")
            print("  expected:", d[max(0, j - 5):j + 8])
            print("  got:     ", got[pos + max(0, j - 5):pos + j + 8])
            print("  tokens:  ", [describe(i) for i in d[max(0, j - 5):j + 8]])
            print("  document starts:", repr(docs[k][:200]))
            raise SystemExit(1)
        pos += len(d)
    print(f"{name}: MISMATCH: {len(got)} tokens, expected {len(exp)}")
    raise SystemExit(1)


# Pre-tokenizer edge cases, compared piece by piece (--pieces).
EDGES = ["it's IT'S it'ſ 'S 'k \u212a we'Re '", "   leading and trailing   ",
         "a  \n\n  b\t\t\nc", "x\r\n\r\ny\r", " \u3000 \u00a0x\u2028y",
         "12 123 1234567", "١٢٣٤٥٦ ２０２４ ²³ Ⅻ", "ab12cd345ef",
         "😀👍🏽 👨‍👩‍👧‍👦!! 🇯🇵1️⃣", "中文abc日本語カタカナ한국어ﾊﾝ", "!!!abc ?!x ...\n\n",
         "e\u0301\u0301 x\u0300y", "\x1c\x1d a\x85b\x0b", "a\u200bb\ufeffc",
         "Ǆ ǅ ǆ ʰa", "'" * 3 + "s", "don't'll", "\n", " ", "a", "\t \n",
         "$HOME/.x+=1 /* c */ a->b", "«quoted» „x“ — y",
         "cafe\u0301 \u212b\u2126 \u1100\u1161\u11a8 a\u0301\u0323 \u0958 \u0301x"]


def check_pieces(name, tools, outdir, tokenizer_path, tok):
    for k, text in enumerate(EDGES):
        p = os.path.join(outdir, name, f"edge{k}.txt")
        with open(p, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        out = run([os.path.join(tools, "pipeforge-tokenize"), "--tokenizer",
                   tokenizer_path, "--pieces", p]).decode("utf-8")
        got = [json.loads(line) for line in out.split("\n") if line]
        norm = tok.normalizer.normalize_str(text) if tok.normalizer else text
        want = [norm[s:e] for _, (s, e) in tok.pre_tokenizer.pre_tokenize_str(norm)]
        if got != want:
            print(f"{name}: pieces of {text!r}:\n  expected {want}\n  got      {got}")
            raise SystemExit(1)


def check_hf(name, tools, outdir, files, paths, tokenizer_path, tok):
    if name != "gpt2-prefix":
        check_pieces(name, tools, outdir, tokenizer_path, tok)
    eos = default_eos(name, tok)
    use_sep = name != "gpt2-prefix"
    docs = documents(files, use_sep)
    expected = []
    for enc in tok.encode_batch(docs):
        ids = list(enc.ids)
        if not ids or ids[-1] != eos:
            ids.append(eos)
        expected.append(ids)
    out = os.path.join(outdir, name, "corpus.pftok")
    cmd = [os.path.join(tools, "pipeforge-tokenize"), "--tokenizer",
           tokenizer_path, *paths, "-o", out]
    if use_sep:
        cmd += ["--doc-separator", SEPARATOR.replace("\n", "\\n")]
    summary = run(cmd).decode()
    got, width, vocab = read_pftok(out)
    compare(name, docs, expected, got, eos, tok.id_to_token)
    want_width = 2 if vocab <= 65536 else 4
    if width != want_width or vocab < tok.get_vocab_size():
        raise SystemExit(f"{name}: width {width} vocab {vocab}, expected "
                         f"width {want_width} and vocab >= {tok.get_vocab_size()}")
    # --decode: the library's decode of the same ids.
    text = run([os.path.join(tools, "pipeforge-tokenize"), "--tokenizer",
                tokenizer_path, "--decode", out])
    # --decode writes the bytes; tokenizers makes them a str, invalid
    # UTF-8 (a token cut inside a character) replaced as Python does it.
    want = tok.decode(got, skip_special_tokens=False)
    if text.decode("utf-8", errors="replace") != want:
        raise SystemExit(f"{name}: --decode differs from tokenizers' decode")
    print(f"{name}: {len(docs)} documents, {len(got)} tokens, {width}-byte, "
          f"vocab {vocab}, EOS {eos}: equal; decode equal" +
          ("" if name == "gpt2-prefix" else
           f"; {len(EDGES)} edge cases' pieces equal"))
    sys.stdout.flush()
    return summary


def check_sentencepiece(tools, outdir, files, paths):
    import sentencepiece as spm
    d = os.path.join(outdir, "sentencepiece")
    os.makedirs(d, exist_ok=True)
    train = os.path.join(d, "train.txt")
    with open(train, "w", encoding="utf-8") as f:
        for _, docs, _ in files[:-1]:
            for doc in docs:
                for line in doc.splitlines():
                    if line.strip():
                        f.write(line[:2000] + "\n")
    prefix = os.path.join(d, "tokenizer")
    spm.SentencePieceTrainer.train(
        input=train, model_prefix=prefix, vocab_size=3000, model_type="bpe",
        byte_fallback=True, character_coverage=0.9995, num_threads=2,
        input_sentence_size=200000, shuffle_input_sentence=True,
        max_sentence_length=8192, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    eos = sp.eos_id()
    docs = documents(files, True)
    expected = [sp.encode(doc) + [eos] for doc in docs]
    out = os.path.join(d, "corpus.pftok")
    run([os.path.join(tools, "pipeforge-tokenize"), "--tokenizer",
         prefix + ".model", *paths, "-o", out, "--doc-separator",
         SEPARATOR.replace("\n", "\\n")])
    got, width, vocab = read_pftok(out)
    compare("sentencepiece", docs, expected, got, eos, sp.id_to_piece)
    text = run([os.path.join(tools, "pipeforge-tokenize"), "--tokenizer",
                prefix + ".model", "--decode", out])
    if text != sp.decode(got).encode("utf-8"):
        raise SystemExit("sentencepiece: --decode differs from sentencepiece's decode")
    # A model's folder whose tokenizer.json is a SentencePiece conversion
    # (Llama 2's: Prepend and Replace normalizers, no byte-level BPE): the
    # tokenizer.model beside it is used.
    folder = os.path.join(d, "model-folder")
    os.makedirs(folder, exist_ok=True)
    shutil.copy(prefix + ".model", os.path.join(folder, "tokenizer.model"))
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        json.dump({"normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
            "pre_tokenizer": None, "model": {"type": "BPE", "vocab": {}, "merges": []}}, f)
    out2 = os.path.join(d, "folder.pftok")
    run([os.path.join(tools, "pipeforge-tokenize"), "--tokenizer", folder,
         *paths, "-o", out2, "--doc-separator", SEPARATOR.replace("\n", "\\n")])
    if read_pftok(out2)[0] != got:
        raise SystemExit("sentencepiece: the model folder gave other ids")
    print(f"sentencepiece: {len(docs)} documents, {len(got)} tokens, "
          f"{width}-byte, vocab {vocab}, EOS {eos}: equal; decode equal; "
          "the folder's tokenizer.model chosen")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tools")
    ap.add_argument("outdir")
    ap.add_argument("--mb", type=float, default=2.0,
                    help="corpus size beside the large document (MB)")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    all_names = ["gpt2", "gpt2-prefix", "llama3", "qwen2", "deepseek3",
                 "sentencepiece"]
    names = all_names
    if a.only:
        names = a.only.split(",")
    os.makedirs(a.outdir, exist_ok=True)
    for name in names:
        specials = {"gpt2": ["<|endoftext|>"],
                    "gpt2-prefix": ["<|endoftext|>", "<mask>", " <mask> ", "ony",
                                    "zz top", "phony ony"],
                    "llama3": ["<|begin_of_text|>", "<|eot_id|>",
                               "<|reserved_special_token_3|>", "<|end_of_text|>"],
                    "qwen2": ["<|im_start|>", "<|im_end|>", "<|endoftext|>",
                              "caf\u00e9!", "cafe\u0301!"],
                    "deepseek3": ["<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"],
                    "sentencepiece": []}[name]
        files = corpus(1234 + all_names.index(name), a.mb, specials)
        paths = write_files(os.path.join(a.outdir, name, "text"), files)
        if name == "sentencepiece":
            check_sentencepiece(a.tools, a.outdir, files, paths)
            continue
        path, tok = train_bpe(name, files, a.outdir,
                              8000 if name != "deepseek3" else 20000)
        check_hf(name, a.tools, a.outdir, files, paths, path, tok)
    print("MATCH")


if __name__ == "__main__":
    main()
