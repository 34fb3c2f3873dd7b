#!/usr/bin/python3
"""Peak memory of an attention training step against T, math path vs fused path.

Runs ember_bench_attention_memory (bench/attention_memory.cpp) on the CPU and on the
emulated CUDA device, prints a markdown table and writes docs/attention-memory.svg (a
log-log plot drawn by hand: this machine has no matplotlib). On log-log axes a linear
footprint has slope 1 and a quadratic one slope 2; guide lines of both slopes are drawn.

  scripts/attention-memory.py BUILD_DIR [--out docs/attention-memory.svg]

BUILD_DIR: an emulated build (-DEMBER_CUDA=EMULATED -DEMBER_BUILD_BENCH=ON) with the
target ember_bench_attention_memory built; its CPU device is the CPU backend of any build.
"""
import argparse
import math
import os
import subprocess
import sys

# (label, device, heads, head dim, sizes). The emulated device runs its kernels on
# fibers on the host: small H and D keep T = 4096 to a minute.
RUNS = [
    ("CPU", "cpu", 4, 64, [256, 512, 1024, 2048, 4096]),
    ("emulated CUDA", "cuda", 2, 16, [256, 512, 1024, 2048, 4096]),
]
COLORS = {"math": "#c0392b", "flash": "#2471a3"}


def measure(binary, device, heads, dim, sizes):
    env = dict(os.environ, EMBER_EMU_DEVICE_MEMORY="8GiB", EMBER_NUM_THREADS="2")
    out = subprocess.run([binary, "--device", device, "--heads", str(heads), "--dim", str(dim)] +
                         [str(t) for t in sizes], env=env, check=True, capture_output=True, text=True).stdout
    peaks = {"math": {}, "flash": {}}
    for line in out.splitlines():
        if line.startswith("#"):
            continue
        path, t, peak = line.split()
        peaks[path][int(t)] = None if peak == "oom" else int(peak)
    return peaks


def mib(b):
    return "out of memory" if b is None else f"{b / 2**20:.1f}"


def table(results):
    rows = ["| device (B = 1, H, D) | T | math path peak (MiB) | fused path peak (MiB) | math / fused |",
            "|---|---:|---:|---:|---:|"]
    for (label, _, heads, dim, sizes), peaks in results:
        for t in sizes:
            m, f = peaks["math"].get(t), peaks["flash"].get(t)
            ratio = f"{m / f:.1f}" if m and f else ""
            rows.append(f"| {label} (1, {heads}, {dim}) | {t} | {mib(m)} | {mib(f)} | {ratio} |")
    return "\n".join(rows)


def svg(results):
    W, H, panel_w, top, left, bottom = 960, 420, 420, 40, 70, 60
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
           f'font-size="12">', f'<rect width="{W}" height="{H}" fill="white"/>']
    for p, ((label, _, heads, dim, sizes), peaks) in enumerate(results):
        x0, y0, pw, ph = left + p * (panel_w + 80), top, panel_w, H - top - bottom
        values = [v for path in peaks.values() for v in path.values() if v]
        lo_y, hi_y = math.log2(min(values)) - 0.5, math.log2(max(values)) + 0.5
        lo_x, hi_x = math.log2(sizes[0]), math.log2(sizes[-1])

        def px(t):
            return x0 + (math.log2(t) - lo_x) / (hi_x - lo_x) * pw

        def py(b):
            return y0 + ph - (math.log2(b) - lo_y) / (hi_y - lo_y) * ph

        out.append(f'<rect x="{x0}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>')
        out.append(f'<text x="{x0 + pw / 2}" y="{y0 - 12}" text-anchor="middle" font-weight="bold">'
                   f'{label}: B = 1, H = {heads}, D = {dim}, float32, causal</text>')
        for t in sizes:
            out.append(f'<line x1="{px(t):.1f}" y1="{y0 + ph}" x2="{px(t):.1f}" y2="{y0 + ph + 5}" stroke="#888"/>')
            out.append(f'<text x="{px(t):.1f}" y="{y0 + ph + 18}" text-anchor="middle">{t}</text>')
        out.append(f'<text x="{x0 + pw / 2}" y="{y0 + ph + 38}" text-anchor="middle">sequence length T</text>')
        e = math.ceil(lo_y)
        while e <= hi_y:
            y = py(2 ** e)
            lab = f"{2 ** (e - 20):g} MiB" if e >= 20 else f"{2 ** (e - 10):g} KiB"
            out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + pw}" y2="{y:.1f}" stroke="#eee"/>')
            out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{lab}</text>')
            e += 2
        for path, name in (("math", "math path"), ("flash", "fused path")):
            pts = [(t, peaks[path][t]) for t in sizes if peaks[path].get(t)]
            if not pts:
                continue
            d = " ".join(f"{px(t):.1f},{py(b):.1f}" for t, b in pts)
            out.append(f'<polyline points="{d}" fill="none" stroke="{COLORS[path]}" stroke-width="2"/>')
            for t, b in pts:
                out.append(f'<circle cx="{px(t):.1f}" cy="{py(b):.1f}" r="3" fill="{COLORS[path]}"/>')
            # A guide of the slope the path should have (2: quadratic, 1: linear) through its first point.
            slope = 2 if path == "math" else 1
            t0, b0 = pts[0]
            g = [(t, b0 * (t / t0) ** slope) for t in (sizes[0], sizes[-1])]
            out.append(f'<line x1="{px(g[0][0]):.1f}" y1="{py(g[0][1]):.1f}" x2="{px(g[1][0]):.1f}" '
                       f'y2="{py(g[1][1]):.1f}" stroke="{COLORS[path]}" stroke-dasharray="4 4" opacity="0.6"/>')
            ly = y0 + 16 + (0 if path == "math" else 18)
            out.append(f'<text x="{x0 + 10}" y="{ly}" fill="{COLORS[path]}">{name} '
                       f'(dashed: slope {slope}, {"T^2" if slope == 2 else "T"})</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build_dir")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "docs", "attention-memory.svg"))
    args = ap.parse_args()
    binary = os.path.join(args.build_dir, "bench", "ember_bench_attention_memory")
    results = [(run, measure(binary, *run[1:])) for run in RUNS]
    print(table(results))
    with open(args.out, "w") as f:
        f.write(svg(results))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
