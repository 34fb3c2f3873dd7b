#!/usr/bin/env python3
"""PyTorch on the GPU, the peer of ember's MLP and CNN examples on --device cuda.

The same models, batch size (128), optimizer (Adam, lr 1e-3), Fashion-MNIST data resident
on the device (as ember's --data-on-device), cudnn.benchmark=True, fused Adam and TF32
off (ember's default; --tf32 here allows it for matmuls and convolutions, as the ember
examples' --tf32 does; scripts/gpu-check.sh passes it to neither). Two modes: eager, and
the whole training step captured once in a CUDA graph and replayed (static input
buffers, Adam with capturable=True); the graph mode skips the last partial batch (32 of
60000 samples).
Prints one JSON line per (model, mode) with the seconds of each epoch after a warm-up
epoch, and the test accuracy.

Usage: gpu_peer.py [--data DIR] [--epochs N] [--models mlp,cnn] [--modes eager,graph] [--tf32]
"""
import argparse
import gzip
import json
import os
import time

import numpy as np
import torch
import torch.nn as nn


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir, train, device):
    prefix = "train" if train else "t10k"

    def find(stem):
        for name in (stem + ".gz", stem):
            p = os.path.join(data_dir, name)
            if os.path.exists(p):
                return p
        raise FileNotFoundError(f"{stem}(.gz) not in {data_dir}")

    x = read_idx(find(prefix + "-images-idx3-ubyte"))
    y = read_idx(find(prefix + "-labels-idx1-ubyte"))
    x = torch.from_numpy(x.copy()).to(device).float().div_(255.0).unsqueeze(1)
    y = torch.from_numpy(y.copy()).to(device).long()
    return x, y


def make_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                             nn.Linear(256, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(),
                         nn.Linear(128, 10))


def accuracy(model, x, y, batch):
    model.eval()
    correct = torch.zeros((), dtype=torch.long, device=x.device)
    with torch.no_grad():
        for s in range(0, x.shape[0], batch):
            correct += (model(x[s:s + batch]).argmax(1) == y[s:s + batch]).sum()
    model.train()
    return correct.item() / x.shape[0]


def run(model_name, mode, args, train, test, device):
    torch.manual_seed(args.seed)
    model = make_model(model_name).to(device)
    graph = mode == "graph"
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True, capturable=graph)
    crit = nn.CrossEntropyLoss()
    x_all, y_all = train
    n, B = x_all.shape[0], 128
    gen = torch.Generator(device=device)
    gen.manual_seed(args.seed)

    if graph:
        static_x = x_all[:B].clone()
        static_y = y_all[:B].clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up iterations outside the capture, as the CUDA-graph docs ask
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                crit(model(static_x), static_y).backward()
                opt.step()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(g):
            static_loss = crit(model(static_x), static_y)
            static_loss.backward()
            opt.step()

    def epoch():
        order = torch.randperm(n, device=device, generator=gen)
        if graph:
            for s in range(0, n - B + 1, B):
                idx = order[s:s + B]
                static_x.copy_(x_all[idx])
                static_y.copy_(y_all[idx])
                g.replay()
        else:
            for s in range(0, n, B):
                idx = order[s:s + B]
                opt.zero_grad(set_to_none=True)
                crit(model(x_all[idx]), y_all[idx]).backward()
                opt.step()

    seconds = []
    for e in range(args.epochs + 1):  # the first epoch warms up (cuDNN's benchmark, allocator, graph)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        epoch()
        torch.cuda.synchronize()
        if e > 0:
            seconds.append(time.perf_counter() - t0)
    return {"peer": "pytorch", "torch": torch.__version__, "model": model_name, "mode": mode,
            "epoch_seconds": seconds, "test_accuracy": accuracy(model, *test, 1000),
            "device": torch.cuda.get_device_name(), "tf32": args.tf32}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--modes", default="eager,graph")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tf32", action="store_true")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_peer.py: torch sees no CUDA device")
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    device = torch.device("cuda")
    train, test = load(args.data, True, device), load(args.data, False, device)
    for model_name in args.models.split(","):
        for mode in args.modes.split(","):
            print(json.dumps(run(model_name, mode, args, train, test, device)), flush=True)


if __name__ == "__main__":
    main()
