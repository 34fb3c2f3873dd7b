#!/usr/bin/python3
"""PyTorch twin of issue 30's ops, activations and losses: writes tests/refcases/nn_ops.safetensors.

Run with Debian's python3-torch (1.13): /usr/bin/python3 tests/refcases/nn_ops_twin.py
CI runs only ember's side (tests/layers/test_nn_ops_refcases.cpp).

Everything is float64, seed 0. Each case N stores its inputs `in.<name>`, `out` (plus
`indices` for topk), the upstream gradient `grad_out` and the gradients `grad.<name>` of
sum(out * grad_out) under `caseN.<field>`; the metadata `caseN` is a JSON object naming the
op and its arguments. Inputs include PyTorch's edges: exact zeros for the activations' and
norms' kinks, probabilities of exactly 0 and 1 for BCE (log clamped at -100), logits of
+-200 for BCE with logits, zero targets for kl_div.
"""
import json
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from twin_io import write_safetensors

torch.set_num_threads(1)  # the draws and reductions reproduce bit for bit only at one thread
torch.manual_seed(0)
torch.set_default_dtype(torch.float64)

tensors = {}
metadata = {"family": "nn_ops", "generator": "tests/refcases/nn_ops_twin.py (torch %s)" % torch.__version__,
            "seed": "0"}
num_cases = 0


def put(case, name, t):
    tensors["case%d.%s" % (case, name)] = t.detach().contiguous().clone()


def case(meta, fn, inputs, grad_inputs=None):
    """fn(**inputs) -> out or (out, indices); gradients for the names in grad_inputs (default all)."""
    global num_cases
    c = num_cases
    num_cases += 1
    grad_inputs = list(inputs) if grad_inputs is None else grad_inputs
    ins = {k: (v.clone().requires_grad_() if k in grad_inputs else v.clone()) for k, v in inputs.items()}
    res = fn(**ins)
    out, indices = (res if isinstance(res, tuple) else (res, None))
    g = torch.randn_like(out)
    (out * g).sum().backward()
    for k, v in ins.items():
        put(c, "in." + k, v)
        if k in grad_inputs:
            put(c, "grad." + k, v.grad)
    put(c, "out", out)
    put(c, "grad_out", g)
    if indices is not None:
        put(c, "indices", indices)
    meta["grads"] = grad_inputs
    metadata["case%d" % c] = json.dumps(meta)


def r(*shape):
    return torch.randn(*shape)


x = r(4, 7)
x[0, :3] = 0  # the kinks, exactly
case({"op": "sin"}, lambda x: torch.sin(x), {"x": x})
case({"op": "cos"}, lambda x: torch.cos(x), {"x": x})
case({"op": "leaky_relu", "negative_slope": 0.2}, lambda x: nn.LeakyReLU(0.2)(x), {"x": x * 3})
case({"op": "silu"}, lambda x: nn.SiLU()(x), {"x": x * 5})
case({"op": "elu", "alpha": 1.5}, lambda x: nn.ELU(1.5)(x), {"x": x * 3})
xn = r(5, 6)
xn[1] = 0  # a zero row: the norm's gradient is 0 there, as PyTorch's
xn[2, 2] = 0
for p in (2.0, 1.0, float("inf"), 3.0):
    case({"op": "norm", "p": None if p == float("inf") else p, "dims": [1], "keepdim": False},  # null: inf (JSON has none)
         lambda x, p=p: torch.linalg.vector_norm(x, p, dim=[1], keepdim=False), {"x": xn})
case({"op": "norm", "p": 2.0, "dims": [], "keepdim": False}, lambda x: torch.norm(x), {"x": xn})
xt = r(3, 8, 5)
for largest in (True, False):
    case({"op": "topk", "k": 3, "dim": 1, "largest": largest},
         lambda x, largest=largest: torch.topk(x, 3, dim=1, largest=largest), {"x": xt})
case({"op": "tril", "diagonal": -1}, lambda x: torch.tril(x, -1), {"x": r(2, 4, 5)})
case({"op": "triu", "diagonal": 1}, lambda x: torch.triu(x, 1), {"x": r(4, 5)})
case({"op": "unfold", "dim": 1, "size": 3, "step": 2}, lambda x: x.unfold(1, 3, 2), {"x": r(3, 9, 2)})

p = torch.sigmoid(r(4, 5))
t = torch.rand(4, 5)
p[0, 0], t[0, 0] = 0.0, 1.0  # log(0) clamped: a loss of 100
p[0, 1], t[0, 1] = 1.0, 1.0
p[0, 2], t[0, 2] = 0.0, 0.0
w = torch.rand(5)
case({"op": "bce", "reduction": "mean", "weight": True},
     lambda input, target, weight: nn.BCELoss(weight=weight)(input, target), {"input": p, "target": t, "weight": w},
     ["input"])
case({"op": "bce", "reduction": "none", "weight": False},
     lambda input, target: F.binary_cross_entropy(input, target, reduction="none"), {"input": p, "target": t}, ["input"])
z = r(4, 5) * 4
z[0, 0], z[0, 1], z[0, 2], z[0, 3] = 200.0, -200.0, 0.0, 40.0
pw = torch.rand(5) + 0.5
case({"op": "bce_logits", "reduction": "sum", "weight": True, "pos_weight": True},
     lambda input, target, weight, pos_weight: nn.BCEWithLogitsLoss(weight=weight, pos_weight=pos_weight, reduction="sum")(
         input, target), {"input": z, "target": t, "weight": w, "pos_weight": pw}, ["input", "target"])
case({"op": "bce_logits", "reduction": "mean", "weight": False, "pos_weight": False},
     lambda input, target: nn.BCEWithLogitsLoss()(input, target), {"input": z, "target": t}, ["input", "target"])
a, b = r(3, 7), r(3, 7)
case({"op": "l1", "reduction": "sum"}, lambda input, target: nn.L1Loss(reduction="sum")(input, target),
     {"input": a, "target": b})
case({"op": "smooth_l1", "reduction": "none", "beta": 0.5},
     lambda input, target: nn.SmoothL1Loss(reduction="none", beta=0.5)(input, target), {"input": a, "target": b})
case({"op": "huber", "reduction": "mean", "delta": 0.6},
     lambda input, target: nn.HuberLoss(reduction="mean", delta=0.6)(input, target), {"input": a, "target": b})
lp = torch.log_softmax(r(4, 6), 1)
q = torch.softmax(r(4, 6), 1)
q[0, :2] = 0  # 0 log 0 = 0
case({"op": "kl_div", "reduction": "batchmean", "log_target": False},
     lambda input, target: nn.KLDivLoss(reduction="batchmean")(input, target), {"input": lp, "target": q}, ["input"])
case({"op": "kl_div", "reduction": "sum", "log_target": True},
     lambda input, target: nn.KLDivLoss(reduction="sum", log_target=True)(input, target),
     {"input": lp, "target": torch.log_softmax(r(4, 6), 1)})

metadata["num_cases"] = str(num_cases)



write_safetensors(sys.argv[1] if len(sys.argv) > 1 else "tests/refcases/nn_ops.safetensors", tensors, metadata)
print("wrote %d cases, %d tensors" % (num_cases, len(tensors)))
