#!/usr/bin/python3
"""PyTorch twin of ember's optimizers and schedules (issue 30): writes
tests/refcases/optim_ext.safetensors.

Run with Debian's PyTorch 1.13 (/usr/bin/python3 tests/refcases/optim_twin.py); CI runs only
ember's side (tests/optim/test_optim_ext.cpp). torch.optim in Python (foreach=False, the
single-tensor paths), float64 unless a case says F32, seed 0.

Cases (metadata caseN, a JSON object with "kind"):
* kind "optimizer": Adadelta, RMSprop, Adagrad (and SGD / Adam / RMSprop with parameter
  groups). Two parameters [3, 4] and [5]: paramI.init, paramI.grads [5, ...] (the gradient
  fed at step k + 1), paramI.after [5, ...] (the value after step k + 1). "options" are the
  optimizer's (ember's names: Adam's betas are beta1, beta2), "groups" null or a list of
  {"params": [indices], <overrides>}.
* kind "lbfgs": step(closure) three times on a problem ("logistic": mean log(1 + exp(-y (Xw + b)))
  over X [16, 3] (field X), y = +-1 (field y), parameters w [3] and b [1]; "rosenbrock":
  (1 - x)^2 + 100 (y - x^2)^2 with x and y of shape [1]): paramI.init, paramI.after [3, ...],
  loss [3] (what step returned), func_evals [3] and n_iter [3] (the state's counts after each step).
* kind "scheduler": lr [E, G] for epochs 0..E-1 (after e scheduler steps) over G parameter
  groups with base rates "base_lrs"; OneCycleLR also momentum [E, G]; ReduceLROnPlateau
  metrics [E - 1] (the metric given at step e + 1).
"""
import json
import math
import os
import struct

import torch
from twin_io import write_safetensors

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "optim_ext.safetensors")
STEPS = 5



def torch_options(name, options):
    """ember's option names -> torch's keyword arguments."""
    o = dict(options)
    if "beta1" in o:
        o["betas"] = (o.pop("beta1"), o.pop("beta2"))
    if name != "SGD":
        o["foreach"] = False
    return o


def optimizer_case(name, options, dtype=torch.float64, groups=None):
    gen = torch.Generator().manual_seed(len(cases))
    shapes = [(3, 4), (5,)]
    params = [torch.randn(s, generator=gen, dtype=torch.float64).to(dtype).requires_grad_() for s in shapes]
    init = [p.detach().clone() for p in params]
    grads = [torch.randn((STEPS,) + s, generator=gen, dtype=torch.float64).to(dtype) for s in shapes]
    if groups is None:
        arg = params
    else:
        arg = [dict(torch_options("SGD", {k: v for k, v in g.items() if k != "params"}),
                    params=[params[i] for i in g["params"]]) for g in groups]
        for a in arg:
            a.pop("foreach", None)
    opt = getattr(torch.optim, name)(arg, **torch_options(name, options))
    after = [[] for _ in params]
    for k in range(STEPS):
        for p, g in zip(params, grads):
            p.grad = g[k].clone()
        opt.step()
        for i, p in enumerate(params):
            after[i].append(p.detach().clone())
    fields = {}
    for i in range(len(params)):
        fields["param%d.init" % i] = init[i]
        fields["param%d.grads" % i] = grads[i]
        fields["param%d.after" % i] = torch.stack(after[i])
    meta = {"kind": "optimizer", "op": name, "optimizer": name, "options": options, "groups": groups,
            "dtype": "F64" if dtype == torch.float64 else "F32", "steps": STEPS, "num_params": 2}
    cases.append((meta, fields))


def logistic_problem():
    gen = torch.Generator().manual_seed(7)
    X = torch.randn(16, 3, generator=gen, dtype=torch.float64)
    y = torch.where(torch.rand(16, generator=gen, dtype=torch.float64) < 0.5, -1.0, 1.0).double()
    w = (0.5 * torch.randn(3, generator=gen, dtype=torch.float64)).requires_grad_()
    b = torch.zeros(1, dtype=torch.float64).requires_grad_()

    def loss_fn():
        z = -y * (X @ w + b)
        return torch.log(1 + torch.exp(z)).mean()
    return [w, b], loss_fn, {"X": X, "y": y}


def rosenbrock_problem():
    x = torch.tensor([-1.5], dtype=torch.float64).requires_grad_()
    y = torch.tensor([2.0], dtype=torch.float64).requires_grad_()

    def loss_fn():
        return ((1 - x) ** 2 + 100 * (y - x * x) ** 2).sum()
    return [x, y], loss_fn, {}


def lbfgs_case(problem, options):
    params, loss_fn, extra = {"logistic": logistic_problem, "rosenbrock": rosenbrock_problem}[problem]()
    init = [p.detach().clone() for p in params]
    kw = dict(options)
    kw["line_search_fn"] = kw.pop("line_search")
    opt = torch.optim.LBFGS(params, **kw)

    def closure():
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss
    after, losses, evals, iters = [[] for _ in params], [], [], []
    for _ in range(3):
        losses.append(float(opt.step(closure)))
        st = opt.state[params[0]]
        evals.append(st["func_evals"])
        iters.append(st["n_iter"])
        for i, p in enumerate(params):
            after[i].append(p.detach().clone())
    fields = dict(extra)
    for i in range(len(params)):
        fields["param%d.init" % i] = init[i]
        fields["param%d.after" % i] = torch.stack(after[i])
    fields["loss"] = torch.tensor(losses, dtype=torch.float64)
    fields["func_evals"] = torch.tensor(evals, dtype=torch.int64)
    fields["n_iter"] = torch.tensor(iters, dtype=torch.int64)
    meta = {"kind": "lbfgs", "op": "LBFGS", "problem": problem, "options": options, "dtype": "F64", "num_params": len(params)}
    cases.append((meta, fields))


LAMBDAS = {"pow0.95": lambda e: 0.95 ** e, "inv": lambda e: 1.0 / (e + 1), "warm3": lambda e: min(1.0, (e + 1) / 3)}


def scheduler_case(kind, settings, optimizer="SGD", epochs=20, metrics=None):
    base_lrs = [0.1, 0.02]
    params = [torch.zeros(1, dtype=torch.float64, requires_grad=True) for _ in base_lrs]
    opt_kw = {"SGD": {"momentum": 0.9}, "Adam": {}}[optimizer]
    opt = getattr(torch.optim, optimizer)([{"params": [p], "lr": lr} for p, lr in zip(params, base_lrs)], **opt_kw)
    s = dict(settings)
    if kind == "LambdaLR":
        s["lr_lambda"] = [LAMBDAS[n] for n in s.pop("lambdas")]
        if len(s["lr_lambda"]) == 1:
            s["lr_lambda"] = s["lr_lambda"][0]
    if kind == "ReduceLROnPlateau":
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, **s)
    else:
        sched = getattr(torch.optim.lr_scheduler, kind)(opt, **s)
    lrs, moms = [], []
    for e in range(epochs):
        lrs.append([g["lr"] for g in opt.param_groups])
        moms.append([g["betas"][0] if "betas" in g else g["momentum"] for g in opt.param_groups])
        if e + 1 == epochs:
            break
        opt.step()
        if metrics is not None:
            sched.step(metrics[e])
        else:
            sched.step()
    fields = {"lr": torch.tensor(lrs, dtype=torch.float64)}
    if kind == "OneCycleLR":
        fields["momentum"] = torch.tensor(moms, dtype=torch.float64)
    if metrics is not None:
        fields["metrics"] = torch.tensor(metrics[:epochs - 1], dtype=torch.float64)
    meta = {"kind": "scheduler", "op": kind, "scheduler": kind, "settings": settings, "optimizer": optimizer,
            "base_lrs": base_lrs, "epochs": epochs, "dtype": "F64"}
    cases.append((meta, fields))


cases = []


def main():
    torch.set_num_threads(1)
    optimizer_case("Adadelta", {})
    optimizer_case("Adadelta", {"lr": 0.5, "rho": 0.8, "eps": 1e-5, "weight_decay": 0.1})
    optimizer_case("RMSprop", {})
    optimizer_case("RMSprop", {"lr": 0.01, "alpha": 0.9, "eps": 1e-6, "weight_decay": 0.01, "momentum": 0.9,
                               "centered": True})
    optimizer_case("RMSprop", {"lr": 0.003, "centered": True})
    optimizer_case("RMSprop", {"lr": 0.01, "momentum": 0.5}, dtype=torch.float32)
    optimizer_case("Adagrad", {})
    optimizer_case("Adagrad", {"lr": 0.1, "lr_decay": 0.1, "weight_decay": 0.05, "initial_accumulator_value": 0.2,
                               "eps": 1e-8})
    optimizer_case("Adagrad", {"lr": 0.05}, dtype=torch.float32)
    optimizer_case("Adadelta", {"lr": 1.0}, dtype=torch.float32)
    optimizer_case("SGD", {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01},
                   groups=[{"params": [0]}, {"params": [1], "lr": 0.01, "weight_decay": 0.0, "momentum": 0.5}])
    optimizer_case("Adam", {"lr": 0.01, "weight_decay": 0.01},
                   groups=[{"params": [1], "beta1": 0.8, "beta2": 0.99}, {"params": [0], "lr": 0.001}])
    optimizer_case("AdamW", {"lr": 0.01}, groups=[{"params": [0]}, {"params": [1], "weight_decay": 0.0}])
    optimizer_case("RMSprop", {"lr": 0.01}, groups=[{"params": [0], "momentum": 0.9}, {"params": [1], "alpha": 0.5}])
    optimizer_case("Adagrad", {"lr": 0.1}, groups=[{"params": [0, 1], "lr_decay": 0.5}])

    lbfgs_case("logistic", {"lr": 1.0, "max_iter": 20, "max_eval": None, "tolerance_grad": 1e-7,
                            "tolerance_change": 1e-9, "history_size": 100, "line_search": None})
    lbfgs_case("logistic", {"lr": 0.5, "max_iter": 4, "max_eval": None, "tolerance_grad": 1e-7,
                            "tolerance_change": 1e-9, "history_size": 2, "line_search": None})
    lbfgs_case("logistic", {"lr": 1.0, "max_iter": 10, "max_eval": None, "tolerance_grad": 1e-7,
                            "tolerance_change": 1e-9, "history_size": 3, "line_search": "strong_wolfe"})
    lbfgs_case("rosenbrock", {"lr": 1.0, "max_iter": 8, "max_eval": None, "tolerance_grad": 1e-7,
                              "tolerance_change": 1e-9, "history_size": 4, "line_search": "strong_wolfe"})
    lbfgs_case("rosenbrock", {"lr": 0.1, "max_iter": 10, "max_eval": 12, "tolerance_grad": 1e-7,
                              "tolerance_change": 1e-9, "history_size": 5, "line_search": None})

    scheduler_case("LambdaLR", {"lambdas": ["pow0.95"]})
    scheduler_case("LambdaLR", {"lambdas": ["inv", "warm3"]})
    scheduler_case("MultiStepLR", {"milestones": [3, 7, 7, 12], "gamma": 0.5})
    scheduler_case("ExponentialLR", {"gamma": 0.9})
    scheduler_case("OneCycleLR", {"max_lr": 0.5, "total_steps": 20})
    scheduler_case("OneCycleLR", {"max_lr": [0.4, 0.04], "epochs": 4, "steps_per_epoch": 6, "pct_start": 0.25,
                                  "anneal_strategy": "linear", "three_phase": True, "div_factor": 10.0,
                                  "final_div_factor": 100.0, "base_momentum": 0.8, "max_momentum": 0.9},
                   optimizer="Adam", epochs=24)
    scheduler_case("OneCycleLR", {"max_lr": 0.3, "total_steps": 12, "cycle_momentum": False, "pct_start": 0.5},
                   epochs=13)
    metrics = [1.0, 0.9, 0.95, 0.9, 0.91, 0.92, 0.85, 0.86, 0.86, 0.87, 0.88, 0.5, 0.6, 0.7, 0.8, 0.9, 0.99, 1.0, 1.1]
    scheduler_case("ReduceLROnPlateau", {"mode": "min", "factor": 0.5, "patience": 1, "cooldown": 1,
                                         "min_lr": 0.004}, metrics=metrics)
    scheduler_case("ReduceLROnPlateau", {"mode": "max", "factor": 0.1, "patience": 2, "threshold": 0.05,
                                         "threshold_mode": "abs", "min_lr": [0.0, 0.001], "eps": 1e-3},
                   metrics=metrics)

    tensors, meta = [], {
        "family": "optim_ext",
        "summary": "Adadelta, RMSprop, Adagrad, parameter groups, LBFGS, and the LambdaLR, MultiStepLR, "
                   "ExponentialLR, OneCycleLR, ReduceLROnPlateau schedules",
        "generator": "PyTorch " + torch.__version__ + " (tests/refcases/optim_twin.py)",
        "seed": "0", "num_cases": str(len(cases)), "naming": "caseN.<field>"}
    for i, (m, fields) in enumerate(cases):
        meta["case%d" % i] = json.dumps(m)
        for k, v in fields.items():
            tensors.append(("case%d.%s" % (i, k), v))
    write_safetensors(OUT, tensors, meta)
    print("wrote", OUT, len(cases), "cases")


if __name__ == "__main__":
    main()
