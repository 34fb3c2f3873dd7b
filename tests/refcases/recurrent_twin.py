#!/usr/bin/python3
"""PyTorch twin of ember's recurrent layers (issue 30): writes tests/refcases/recurrent.safetensors.

Run with Debian's PyTorch 1.13 (/usr/bin/python3 tests/refcases/recurrent_twin.py); CI runs
only ember's side (tests/layers/test_recurrent_refcases.cpp).

Each case is a module (LSTM, GRU, RNN with tanh or relu, multi-layer, bidirectional,
batch_first, with or without given initial states; LSTMCell, GRUCell, RNNCell) in float64.
Stored per case i, as case<i>.<name>:
  param.<pytorch name>   the module's parameters, by their state-dict names
  input, h0, c0          the input and the initial states (when given)
  output, h_n, c_n       what forward returns (cells: h_n, and c_n for LSTMCell)
  grad.<name>            the gradients of loss = sum(output * w_out) + sum(h_n * w_h)
                         (+ sum(c_n * w_c)) with respect to input, h0, c0 and every
                         parameter, the weights w_* stored as weight.output, weight.h_n, weight.c_n
and metadata case<i> = JSON {kind, input_size, hidden_size, num_layers, bidirectional,
batch_first, bias, nonlinearity, has_h0}.
"""
import json
import os

import torch
from twin_io import write_safetensors

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "recurrent.safetensors")

LAYERS = [
    # kind, T, B (0: unbatched), I, H, layers, bidirectional, batch_first, bias, nonlinearity, has_h0
    ("LSTM", 7, 3, 4, 5, 2, True, False, True, "tanh", True),
    ("LSTM", 5, 1, 3, 17, 1, False, True, True, "tanh", False),
    ("LSTM", 4, 0, 3, 5, 2, True, False, False, "tanh", True),
    ("GRU", 7, 3, 4, 5, 3, False, False, True, "tanh", True),
    ("GRU", 6, 2, 3, 17, 2, True, True, True, "tanh", False),
    ("RNN", 7, 3, 4, 5, 2, True, False, True, "tanh", True),
    ("RNN", 5, 2, 3, 6, 2, False, True, True, "relu", True),
]
CELLS = [
    # kind, B (0: unbatched), I, H, bias, nonlinearity
    ("LSTMCell", 3, 4, 5, True, "tanh"),
    ("GRUCell", 3, 4, 17, True, "tanh"),
    ("GRUCell", 0, 4, 5, False, "tanh"),
    ("RNNCell", 3, 4, 5, True, "relu"),
    ("RNNCell", 1, 4, 5, True, "tanh"),
]


def layer_case(i, spec, tensors):
    kind, T, B, I, H, L, bi, bf, bias, nl, has_h0 = spec
    D = 2 if bi else 1
    kw = dict(num_layers=L, bidirectional=bi, batch_first=bf, bias=bias)
    if kind == "RNN":
        kw["nonlinearity"] = nl
    m = getattr(torch.nn, kind)(I, H, **kw).double()
    shape = (T, I) if B == 0 else ((B, T, I) if bf else (T, B, I))
    sshape = (L * D, H) if B == 0 else (L * D, B, H)
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(sshape, dtype=torch.float64, requires_grad=True) if has_h0 else None
    c0 = torch.randn(sshape, dtype=torch.float64, requires_grad=True) if has_h0 and kind == "LSTM" else None
    if kind == "LSTM":
        out, (hn, cn) = m(x, (h0, c0)) if has_h0 else m(x)
    else:
        out, hn = m(x, h0) if has_h0 else m(x)
        cn = None
    finish(i, m, x, h0, c0, out, hn, cn, tensors)
    return dict(kind=kind, input_size=I, hidden_size=H, num_layers=L, bidirectional=bi, batch_first=bf, bias=bias,
                nonlinearity=nl, has_h0=has_h0)


def cell_case(i, spec, tensors):
    kind, B, I, H, bias, nl = spec
    kw = dict(bias=bias)
    if kind == "RNNCell":
        kw["nonlinearity"] = nl
    m = getattr(torch.nn, kind)(I, H, **kw).double()
    x = torch.randn((I,) if B == 0 else (B, I), dtype=torch.float64, requires_grad=True)
    sshape = (H,) if B == 0 else (B, H)
    h0 = torch.randn(sshape, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(sshape, dtype=torch.float64, requires_grad=True) if kind == "LSTMCell" else None
    if kind == "LSTMCell":
        hn, cn = m(x, (h0, c0))
    else:
        hn, cn = m(x, h0), None
    finish(i, m, x, h0, c0, None, hn, cn, tensors)
    return dict(kind=kind, input_size=I, hidden_size=H, num_layers=1, bidirectional=False, batch_first=False,
                bias=bias, nonlinearity=nl, has_h0=True)


def finish(i, m, x, h0, c0, out, hn, cn, tensors):
    p = f"case{i}."
    for name, t in m.named_parameters():
        tensors.append((p + "param." + name, t))
    results = [("output", out), ("h_n", hn), ("c_n", cn)]
    loss = 0
    for name, t in results:
        if t is None:
            continue
        w = torch.randn(t.shape, dtype=torch.float64)
        tensors.append((p + name, t))
        tensors.append((p + "weight." + name, w))
        loss = loss + (t * w).sum()
    loss.backward()
    tensors.append((p + "input", x))
    tensors.append((p + "grad.input", x.grad))
    for name, t in [("h0", h0), ("c0", c0)]:
        if t is not None:
            tensors.append((p + name, t))
            tensors.append((p + "grad." + name, t.grad))
    for name, t in m.named_parameters():
        tensors.append((p + "grad." + name, t.grad))


def main():
    torch.set_num_threads(1)
    torch.manual_seed(30)
    tensors, meta = [], {}
    i = 0
    for spec in LAYERS:
        meta[f"case{i}"] = json.dumps(layer_case(i, spec, tensors))
        i += 1
    for spec in CELLS:
        meta[f"case{i}"] = json.dumps(cell_case(i, spec, tensors))
        i += 1
    meta["num_cases"] = str(i)
    meta["made_with"] = f"torch {torch.__version__}"
    write_safetensors(OUT, tensors, meta)


if __name__ == "__main__":
    main()
