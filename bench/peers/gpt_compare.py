#!/usr/bin/env python3
"""ember_gpt against its PyTorch peer (nanogpt_peer.py) on the CPU, run alternately.

Usage: bench/peers/gpt_compare.py BUILD_DIR [--seeds 1,2,3] [--threads 2] [--preset cpu]
       [--iters N] [--python /usr/bin/python3] [--extra "FLAGS for both"]

Each seed trains ember_gpt and then the peer with the same preset, thread count and seed
(ember first, then PyTorch, seed by seed, so that load swings hit both). Prints the load
average before and after, one line per run, and a markdown table: the median time per
training iteration of each (evaluations excluded by both), ember / PyTorch, and the
median validation loss at the end of each. --iters N overrides the preset's iterations
(the cosine decay then ends at N too): a shorter run measures the time per iteration
only, its losses are not the preset's.

The peer runs with OpenMP OpenBLAS when installed (libopenblas0-openmp), as
compare.py's libtorch peer does: PyTorch's OpenMP threads and Debian's default pthreads
OpenBLAS oversubscribe the cores otherwise.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OPENMP_BLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"


def last_json(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("build_dir")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--threads", default="2")
    p.add_argument("--preset", default="cpu")
    p.add_argument("--iters", type=int)
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--extra", default="", help="more flags for both programs, e.g. '--eval-interval 500'")
    a = p.parse_args()
    common = ["--preset", a.preset, "--threads", a.threads] + a.extra.split()
    if a.iters is not None:
        common += ["--iters", str(a.iters)]
    peer_env = dict(os.environ)
    if os.path.isdir(OPENMP_BLAS):
        peer_env["LD_LIBRARY_PATH"] = OPENMP_BLAS + (":" + peer_env["LD_LIBRARY_PATH"] if "LD_LIBRARY_PATH" in peer_env else "")
    print(f"load average before: {loadavg()}")
    ours, theirs = [], []
    for seed in a.seeds.split(","):
        args = common + ["--seed", seed]
        e = last_json([os.path.join(a.build_dir, "examples", "ember_gpt"), "--device", "cpu", "--json"] + args)
        t = last_json([a.python, os.path.join(HERE, "nanogpt_peer.py"), "--device", "cpu"] + args, env=peer_env)
        ours.append(e)
        theirs.append(t)
        print(f"seed {seed}: ember {e['ms_per_iter']:.1f} ms/iter, val loss {e['val_loss']:.4f} ({e['cpu_isa']}); "
              f"PyTorch {t['torch']} {t['ms_per_iter']:.1f} ms/iter, val loss {t['val_loss']:.4f}; "
              f"load {loadavg()}", flush=True)
    print(f"load average after: {loadavg()}\n")
    med = lambda runs, k: statistics.median(r[k] for r in runs)
    me, mt = med(ours, "ms_per_iter"), med(theirs, "ms_per_iter")
    print("| preset | threads | iterations | seeds | ember ms/iter | PyTorch ms/iter | ember / PyTorch | ember val loss | PyTorch val loss |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| {a.preset} | {a.threads} | {ours[0]['iters']} | {a.seeds} | {me:.1f} | {mt:.1f} | {me / mt:.2f} | "
          f"{med(ours, 'val_loss'):.4f} | {med(theirs, 'val_loss'):.4f} |")


if __name__ == "__main__":
    main()
