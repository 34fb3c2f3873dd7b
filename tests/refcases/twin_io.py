"""What the Python twins share: writing their tensors and metadata as a safetensors file.

Imported by the twin scripts in this folder (run as /usr/bin/python3 tests/refcases/<twin>.py,
which puts this folder on the import path).
"""
import json
import struct

import torch


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1  # CRC-32C (Castagnoli), reflected
        table.append(c)
    return table


_CRC32C_TABLE = _crc32c_table()


def crc32c(data):
    """CRC-32C of bytes, as ember's core/checksum.h computes it (crc32c(b"123456789") = 0xe3069283)."""
    c = 0xFFFFFFFF
    table = _CRC32C_TABLE
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def write_safetensors(path, tensors, metadata):
    """tensors: a dict or a list of (name, tensor), written in that order; metadata: dict of strings.

    Each tensor's CRC-32C goes into the metadata as "crc32c:<name>": "<8 hex digits>", the
    checksums ember's loader verifies (Note [Tensor checksums] in core/safetensors.h).
    """
    codes = {torch.float64: "F64", torch.float32: "F32", torch.int64: "I64", torch.bool: "BOOL"}
    assert not any(k.startswith("crc32c:") for k in metadata), "metadata keys 'crc32c:*' hold the checksums"
    metadata = dict(metadata)
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, t in (tensors.items() if isinstance(tensors, dict) else tensors):
        t = t.detach().contiguous().cpu()
        raw = t.numpy().tobytes()
        header[name] = {"dtype": codes[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        metadata["crc32c:" + name] = "%08x" % crc32c(raw)
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
