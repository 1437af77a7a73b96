#!/usr/bin/env python3
"""Writes the tokenizer.json of this folder: a tiny byte-level BPE of the
Llama 3 shape (Llama 3's Split regex, then ByteLevel without its own regex,
a <|begin_of_text|> template, <|end_of_text|> named EOS by
tokenizer_config.json), trained with the `tokenizers` package on the
four-line corpus of docs/runtime-data.md. The example of
docs/runtime-data.md, "Tokenizing with the model's tokenizer", uses it.

    python3 examples/tokenizer-tiny/make.py   # needs `tokenizers`
"""
import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from tokenizers import processors, trainers

TEXT = """It was the best of times, it was the worst of times, it was the age of
wisdom, it was the age of foolishness, it was the epoch of belief, it was
the epoch of incredulity, it was the season of Light, it was the season of
Darkness, it was the spring of hope, it was the winter of despair.
"""
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

here = os.path.dirname(os.path.abspath(__file__))
tok = Tokenizer(models.BPE(ignore_merges=True))
tok.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(
    vocab_size=320, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
tok.train_from_iterator([TEXT] * 4, trainer=trainer)
tok.post_processor = processors.TemplateProcessing(
    single="<|begin_of_text|> $A",
    special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))])
tok.save(os.path.join(here, "tokenizer.json"))
with open(os.path.join(here, "tokenizer_config.json"), "w") as f:
    json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"},
              f, indent=2)
    f.write("\n")
