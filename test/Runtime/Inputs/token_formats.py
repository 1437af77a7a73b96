#!/usr/bin/env python3
"""Writes one token stream in every format pipeforge-run --data reads
(test/Runtime/data-formats*.test, docs/runtime-data.md).

usage: token_formats.py OUT [--megatron]

The stream is byte-level text (vocab 256): about 40 paragraphs of a small
deterministic language, each a Megatron document of one sequence per line.
Always written, with the standard library only:
  OUT/text.txt                 the text (pipeforge-tokenize makes the .pftok)
  OUT/raw.bin                  nanoGPT's layout: uint16, no header
  OUT/u2.npy, OUT/i4.npy, OUT/i8.npy   np.save's layout, version 1.0
  OUT/mega.bin + OUT/mega.idx  Megatron-LM's MMIDIDX layout, uint16
  OUT/bad-*                    malformed inputs (the error test)
With --megatron (the interpreter of %torch_python), the judges write
instead: numpy the .npy files (np.save) and raw.bin (ndarray.tofile), and
megatron-core's IndexedDatasetBuilder the dataset (mega, uint16), an int32
one (mega32) and a merge of two halves (merged, add_index); megatron-core's
IndexedDataset reads each back and must return the stream.
"""
import os
import random
import struct
import sys


def language():
    rnd = random.Random(20261206)
    nouns = ["cat", "dog", "bird", "fish", "king", "queen", "tree", "ship"]
    verbs = ["sees", "likes", "eats", "finds", "chases", "helps"]
    paragraphs = []
    for _ in range(40):
        lines = []
        for _ in range(rnd.randint(1, 4)):
            words = []
            for _ in range(rnd.randint(2, 5)):
                words.append("the %s %s the %s." % (rnd.choice(nouns), rnd.choice(verbs),
                                                    rnd.choice(nouns)))
            lines.append(" ".join(words) + "\n")
        paragraphs.append(lines)
    return paragraphs


def npy_bytes(tokens, descr, fmt, shape=None):
    shape = shape or "(%d,)" % len(tokens)
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    return (b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode()
            + struct.pack("<%d%s" % (len(tokens), fmt), *tokens))


def megatron_bytes(docs, code=8, fmt="H"):
    """docs: a list of documents, each a list of sequences (token lists)."""
    width = struct.calcsize("<" + fmt)
    lengths, pointers, doc_idx, data, offset = [], [], [0], b"", 0
    for doc in docs:
        for seq in doc:
            lengths.append(len(seq))
            pointers.append(offset)
            offset += len(seq) * width
            data += struct.pack("<%d%s" % (len(seq), fmt), *seq)
        doc_idx.append(len(lengths))
    idx = (b"MMIDIDX\x00\x00" + struct.pack("<QB", 1, code)
           + struct.pack("<QQ", len(lengths), len(doc_idx))
           + struct.pack("<%di" % len(lengths), *lengths)
           + struct.pack("<%dq" % len(pointers), *pointers)
           + struct.pack("<%dq" % len(doc_idx), *doc_idx))
    return idx, data


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def main():
    out = sys.argv[1]
    judges = "--megatron" in sys.argv[2:]
    docs = [[list(line.encode()) for line in p] for p in language()]
    stream = [t for d in docs for s in d for t in s]
    write(os.path.join(out, "text.txt"), bytes(stream))

    if not judges:
        write(os.path.join(out, "raw.bin"), struct.pack("<%dH" % len(stream), *stream))
        write(os.path.join(out, "u2.npy"), npy_bytes(stream, "<u2", "H"))
        write(os.path.join(out, "i4.npy"), npy_bytes(stream, "<i4", "i"))
        write(os.path.join(out, "i8.npy"), npy_bytes(stream, "<i8", "q"))
        idx, data = megatron_bytes(docs)
        write(os.path.join(out, "mega.idx"), idx)
        write(os.path.join(out, "mega.bin"), data)
        # Malformed inputs, one fault each.
        bad = list(stream)
        bad[1000] = 300  # past gpt-tiny's vocabulary (256)
        write(os.path.join(out, "bad-vocab.bin"), struct.pack("<%dH" % len(bad), *bad))
        write(os.path.join(out, "bad-short.npy"), npy_bytes(stream[:20], "<u2", "H"))
        write(os.path.join(out, "bad-float.npy"), npy_bytes([1.0, 2.0], "<f4", "f"))
        write(os.path.join(out, "bad-2d.npy"), npy_bytes(stream[:64], "<u2", "H", "(8, 8)"))
        write(os.path.join(out, "bad-odd.bin"), struct.pack("<%dH" % 100, *stream[:100])[:-1])
        write(os.path.join(out, "bad-trunc.idx"), idx)
        write(os.path.join(out, "bad-trunc.bin"), data[:-10])
        # Sequence 1 starts 4 bytes early, inside sequence 0.
        s = struct.unpack_from("<Q", idx, 18)[0]
        overlap = bytearray(idx)
        p1 = struct.unpack_from("<q", idx, 34 + 4 * s + 8)[0]
        struct.pack_into("<q", overlap, 34 + 4 * s + 8, p1 - 4)
        write(os.path.join(out, "bad-overlap.idx"), bytes(overlap))
        write(os.path.join(out, "bad-overlap.bin"), data)
        flt = bytearray(idx)
        flt[17] = 7  # float32
        write(os.path.join(out, "bad-dtype.idx"), bytes(flt))
        write(os.path.join(out, "bad-dtype.bin"), data)
        write(os.path.join(out, "only-idx.idx"), idx)
        print("wrote %d tokens in %d documents" % (len(stream), len(docs)))
        return

    import numpy
    import torch
    from megatron.core.datasets.indexed_dataset import (IndexedDataset,
                                                        IndexedDatasetBuilder)
    arr = numpy.array(stream, dtype=numpy.uint16)
    arr.tofile(os.path.join(out, "raw.bin"))
    numpy.save(os.path.join(out, "u2.npy"), arr)
    numpy.save(os.path.join(out, "i4.npy"), arr.astype(numpy.int32))
    numpy.save(os.path.join(out, "i8.npy"), arr.astype(numpy.int64))

    def build(prefix, documents, dtype):
        b = IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
        for d in documents:
            for seq in d:
                b.add_item(torch.tensor(seq, dtype=torch.int64))
            b.end_document()
        b.finalize(prefix + ".idx")

    def check(prefix, documents):
        ds = IndexedDataset(prefix)
        got = [int(t) for i in range(len(ds)) for t in ds[i]]
        assert got == stream, prefix + ": megatron-core reads back other tokens"
        assert len(ds.document_indices) == len(documents) + 1, prefix

    half = len(docs) // 2
    build(os.path.join(out, "mega"), docs, numpy.uint16)
    build(os.path.join(out, "mega32"), docs, numpy.int32)
    build(os.path.join(out, "first"), docs[:half], numpy.uint16)
    build(os.path.join(out, "second"), docs[half:], numpy.uint16)
    merged = IndexedDatasetBuilder(os.path.join(out, "merged.bin"), dtype=numpy.uint16)
    merged.add_index(os.path.join(out, "first"))
    merged.add_index(os.path.join(out, "second"))
    merged.finalize(os.path.join(out, "merged.idx"))
    for p in ("mega", "mega32", "merged"):
        check(os.path.join(out, p), docs)
    print("megatron-core wrote and read back %d tokens in %d documents"
          % (len(stream), len(docs)))


main()
