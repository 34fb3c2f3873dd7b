#!/usr/bin/python3
"""PyTorch twin of ember's nn::init (issue 30): writes tests/refcases/nn_init.safetensors.

Run with Debian's PyTorch 1.13 (/usr/bin/python3 tests/refcases/nn_init_twin.py); CI runs
only ember's side (tests/layers/test_init.cpp). ember draws from its own generator, so the
file holds what does not depend on the draws, from PyTorch's own functions:
  * gains: torch.nn.init.calculate_gain for each nonlinearity (metadata "gains": the
    names and params, in the order of tensor gains);
  * fans: torch.nn.init._calculate_fan_in_and_fan_out for the shapes of metadata "fan_shapes"
    (tensor fans [n, 2]);
  * distributions: caseN.{bound, std} for xavier_* / kaiming_* (PyTorch's formula through
    its own calculate_gain and _calculate_correct_fan), and for trunc_normal_ the exact mean
    and std of the truncated normal; caseN.torch_max_abs / torch_std / torch_mean: the same
    statistics of PyTorch's own draw of that shape, for reference;
  * qr: torch.linalg.qr of float64 matrices, signed so that R's diagonal is positive
    (what orthogonal_ takes): qrN.{a, q, r};
  * eye_ and dirac_ outputs for small shapes: exactN.out.
"""
import json
import math
import os
import struct

import torch
from twin_io import write_safetensors
import torch.nn.init as init

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nn_init.safetensors")
torch.set_num_threads(1)  # the draws and reductions reproduce bit for bit only at one thread
torch.manual_seed(30)



def scalar(x):
    return torch.tensor(float(x), dtype=torch.float64)


tensors, meta = [], {"family": "nn_init", "generator": "PyTorch " + torch.__version__ +
                     " (tests/refcases/nn_init_twin.py)", "seed": "30"}

gains = [("linear", None), ("conv1d", None), ("conv2d", None), ("conv3d", None), ("conv_transpose1d", None),
         ("conv_transpose2d", None), ("conv_transpose3d", None), ("sigmoid", None), ("tanh", None), ("relu", None),
         ("leaky_relu", None), ("leaky_relu", 0.2), ("leaky_relu", 0), ("selu", None)]
meta["gains"] = json.dumps(gains)
tensors.append(("gains", torch.tensor([init.calculate_gain(n, p) for n, p in gains], dtype=torch.float64)))

fan_shapes = [[3, 5], [64, 10, 5, 5], [7, 3, 2], [2, 3, 4, 5, 6], [1, 1], [0, 5], [4, 0, 3]]
meta["fan_shapes"] = json.dumps(fan_shapes)
tensors.append(("fans", torch.tensor([list(init._calculate_fan_in_and_fan_out(torch.empty(s))) for s in fan_shapes],
                                     dtype=torch.int64)))

# Distributions. gain / a / mode / nonlinearity as PyTorch names them.
cases = [
    {"op": "xavier_uniform_", "shape": [300, 200], "gain": 1.0},
    {"op": "xavier_uniform_", "shape": [64, 32, 3, 3], "gain": init.calculate_gain("relu")},
    {"op": "xavier_normal_", "shape": [256, 128], "gain": 1.0},
    {"op": "xavier_normal_", "shape": [16, 8, 5], "gain": 5.0 / 3},
    {"op": "kaiming_uniform_", "shape": [512, 128], "a": 0.0, "mode": "fan_in", "nonlinearity": "leaky_relu"},
    {"op": "kaiming_uniform_", "shape": [64, 32, 3, 3], "a": math.sqrt(5), "mode": "fan_in",
     "nonlinearity": "leaky_relu"},
    {"op": "kaiming_uniform_", "shape": [128, 256], "a": 0.0, "mode": "fan_out", "nonlinearity": "relu"},
    {"op": "kaiming_normal_", "shape": [64, 32, 3, 3], "a": 0.0, "mode": "fan_out", "nonlinearity": "relu"},
    {"op": "kaiming_normal_", "shape": [300, 200], "a": 0.2, "mode": "fan_in", "nonlinearity": "leaky_relu"},
    {"op": "kaiming_normal_", "shape": [200, 300], "a": 0.0, "mode": "fan_in", "nonlinearity": "tanh"},
    {"op": "trunc_normal_", "shape": [512, 512], "mean": 0.0, "std": 1.0, "a": -2.0, "b": 2.0},
    {"op": "trunc_normal_", "shape": [512, 512], "mean": 0.5, "std": 2.0, "a": -1.0, "b": 3.0},
    {"op": "trunc_normal_", "shape": [768, 384], "mean": 0.0, "std": 0.02, "a": -2.0, "b": 2.0},
]
meta["num_cases"] = str(len(cases))
for i, c in enumerate(cases):
    meta["case%d" % i] = json.dumps(c)
    w = torch.empty(c["shape"], dtype=torch.float64)
    if c["op"].startswith("xavier"):
        fan_in, fan_out = init._calculate_fan_in_and_fan_out(w)
        std = c["gain"] * math.sqrt(2.0 / (fan_in + fan_out))
        getattr(init, c["op"])(w, gain=c["gain"])
        tensors += [("case%d.std" % i, scalar(std)), ("case%d.bound" % i, scalar(math.sqrt(3.0) * std))]
    elif c["op"].startswith("kaiming"):
        std = init.calculate_gain(c["nonlinearity"], c["a"]) / math.sqrt(init._calculate_correct_fan(w, c["mode"]))
        getattr(init, c["op"])(w, a=c["a"], mode=c["mode"], nonlinearity=c["nonlinearity"])
        tensors += [("case%d.std" % i, scalar(std)), ("case%d.bound" % i, scalar(math.sqrt(3.0) * std))]
    else:  # the moments of N(mean, std^2) truncated to [a, b]
        mu, sd, a, b = c["mean"], c["std"], c["a"], c["b"]
        alpha, beta = (a - mu) / sd, (b - mu) / sd
        pdf = lambda x: math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
        cdf = lambda x: (1 + math.erf(x / math.sqrt(2))) / 2
        z = cdf(beta) - cdf(alpha)
        mean = mu + sd * (pdf(alpha) - pdf(beta)) / z
        var = sd * sd * (1 + (alpha * pdf(alpha) - beta * pdf(beta)) / z - ((pdf(alpha) - pdf(beta)) / z) ** 2)
        init.trunc_normal_(w, mean=mu, std=sd, a=a, b=b)
        tensors += [("case%d.mean" % i, scalar(mean)), ("case%d.std" % i, scalar(math.sqrt(var)))]
        tensors += [("case%d.torch_min" % i, w.min()), ("case%d.torch_max" % i, w.max())]
    tensors += [("case%d.torch_max_abs" % i, w.abs().max()), ("case%d.torch_std" % i, w.std()),
                ("case%d.torch_mean" % i, w.mean())]

# QR, signed so that diag(R) > 0 (orthogonal_'s q *= sign(diag(r))).
qr_shapes = [[7, 4], [5, 5], [3, 6], [40, 17]]
meta["num_qr"] = str(len(qr_shapes))
for i, s in enumerate(qr_shapes):
    a = torch.randn(s, dtype=torch.float64)
    q, r = torch.linalg.qr(a)
    d = torch.diagonal(r).sign()
    tensors += [("qr%d.a" % i, a), ("qr%d.q" % i, q * d), ("qr%d.r" % i, r * d.unsqueeze(1))]

# eye_ and dirac_: exact values.
exact = [{"op": "eye_", "shape": [3, 5]}, {"op": "eye_", "shape": [4, 2]},
         {"op": "dirac_", "shape": [4, 3, 3], "groups": 1}, {"op": "dirac_", "shape": [6, 2, 3, 3], "groups": 2},
         {"op": "dirac_", "shape": [2, 4, 2, 3, 1], "groups": 1}]
meta["num_exact"] = str(len(exact))
for i, e in enumerate(exact):
    meta["exact%d" % i] = json.dumps(e)
    w = torch.full(e["shape"], 7.0, dtype=torch.float64)
    if e["op"] == "eye_":
        init.eye_(w)
    else:
        init.dirac_(w, groups=e["groups"])
    tensors.append(("exact%d.out" % i, w))

write_safetensors(OUT, tensors, meta)
print("wrote", OUT)
