#!/usr/bin/env python3
"""ember against libtorch on the Fashion-MNIST examples, run alternately on one machine.

Usage: bench/peers/compare.py BUILD_DIR [--models mlp,cnn] [--threads 1,2] [--runs 3]
       [--epochs 1] [--limit-train N]

Each run trains one epoch (or --epochs) with the same model, Adam lr 1e-3, batch 128 and
data; ember and libtorch take turns run by run, so load swings hit both. Prints the
median epoch time, samples/s and ember / libtorch, per model and thread count.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

# libtorch runs its ops on OpenMP threads; with Debian's default pthreads OpenBLAS the two
# thread pools oversubscribe the cores (its MLP epoch took 5.4 s instead of 1.3 s here),
# so the peer gets the OpenMP build of OpenBLAS (libopenblas0-openmp), for itself only.
OPENMP_BLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"


def last_json(cmd, env=None):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("build_dir")
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--epochs", type=int, default=1)
    a = p.parse_args()
    b = a.build_dir
    print("| model | threads | ember epoch s | libtorch epoch s | ember samples/s | libtorch samples/s | ember / libtorch time | accuracy ember / libtorch |")
    print("|---|---|---|---|---|---|---|---|")
    for model in a.models.split(","):
        for t in a.threads.split(","):
            ours, theirs, acc_o, acc_t = [], [], [], []
            for r in range(a.runs):
                common = ["--epochs", str(a.epochs), "--threads", t, "--seed", str(r + 1)]
                e = last_json([f"{b}/examples/ember_{model}", *common, "--json"])
                env = dict(os.environ)
                if os.path.isdir(OPENMP_BLAS):
                    env["LD_LIBRARY_PATH"] = OPENMP_BLAS
                l = last_json([f"{b}/bench/peers/ember_peer_{model}_torch", *common], env)
                ours += e["epoch_seconds"]
                theirs += l["epoch_seconds"]
                acc_o.append(e["test_accuracy"])
                acc_t.append(l["test_accuracy"])
            mo, mt = statistics.median(ours), statistics.median(theirs)
            print(f"| {model} | {t} | {mo:.2f} | {mt:.2f} | {60000 / mo:.0f} | {60000 / mt:.0f} | {mo / mt:.2f} | "
                  f"{100 * statistics.median(acc_o):.2f}% / {100 * statistics.median(acc_t):.2f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
