#!/usr/bin/env python3
"""Writes a damaged copy of a Hugging Face model directory, one damage per
mode, for the error tests of test/Runtime/hf-weights.test (standard library
only: the safetensors format is 8 bytes of header length, a JSON header,
then the data).

    hf_corrupt.py SRC DST MODE
MODE: missing (a tensor dropped), unexpected (a tensor added), shape (one
tensor's shape swapped), truncated (the file cut inside the data),
header-past-end (a header length larger than the file), overlap (two
tensors' offsets overlap), dtype (an I64 tensor), shard (an index naming a
shard that is not there), config (hidden_size changed)
"""
import json
import os
import shutil
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def write(path, header, data, length=None):
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h) if length is None else length))
        f.write(h + data)


def main():
    src, dst, mode = sys.argv[1:4]
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    st = os.path.join(dst, "model.safetensors")
    header, data = read(st)
    names = sorted(k for k in header if k != "__metadata__")
    # The last tensor by offset (safe to drop or change without moving
    # another's bytes).
    last = max(names, key=lambda k: header[k]["data_offsets"][1])
    if mode == "missing":
        del header[last]
    elif mode == "unexpected":
        end = len(data)
        header["model.layers.9.mlp.up_proj.weight"] = {
            "dtype": "F32", "shape": [1], "data_offsets": [end, end + 4]}
        data += b"\0" * 4
    elif mode == "shape":
        t = next(k for k in names if len(header[k]["shape"]) == 2 and
                 header[k]["shape"][0] != header[k]["shape"][1])
        header[t]["shape"] = header[t]["shape"][::-1]
        print(t)
    elif mode == "truncated":
        data = data[:len(data) // 2]
    elif mode == "header-past-end":
        write(st, header, data, length=1 << 40)
        return
    elif mode == "overlap":
        a, b = sorted(names, key=lambda k: header[k]["data_offsets"][0])[:2]
        header[b]["data_offsets"] = [header[b]["data_offsets"][0] - 4,
                                     header[b]["data_offsets"][1] - 4]
        print(a, b)
    elif mode == "nan":
        # One float32 NaN in the middle of a 2-D tensor (its element index
        # printed): a file that parses but holds a weight no run can use.
        t = next(k for k in names if len(header[k]["shape"]) == 2 and
                 header[k]["dtype"] == "F32")
        lo, hi = header[t]["data_offsets"]
        k = (hi - lo) // 8
        at = lo + 4 * k
        data = data[:at] + struct.pack("<f", float("nan")) + data[at + 4:]
        print(t, k)
    elif mode == "dtype":
        header[last]["dtype"] = "I64"
    elif mode == "shard":
        os.remove(st)
        index = {"metadata": {}, "weight_map": {n: "model-00001-of-00002.safetensors"
                                                for n in names}}
        with open(os.path.join(dst, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f)
        return
    elif mode == "config":
        cfg_path = os.path.join(dst, "config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        cfg["hidden_size"] = cfg["hidden_size"] * 2
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        return
    else:
        sys.exit("unknown mode " + mode)
    write(st, header, data)


if __name__ == "__main__":
    main()
