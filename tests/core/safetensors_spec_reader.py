#!/usr/bin/env python3
"""Reads a safetensors file to the format's spec, with no library: the 8-byte little-endian
header length, a JSON header whose "__metadata__" maps strings to strings, and tensors
whose data_offsets tile the data section. Verifies ember's per-tensor CRC-32C checksums
(metadata "crc32c:<name>"). When Python's `safetensors` package is importable, loads the
file with it too and compares every tensor's bytes. Exit status 0 when all holds.

  safetensors_spec_reader.py FILE
"""
import json
import struct
import sys

SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1}


def crc32c(data):
    table = []
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        table.append(c)
    c = 0xFFFFFFFF
    for byte in data:
        c = (c >> 8) ^ table[(c ^ byte) & 0xFF]
    return c ^ 0xFFFFFFFF


def main(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()), "metadata must be strings"
    pos = 0
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = t["data_offsets"]
        assert begin == pos, f"{name}: gap or overlap"
        count = 1
        for d in t["shape"]:
            count *= d
        assert end - begin == count * SIZES[t["dtype"]], f"{name}: size"
        want = int(meta["crc32c:" + name], 16)
        assert crc32c(data[begin:end]) == want, f"{name}: checksum"
        pos = end
    assert pos == len(data), "the tensors do not cover the data section"
    try:
        from safetensors.torch import load_file
    except ImportError:
        lib = "no safetensors package"
    else:
        loaded = load_file(path)
        for name, t in header.items():
            begin, end = t["data_offsets"]
            got = loaded[name].contiguous().view(-1).view(dtype=__import__("torch").uint8).numpy().tobytes()
            assert got == data[begin:end], f"{name}: safetensors read other bytes"
        lib = "safetensors agrees"
    print(f"spec reader: {len(header)} tensors, {len(meta)} metadata strings, crc32c verified; {lib}")


if __name__ == "__main__":
    main(sys.argv[1])
