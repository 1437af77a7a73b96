#!/usr/bin/env python3
"""Edits a program file's JSON body and writes it back with a valid header
(docs/program-format.md: 32-byte header, FNV-1a 64 of the body), so a test
can hand the runtime a program the compiler would never write.

  edit_program.py IN OUT STATEMENT

STATEMENT is Python run with `p` bound to the parsed body, e.g.
  'next(q for q in p["params"] if q["name"].endswith("w2")).pop("expert_sharded")'
"""
import json
import struct
import sys

MASK64 = (1 << 64) - 1


def fnv1a64(b):
    h = 0xcbf29ce484222325
    for x in b:
        h = ((h ^ x) * 0x100000001b3) & MASK64
    return h


def main():
    src, dst, stmt = sys.argv[1:4]
    data = open(src, "rb").read()
    magic, version, flags, length, _ = struct.unpack("<8sIIQQ", data[:32])
    assert magic == b"PFPROG\0\0", "not a program file"
    p = json.loads(data[32:32 + length])
    exec(stmt, {"p": p})
    body = json.dumps(p, indent=1).encode()
    with open(dst, "wb") as f:
        f.write(struct.pack("<8sIIQQ", magic, version, flags, len(body),
                            fnv1a64(body)))
        f.write(body)


if __name__ == "__main__":
    main()
