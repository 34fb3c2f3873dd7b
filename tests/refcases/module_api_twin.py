#!/usr/bin/python3
"""PyTorch twin of ember's module system (issue 30): writes tests/refcases/module_api.safetensors.

Run with Debian's PyTorch 1.13 (/usr/bin/python3 tests/refcases/module_api_twin.py); CI runs
only ember's side (tests/layers/test_module_system.cpp, which builds the same model).

What PyTorch lists for a model with a weight tied to two places (an Embedding's weight as
the output Linear's, as word_language_model ties them), a module held twice
(Sequential(lin, ReLU(), lin)) and a submodule registered under two names, as JSON lists
in the metadata: named_parameters, named_buffers, state_dict keys, named_modules,
named_children, and the order apply() visits the modules in (by their named_modules name).
And the issue's SGD example: y = w * w * x through Sequential(s, s) with w = 1, x = 1,
lr 0.1: PyTorch steps w once, to 0.8 (tensor sgd.w_after, float64).
"""
import json
import os
import struct

import torch
from twin_io import write_safetensors
import torch.nn as nn

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "module_api.safetensors")



class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Embedding(10, 4)
        lin = nn.Linear(4, 4)
        self.body = nn.Sequential(lin, nn.ReLU(), lin)  # one module held twice
        self.norm = nn.BatchNorm1d(4)
        self.also_norm = self.norm  # one submodule under two names
        self.decoder = nn.Linear(4, 10)
        self.decoder.weight = self.encoder.weight  # tied


class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones((), dtype=torch.float64))

    def forward(self, x):
        return self.w * x


def main():
    net = Net()
    name_of = {id(m): n for n, m in net.named_modules()}
    visited = []
    net.apply(lambda m: visited.append(name_of[id(m)]))
    meta = {
        "family": "module_api",
        "generator": "PyTorch " + torch.__version__ + " (tests/refcases/module_api_twin.py)",
        "named_parameters": json.dumps([n for n, _ in net.named_parameters()]),
        "named_buffers": json.dumps([n for n, _ in net.named_buffers()]),
        "state_dict": json.dumps(list(net.state_dict().keys())),
        "named_modules": json.dumps([n for n, _ in net.named_modules()]),
        "named_children": json.dumps([n for n, _ in net.named_children()]),
        "apply_order": json.dumps(visited),
        "tied_state_dict_shares": json.dumps(
            net.state_dict()["decoder.weight"].data_ptr() == net.state_dict()["encoder.weight"].data_ptr()),
    }

    s = Scale()
    model = nn.Sequential(s, s)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones((), dtype=torch.float64)).backward()
    opt.step()
    meta["sgd_num_params"] = json.dumps(len(list(model.parameters())))
    write_safetensors(OUT, [("sgd.w_after", s.w)], meta)
    print("wrote", OUT, "w_after =", s.w.item())


if __name__ == "__main__":
    main()
