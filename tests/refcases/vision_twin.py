#!/usr/bin/python3
"""PyTorch twin of issue 30's vision ops and layers: writes tests/refcases/vision.safetensors.

Run with Debian's python3-torch (1.13): /usr/bin/python3 tests/refcases/vision_twin.py
CI runs only ember's side (tests/layers/test_vision_refcases.cpp).

Everything is float64, seed 0, one thread. Each case N stores its inputs `in.<name>`, `out`,
the upstream gradient `grad_out` and the gradients `grad.<name>` of sum(out * grad_out) under
`caseN.<field>`; the metadata `caseN` is a JSON object naming the op (a functional op, or a
layer whose parameters are among the inputs) and its arguments. Instance norm with running
statistics also stores them after the step (`after.running_mean`, `after.running_var`).
dropout2d has no case: its draw is ember's Philox stream, not PyTorch's (its per-channel
structure is tested in tests/core/test_vision_ops.cpp).
"""
import json
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from twin_io import write_safetensors

torch.manual_seed(0)
torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)

tensors = {}
metadata = {"family": "vision", "generator": "tests/refcases/vision_twin.py (torch %s)" % torch.__version__,
            "seed": "0"}
num_cases = 0


def put(case, name, t):
    tensors["case%d.%s" % (case, name)] = t.detach().contiguous().clone()


def case(meta, fn, inputs, grad_inputs=None, extra=None):
    """fn(**inputs) -> out; gradients for the names in grad_inputs (default all)."""
    global num_cases
    c = num_cases
    num_cases += 1
    grad_inputs = list(inputs) if grad_inputs is None else grad_inputs
    ins = {k: (v.clone().requires_grad_() if k in grad_inputs else v.clone()) for k, v in inputs.items()}
    out = fn(**ins)
    g = torch.randn_like(out)
    if grad_inputs:
        (out * g).sum().backward()
    for k, v in ins.items():
        put(c, "in." + k, v)
        if k in grad_inputs:
            put(c, "grad." + k, v.grad)
    put(c, "out", out)
    put(c, "grad_out", g)
    for k, v in (extra or {}).items():
        put(c, k, v)
    meta["grads"] = grad_inputs
    metadata["case%d" % c] = json.dumps(meta)


def r(*shape):
    return torch.randn(*shape)


# conv_transpose2d: (input, weight [in, out / groups, kh, kw], stride, padding, output_padding, groups, dilation)
for n, c, h, w, o, k, s, p, op, g, d in [
        (2, 4, 3, 5, 6, (4, 4), (2, 2), (1, 1), (0, 0), 1, (1, 1)),   # DCGAN's k4 s2 p1
        (2, 5, 1, 1, 3, (4, 4), (1, 1), (0, 0), (0, 0), 1, (1, 1)),   # DCGAN's first layer
        (1, 4, 4, 3, 6, (3, 2), (3, 2), (1, 0), (2, 1), 2, (1, 2)),   # stride 3, output_padding, groups, dilation
        (2, 3, 5, 4, 2, (3, 3), (1, 1), (2, 1), (1, 1), 1, (2, 2))]:  # output_padding below dilation only
    meta = {"op": "conv_transpose2d", "stride": s, "padding": p, "output_padding": op, "groups": g, "dilation": d}
    case(meta, lambda x, weight, bias, s=s, p=p, op=op, g=g, d=d: F.conv_transpose2d(x, weight, bias, s, p, op, g, d),
         {"x": r(n, c, h, w), "weight": r(c, o // g, *k) * 0.3, "bias": r(o)})

# interpolate: size or scale_factor, nearest or bilinear (align_corners)
for shape, size, scale, mode, align in [
        ((2, 3, 5, 4), (7, 9), None, "nearest", None),
        ((2, 3, 5, 4), None, (2.0, 3.0), "nearest", None),
        ((1, 2, 7, 5), None, (1.5, 0.7), "nearest", None),
        ((1, 2, 10, 3), None, (1.05, 2.5), "nearest", None),
        ((2, 3, 5, 4), (7, 9), None, "bilinear", False),
        ((2, 3, 5, 4), (7, 9), None, "bilinear", True),
        ((1, 2, 4, 7), None, (2.5, 1.3), "bilinear", False),
        ((1, 2, 6, 5), (3, 2), None, "bilinear", False),
        ((1, 2, 6, 5), (1, 3), None, "bilinear", True),
        ((1, 2, 10, 3), None, (1.05, 2.0), "bilinear", False)]:
    meta = {"op": "interpolate", "size": size, "scale_factor": scale, "mode": mode, "align_corners": bool(align)}
    # torch 1.13's nearest backward maps a kept size as the identity while its forward
    # rescales it (gradcheck fails there): that case checks the output only.
    kept = mode == "nearest" and scale is not None and int(shape[2] * scale[0]) == shape[2]
    if kept:
        meta["note"] = "gradient not compared: torch 1.13's nearest backward is not its forward's adjoint here"
    case(meta, lambda x, size=size, scale=scale, mode=mode, align=align: F.interpolate(
        x, size=size, scale_factor=scale, mode=mode, align_corners=align), {"x": r(*shape)}, [] if kept else None)

case({"op": "pixel_shuffle", "factor": 2}, lambda x: F.pixel_shuffle(x, 2), {"x": r(2, 12, 3, 5)})
case({"op": "pixel_unshuffle", "factor": 3}, lambda x: F.pixel_unshuffle(x, 3), {"x": r(2, 2, 6, 9)})

# group_norm: (shape, groups, affine)
for shape, groups, affine in [((2, 6, 5, 3), 3, True), ((3, 4, 7), 1, True), ((2, 5, 3, 3), 5, False),
                              ((2, 16, 5, 5), 8, True)]:
    ins = {"x": r(*shape) * 2 + 0.5}
    if affine:
        ins.update(weight=r(shape[1]), bias=r(shape[1]))
    case({"op": "group_norm", "groups": groups, "eps": 1e-5},
         lambda x, weight=None, bias=None, groups=groups: F.group_norm(x, groups, weight, bias, 1e-5), ins)

# instance_norm with running statistics updated (PyTorch's repeat-then-average)
rm, rv = r(4), torch.rand(4) + 0.5
x = r(3, 4, 5, 3)
rm_after, rv_after = rm.clone(), rv.clone()
case({"op": "instance_norm", "momentum": 0.3, "eps": 1e-5},
     lambda x, weight, bias, running_mean, running_var: F.instance_norm(
         x, rm_after, rv_after, weight, bias, True, 0.3, 1e-5),
     {"x": x, "weight": r(4), "bias": r(4), "running_mean": rm, "running_var": rv}, ["x", "weight", "bias"],
     {"after.running_mean": rm_after, "after.running_var": rv_after})
case({"op": "instance_norm_eval", "eps": 1e-5},
     lambda x, running_mean, running_var: F.instance_norm(x, running_mean, running_var, None, None, False, 0.1, 1e-5),
     {"x": x, "running_mean": rm, "running_var": rv}, ["x"])

# Layers, their parameters given (the twin's own values, loaded into ember's layers).
ct = nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1, groups=2)
case({"op": "ConvTranspose2d", "in": 6, "out": 4, "kernel": 3, "stride": 2, "padding": 1, "output_padding": 1,
      "groups": 2},
     lambda x, weight, bias: F.conv_transpose2d(x, weight, bias, 2, 1, 1, 2),
     {"x": r(2, 6, 4, 5), "weight": ct.weight.detach(), "bias": ct.bias.detach()})
gn = nn.GroupNorm(4, 8)
case({"op": "GroupNorm", "groups": 4, "channels": 8}, lambda x, weight, bias: F.group_norm(x, 4, weight, bias),
     {"x": r(3, 8, 4, 3), "weight": r(8), "bias": r(8)})
case({"op": "Upsample", "scale_factor": [2.0, 2.0], "mode": "bilinear"},
     lambda x: nn.Upsample(scale_factor=2, mode="bilinear")(x), {"x": r(1, 3, 4, 5)})
inorm = nn.InstanceNorm2d(3, affine=True, track_running_stats=True, momentum=0.2)
with torch.no_grad():
    inorm.weight.copy_(r(3))
    inorm.bias.copy_(r(3))
xi = r(2, 3, 4, 4)
rm0, rv0 = inorm.running_mean.clone(), inorm.running_var.clone()  # zeros and ones, the layer's start
case({"op": "InstanceNorm2d", "features": 3, "momentum": 0.2},
     lambda x, weight, bias: F.instance_norm(x, rm0, rv0, weight, bias, True, 0.2, 1e-5),
     {"x": xi, "weight": inorm.weight.detach(), "bias": inorm.bias.detach()}, None,
     {"after.running_mean": rm0, "after.running_var": rv0})

metadata["num_cases"] = str(num_cases)
write_safetensors(sys.argv[1] if len(sys.argv) > 1 else "tests/refcases/vision.safetensors", tensors, metadata)
print("wrote %d cases, %d tensors" % (num_cases, len(tensors)))
