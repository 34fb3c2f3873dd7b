#!/usr/bin/env python3
"""ember against libtorch on the Fashion-MNIST examples, run alternately on one machine.

Usage: bench/peers/compare.py BUILD_DIR [--models mlp,cnn] [--threads 1,2] [--runs 3]
       [--epochs 1] [--isa avx2|avx512]

Each run trains one epoch (or --epochs) with the same model, Adam lr 1e-3, batch 128 and
data; ember and libtorch take turns run by run, so load swings hit both. Prints the
median epoch time, samples/s and ember / libtorch, per model and thread count, and the
vector instruction set each side ran with: ember's is fixed when it is compiled (its
--json says which; EMBER_CPU_ARCH chooses), libtorch's is chosen at run time
(ATEN_CPU_CAPABILITY, else the best the CPU has).

--isa avx2 simulates an AVX2-only machine on an AVX-512 one: libtorch runs with
ATEN_CPU_CAPABILITY=avx2 and both programs with OPENBLAS_CORETYPE=Haswell (OpenBLAS's
AVX2 kernels) unless OPENBLAS_CORETYPE is already set, which is then left as it is.
Give it a BUILD_DIR configured with -DEMBER_CPU_ARCH=x86-64-v3; the script warns when
ember's --json names another instruction set.
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


def cpu_best_isa():
    """The instruction set libtorch picks by default here (its rule: AVX-512 F/BW/VL/DQ, else AVX2 + FMA)."""
    try:
        flags = next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split()
    except (OSError, StopIteration):
        return "unknown"
    if all(f in flags for f in ("avx512f", "avx512bw", "avx512vl", "avx512dq")):
        return "avx512"
    return "avx2" if "avx2" in flags and "fma" in flags else "default"


def isa_env(isa):
    """The environment for --isa ISA (None: as it is), libtorch's instruction set in it, and a line saying both."""
    env = dict(os.environ)
    if isa:
        env["ATEN_CPU_CAPABILITY"] = isa
        if isa == "avx2" and "OPENBLAS_CORETYPE" not in env:  # a preset value is the user's choice
            env["OPENBLAS_CORETYPE"] = "Haswell"
    torch_isa = env.get("ATEN_CPU_CAPABILITY", "").lower() or f"{cpu_best_isa()} (CPU default)"
    print(f"OPENBLAS_CORETYPE={env.get('OPENBLAS_CORETYPE', '(unset: OpenBLAS detects the CPU)')}, "
          f"libtorch ATEN_CPU_CAPABILITY={torch_isa}")
    return env, torch_isa


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
    p.add_argument("--isa", choices=["avx2", "avx512"],
                   help="run libtorch with ATEN_CPU_CAPABILITY=ISA; with avx2 also OpenBLAS's Haswell kernels")
    a = p.parse_args()
    b = a.build_dir
    base, torch_isa = isa_env(a.isa)
    print("| model | threads | ember epoch s | libtorch epoch s | ember samples/s | libtorch samples/s | ember / libtorch time | accuracy ember / libtorch | isa ember / libtorch |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model in a.models.split(","):
        for t in a.threads.split(","):
            ours, theirs, acc_o, acc_t, isas = [], [], [], [], set()
            for r in range(a.runs):
                common = ["--epochs", str(a.epochs), "--threads", t, "--seed", str(r + 1)]
                e = last_json([f"{b}/examples/ember_{model}", *common, "--json"], base)
                isas.add(e.get("cpu_isa", "unknown"))
                env = dict(base)
                if os.path.isdir(OPENMP_BLAS):
                    env["LD_LIBRARY_PATH"] = OPENMP_BLAS
                l = last_json([f"{b}/bench/peers/ember_peer_{model}_torch", *common], env)
                ours += e["epoch_seconds"]
                theirs += l["epoch_seconds"]
                acc_o.append(e["test_accuracy"])
                acc_t.append(l["test_accuracy"])
            mo, mt = statistics.median(ours), statistics.median(theirs)
            ember_isa = ",".join(sorted(isas))
            if a.isa and ember_isa != a.isa:
                print(f"warning: --isa {a.isa}, but {b}'s ember runs {ember_isa} code "
                      f"(configure it with -DEMBER_CPU_ARCH={'x86-64-v3' if a.isa == 'avx2' else 'x86-64-v4'})",
                      file=sys.stderr)
            print(f"| {model} | {t} | {mo:.2f} | {mt:.2f} | {60000 / mo:.0f} | {60000 / mt:.0f} | {mo / mt:.2f} | "
                  f"{100 * statistics.median(acc_o):.2f}% / {100 * statistics.median(acc_t):.2f}% | "
                  f"{ember_isa} / {torch_isa.split()[0]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
