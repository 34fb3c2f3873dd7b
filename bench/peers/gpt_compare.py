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

The peer runs with OPENBLAS_NUM_THREADS=1 (unless it is set): PyTorch's --threads
OpenMP threads then run its ops, and OpenBLAS's own threads do not oversubscribe the
cores. Measured here (2 cores, --preset cpu, 20 iterations at --threads 2, two rounds
under a load average near 6): 735 / 377 ms per iteration with OPENBLAS_NUM_THREADS=1,
1083 / 633 with the OpenMP OpenBLAS (compare.py's choice for libtorch), 1860 / 1254 with
Debian's default pthreads OpenBLAS at 2 threads.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


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
    peer_env.setdefault("OPENBLAS_NUM_THREADS", "1")
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
