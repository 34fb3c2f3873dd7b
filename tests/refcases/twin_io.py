"""What the Python twins share: writing their tensors and metadata as a safetensors file.

Imported by the twin scripts in this folder (run as /usr/bin/python3 tests/refcases/<twin>.py,
which puts this folder on the import path).
"""
import json
import struct

import torch


def write_safetensors(path, tensors, metadata):
    """tensors: a dict or a list of (name, tensor), written in that order; metadata: dict of strings."""
    codes = {torch.float64: "F64", torch.float32: "F32", torch.int64: "I64", torch.bool: "BOOL"}
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, t in (tensors.items() if isinstance(tensors, dict) else tensors):
        t = t.detach().contiguous().cpu()
        raw = t.numpy().tobytes()
        header[name] = {"dtype": codes[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
