#!/usr/bin/env python3
"""ember against libtorch on the Fashion-MNIST CNN's ops, one by one, and the recurrent layers at the
PyTorch examples' shapes (bench/bench_layers.cpp), on one machine.

Usage: bench/peers/compare_layers.py BUILD_DIR [--threads 1,2] [--isa avx2|avx512]

Runs bench/bench_layers (Google Benchmark, medians of 5 repetitions) and its libtorch
twin (bench/peers/layers_torch.cpp, medians of 7 runs) one after the other for each thread
count, and prints milliseconds per call and ember / libtorch. --isa is compare.py's: avx2 runs
libtorch with ATEN_CPU_CAPABILITY=avx2 and both with OPENBLAS_CORETYPE=Haswell (unless
set), for a BUILD_DIR configured with -DEMBER_CPU_ARCH=x86-64-v3.
"""
import argparse
import json
import os
import subprocess
import sys

from compare import isa_env

OPENMP_BLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"  # as in compare.py


def ember_ms(build, threads, base):
    env = dict(base, EMBER_NUM_THREADS=str(threads))
    out = subprocess.run([f"{build}/bench/ember_bench_layers", "--benchmark_repetitions=5",
                          "--benchmark_report_aggregates_only=true", "--benchmark_format=json"],
                         check=True, capture_output=True, text=True, env=env).stdout
    ms = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("aggregate_name") == "median":
            _, op, pass_ = b["run_name"].split("/")[:3]
            ms[(op, pass_)] = b["real_time"]
    return ms


def torch_ms(build, threads, base):
    env = dict(base)
    if os.path.isdir(OPENMP_BLAS):
        env["LD_LIBRARY_PATH"] = OPENMP_BLAS
    out = subprocess.run([f"{build}/bench/peers/ember_peer_layers_torch", str(threads)], check=True,
                         capture_output=True, text=True, env=env).stdout
    return {(op, pass_): float(ms) for op, pass_, ms in (line.split() for line in out.strip().splitlines())}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("build_dir")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--isa", choices=["avx2", "avx512"], help="as compare.py's --isa")
    a = p.parse_args()
    base, _ = isa_env(a.isa)
    print("| op | pass | threads | ember ms | libtorch ms | ember / libtorch |")
    print("|---|---|---|---|---|---|")
    for t in a.threads.split(","):
        e, l = ember_ms(a.build_dir, int(t), base), torch_ms(a.build_dir, int(t), base)
        for key in sorted(e, key=lambda k: (k[0], k[1] != "fwd")):
            if key in l:
                print(f"| {key[0]} | {key[1]} | {t} | {e[key]:.2f} | {l[key]:.2f} | {e[key] / l[key]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
