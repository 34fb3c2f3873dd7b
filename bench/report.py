#!/usr/bin/env python3
"""Runs the CPU benchmarks and prints their medians as Markdown tables.

Usage: bench/report.py BUILD_DIR [--repetitions N]

matmul: GFLOP/s of ember (Auto and each GEMM variant) beside Eigen and OpenBLAS called
directly, and ember's ratio to the faster peer. elementwise: GB/s of ember's add and sum
beside memcpy of the same traffic. All figures come from one run of each binary, so
they are side by side under the same machine load (repetitions randomly interleaved).
"""
import argparse
import json
import subprocess
import sys
from collections import defaultdict


def run(binary, reps):
    out = subprocess.run(
        # Interleaving the repetitions of all benchmarks spreads the machine's load swings
        # over every implementation instead of penalising whichever ran during one.
        [binary, f"--benchmark_repetitions={reps}", "--benchmark_report_aggregates_only=true",
         "--benchmark_enable_random_interleaving=true",
         "--benchmark_format=json"], check=True, capture_output=True, text=True).stdout
    medians = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        name = b["run_name"].split("/min_time")[0]
        medians[name] = b
    return medians


def matmul_table(m):
    rows = defaultdict(dict)
    for name, b in m.items():
        _, impl, case = name.split("/")
        rows[case][impl] = b["FLOP/s"] / 1e9
    impls = ["ember", "ember_eigen", "ember_openblas", "ember_openblas_split", "eigen", "openblas"]
    print("| case | " + " | ".join(impls) + " | ember / best peer |")
    print("|---" * (len(impls) + 2) + "|")
    for case, r in rows.items():
        best = max(r.get("eigen", 0), r.get("openblas", 0))
        cells = [f"{r[i]:.0f}" if i in r else "-" for i in impls]
        print(f"| {case} | " + " | ".join(cells) + f" | {r.get('ember', 0) / best:.2f} |")


def elementwise_table(m):
    print("| benchmark | median time | GB/s |")
    print("|---|---|---|")
    for name, b in m.items():
        gbs = b.get("bytes_per_second", 0) / 1e9
        print(f"| {name} | {b['real_time']:.0f} {b['time_unit']} | {gbs:.1f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("build_dir")
    p.add_argument("--repetitions", type=int, default=5)
    a = p.parse_args()
    print("GEMM, float32, GFLOP/s (median of %d)\n" % a.repetitions)
    matmul_table(run(f"{a.build_dir}/bench/ember_bench_matmul", a.repetitions))
    print("\nElementwise, float32 (median of %d)\n" % a.repetitions)
    elementwise_table(run(f"{a.build_dir}/bench/ember_bench_elementwise", a.repetitions))
    return 0


if __name__ == "__main__":
    sys.exit(main())
