"""What the PyTorch twins of examples/pytorch share (tests/pytorch/test_*.cpp run ember's side).

A twin builds the original model in float64, gives its parameters values from a hash formula
that ember's test computes the same way (hash_init: no weight file to commit, whatever the
model's size), trains a few steps on a few tiny batches, and writes <name>.safetensors:
  the batches under the twin's own names, "losses" [steps], and for each entry of the final
  state dict "summary.<name>" (float64: sum, sum of |x|, sum of x^2, then the entries at
  kSamples evenly spaced flat positions, first and last included) and, when it has at most
  kFull elements, "final.<name>" itself;
  metadata "init" (JSON: parameter name -> [k, center, halfwidth]) and "config" (JSON).
Run as /usr/bin/python3 tests/pytorch/<name>_twin.py (torch 1.13, CPU, one thread).
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "refcases"))
from twin_io import write_safetensors  # noqa: E402

kFull = 4096
kSamples = 8
HERE = os.path.dirname(os.path.abspath(__file__))


def setup(seed=0):
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    torch.set_default_dtype(torch.float64)


def hash_uniform(k, n):
    """u in [0, 1): splitmix64(k * 2^32 + i) >> 11, times 2^-53, for i in [0, n)."""
    m = np.uint64(0xFFFFFFFFFFFFFFFF)
    z = np.arange(n, dtype=np.uint64) + np.uint64(k << 32)
    with np.errstate(over="ignore"):
        z = (z + np.uint64(0x9E3779B97F4A7C15)) & m
        z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & m
        z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & m
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


def default_spec(model):
    """PyTorch's default scales: a weight of 2+ dims U(+-1/sqrt(fan_in)) (fan_in: the
    elements per output row), a norm's weight 1 +- 0.1, any other 1-D parameter +- 0.1."""
    norm_weights = {f"{mn}.weight" if mn else "weight" for mn, m in model.named_modules()
                    if isinstance(m, (torch.nn.LayerNorm, torch.nn.modules.batchnorm._BatchNorm, torch.nn.GroupNorm))}
    spec = {}
    for k, (name, p) in enumerate(model.named_parameters()):
        if p.dim() >= 2:
            spec[name] = [k, 0.0, 1.0 / (p.numel() // p.shape[0]) ** 0.5]
        else:
            spec[name] = [k, 1.0 if name in norm_weights else 0.0, 0.1]
    return spec


def hash_init(model, spec=None):
    """Sets every parameter to center + halfwidth * (2u - 1), u = hash_uniform(k, numel)."""
    spec = spec or default_spec(model)
    with torch.no_grad():
        for name, p in model.named_parameters():
            k, c, h = spec[name]
            u = hash_uniform(k, p.numel())
            p.copy_(torch.from_numpy(c + h * (2.0 * u - 1.0)).view_as(p))
    return spec


def summary(t):
    f = t.detach().reshape(-1).to(torch.float64)
    n = f.numel()
    picks = [f[(j * (n - 1)) // (kSamples - 1)] for j in range(kSamples)]
    return torch.stack([f.sum(), f.abs().sum(), (f * f).sum()] + picks)


def write(name, model, spec, tensors, losses, config):
    out = list(tensors)
    out.append(("losses", torch.tensor(losses, dtype=torch.float64)))
    for key, t in model.state_dict().items():
        out.append(("summary." + key, summary(t)))
        if t.numel() <= kFull:
            out.append(("final." + key, t))
    path = os.path.join(HERE, name + ".safetensors")
    write_safetensors(path, out, {"init": json.dumps(spec), "config": json.dumps(config)})
    print(path, "losses", [f"{x:.6f}" for x in losses])


def dropout_eval(model):
    """Dropout's masks cannot be drawn as PyTorch draws them: its modules only run in eval
    mode (the identity) in the step tests; everything else stays in training mode."""
    for m in model.modules():
        if isinstance(m, (torch.nn.Dropout, torch.nn.Dropout2d)):
            m.eval()
