#!/usr/bin/env python3
"""Rewrites one value of a PipeForge rank checkpoint as a careless or
hostile tool would: the file's FNV-1a checksum and its line in the
checkpoint's manifest.txt are made consistent again, so only the checks on
the values themselves can notice (docs/reliability.md).

  ckpt_edit.py RANK_FILE --list                 the tensors, one a line
  ckpt_edit.py RANK_FILE TENSOR ELEMENT VALUE   set TENSOR[ELEMENT] = VALUE

VALUE is a Python float ("nan", "inf", "1e10", "0.5"). The layout is
runtime/lib/Checkpoint.cpp's (docs/runtime-data.md); standard library only.
"""
import os
import re
import struct
import sys

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3


def fnv1a64(data):
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def tensors(b):
    """(name, offset of the first float, count) of every parameter."""
    pos = 8 + 4 * 4 + 8 + 8  # magic, version/rank/ranks/reserved, step, fp
    (n,) = struct.unpack_from("<I", b, pos)
    pos += 4
    out = []
    for _ in range(n):
        (ln,) = struct.unpack_from("<I", b, pos)
        pos += 4
        name = b[pos:pos + ln].decode()
        pos += ln
        (rank,) = struct.unpack_from("<I", b, pos)
        pos += 4 + 8 * rank
        (count,) = struct.unpack_from("<Q", b, pos)
        pos += 8
        out.append((name, pos, count))
        pos += 4 * count
    return out


def main():
    path = sys.argv[1]
    b = bytearray(open(path, "rb").read())
    found = tensors(b)
    if sys.argv[2] == "--list":
        for name, _, count in found:
            print(name, count)
        return 0
    name, element, value = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    for n, at, count in found:
        if n == name:
            if element >= count:
                sys.exit("%s has %d elements" % (name, count))
            struct.pack_into("<f", b, at + 4 * element, value)
            break
    else:
        sys.exit("no tensor %s in %s" % (name, path))
    struct.pack_into("<Q", b, len(b) - 8, fnv1a64(bytes(b[:-8])))
    open(path, "wb").write(b)
    # The manifest's record of the file: "rank R FILE BYTES 0xCHECKSUM".
    manifest = os.path.join(os.path.dirname(path), "manifest.txt")
    text = open(manifest).read()
    base = os.path.basename(path)
    text, n = re.subn(r"^(rank \d+ %s \d+ )0x[0-9a-f]{16}$" % re.escape(base),
                      lambda m: m.group(1) + "0x%016x" % fnv1a64(bytes(b[:-8])),
                      text, flags=re.M)
    if n != 1:
        sys.exit("no line for %s in %s" % (base, manifest))
    open(manifest, "w").write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
