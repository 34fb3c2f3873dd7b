#!/usr/bin/python3
"""The calibrated model of ember's kernels' H200 time from the CUDA emulator's counters.

    # a GPU run's measurements, with the counters of the code it measured, join the calibration
    scripts/kernel-model.py add --table MEASURED.md --counters COUNTERS.tsv \\
        --commit ba9852f --date 2026-12-04 --gpu "H200 SXM"
    # fit, report the leave-one-out error, write bench/calibration/h200_model.txt
    scripts/kernel-model.py fit
    # predicted against measured, and today's kernels (a counters table of today's code)
    scripts/kernel-model.py predict --counters TODAY.tsv
    # the bench's predictions (its table and --counters of one run) agree with this formula
    scripts/kernel-model.py check --counters C.tsv --table T.md

MEASURED.md is the table ember_bench_cuda_kernels prints on a GPU (gpu-check's last table);
COUNTERS.tsv is what `ember_bench_cuda_kernels --emulated --counters FILE` writes, for the
commit that was measured (scripts/kernel-counters-at.sh COMMIT ...). The model's formula is
bench/kernel_model.h's (the bench predicts with it): time = launches x floor + the p-norm of
(DRAM, L2 sectors, in flight, issue, shared, math), p fitted (a smooth max: the phases
partly overlap) + the 64-bit integer divides at a fitted rate (they come before the loads
whose addresses they compute). Fitted by Nelder-Mead on the logarithms of the parameters,
minimising the mean absolute log error; leave-one-out refits without each kernel in turn and
predicts it. Needs numpy only.
"""
import argparse
import json
import math
import os
import re
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CALIBRATION = os.path.join(ROOT, 'bench', 'calibration', 'h200.json')
MODEL = os.path.join(ROOT, 'bench', 'calibration', 'h200_model.txt')
SMS = 132

# name, starting value (a datasheet figure or a plain guess), the physical range the fit
# keeps it in (the H200's datasheet: 4.8 TB/s of HBM3e, 67 TFLOP/s f32, 989 bf16 dense;
# L2 above DRAM; a loaded DRAM latency of 0.3-2 us), unit. Without the ranges the fit
# traded the terms for each other (reads at 9.5 TB/s, L2 at 4.3: the L2 term standing for
# DRAM, which coalesced kernels' sectors equal).
PARAMS = [
    ('floor_us', 3.0, (0.5, 30), 'us a launch, launch and tail'),
    ('read_gbs', 4000.0, (1000, 4800), 'GB/s, DRAM reads'),
    ('write_gbs', 4000.0, (1000, 4800), 'GB/s, DRAM writes'),
    ('l2_gbs', 10000.0, (4800, 30000), 'GB/s, sectors between L2 and the SMs (L1 misses, stores)'),
    ('latency_us', 1.0, (0.3, 2), 'us, loaded memory latency (Little)'),
    ('issue_per_us', 1980.0, (10, 1e5), 'global requests an SM issues a us'),
    ('wavefronts_per_us', 1980.0, (10, 1e5), 'shared-memory wavefronts an SM serves a us'),
    ('f32_tflops', 60.0, (5, 67), 'TFLOP/s, f32 FMA at full latency hiding'),
    ('bf16_tflops', 620.0, (50, 989), 'TFLOP/s, bf16 mma.sync'),
    ('math_warps', 16.0, (1, 64), 'resident warps an SM needs for its math rate'),
    ('divisions_per_us', 113.0, (10, 1e4), 'warp 64-bit integer divides an SM runs a us'),
    ('smooth_p', 4.0, (1, 64), 'the p of the terms\' p-norm (large: their max)'),
]
LOG_LO = np.log([p[2][0] for p in PARAMS])
LOG_HI = np.log([p[2][1] for p in PARAMS])


def values(theta):
    """The parameters of a point of the search: its logarithms, held to the ranges."""
    return np.exp(np.clip(theta, LOG_LO, LOG_HI))
FEATURES = ['read_bytes', 'write_bytes', 'sectors', 'requests', 'wavefronts', 'flops', 'flop_kind', 'warps_per_sm',
            'bytes_per_request', 'loads_per_burst', 'l2_sectors', 'launches', 'warp_basic_blocks',
            'warp_divisions_64', 'warp_divisions_32']
# For counters tables written before a feature: one launch, every sector an L1 miss.
DEFAULTS = {'loads_per_burst': 1.0, 'launches': 1.0, 'warp_basic_blocks': 0.0, 'warp_divisions_64': 0.0,
            'warp_divisions_32': 0.0}
FALLBACK = {'l2_sectors': 'sectors'}


def counter(c, k):
    return float(c.get(k, c.get(FALLBACK.get(k, k), DEFAULTS.get(k, 0))))


def terms(theta, f):
    """Each term of bench/kernel_model.h's predict(), in us; f: dict of feature arrays."""
    floor, rd, wr, l2, lat, issue, wave, f32, bf16, mw, div, _ = values(theta)
    warps = np.maximum(f['warps_per_sm'], 1)
    dram = f['read_bytes'] / (rd * 1e3) + f['write_bytes'] / (wr * 1e3)
    # The bf16 mma.sync rows keep only their DRAM bytes and FLOPs: their counters are the
    # ldmatrix/cp.async instructions' now, but the L2 and issue rates are fitted on SIMT
    # kernels, and at them the GEMM's cp.async sectors alone exceed its measured time
    # (docs/kernel-speed.md, "Predicted time").
    tc = f['flop_kind'] == 1
    l2t = np.where(tc, 0.0, 32 * f['l2_sectors']) / (l2 * 1e3)
    flight = (f['read_bytes'] + f['write_bytes']) * lat / (SMS * warps * np.maximum(f['bytes_per_request'], 1))
    iss = np.where(tc, 0.0, f['requests']) / (SMS * issue)
    shared = np.where(tc, 0.0, f['wavefronts']) / (SMS * wave)
    math_ = f['flops'] / (np.where(f['flop_kind'] == 1, bf16, f32) * 1e6 * np.minimum(1.0, warps / mw))
    # The index arithmetic's 64-bit divides (Note [Divisions], kernels/emu/division_sites.cpp):
    # they compute the addresses the loads wait on, so they add to the other terms rather
    # than overlap them. Narrower divides are counted but not used (docs/kernel-speed.md).
    divides = f['warp_divisions_64'] / (SMS * div)
    return floor * f['launches'], np.stack([dram, l2t, flight, iss, shared, math_, divides])


BOUNDS = ['DRAM', 'L2 sectors', 'in flight', 'issue', 'shared', 'math', 'divides']
OVERLAPPED = 6  # the terms before it overlap (their p-norm); the divides add


def predict(theta, f):
    floor, t = terms(theta, f)
    p = values(theta)[-1]
    overlapped = t[:OVERLAPPED]
    top = np.maximum(overlapped.max(axis=0), 1e-30)
    return floor + top * np.sum((overlapped / top) ** p, axis=0) ** (1 / p) + t[OVERLAPPED:].sum(axis=0)


def loss(theta, f, measured):
    # Mean absolute log error: the percentage error the model is judged by, less swayed by
    # the kernels no counter explains than a squared error.
    return float(np.mean(np.abs(np.log(predict(theta, f)) - np.log(measured))))


def nelder_mead(fun, x0, step=0.5, iters=4000, tol=1e-10):
    n = len(x0)
    simplex = [np.array(x0, float)]
    for i in range(n):
        x = np.array(x0, float)
        x[i] += step
        simplex.append(x)
    values = [fun(x) for x in simplex]
    for _ in range(iters):
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if values[-1] - values[0] < tol:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        reflected = centroid + (centroid - simplex[-1])
        fr = fun(reflected)
        if fr < values[0]:
            expanded = centroid + 2 * (centroid - simplex[-1])
            fe = fun(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centroid + 0.5 * (simplex[-1] - centroid)
            fc = fun(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                for i in range(1, len(simplex)):
                    simplex[i] = simplex[0] + 0.5 * (simplex[i] - simplex[0])
                    values[i] = fun(simplex[i])
    best = int(np.argmin(values))
    return simplex[best], values[best]


def fit(f, measured):
    theta0 = np.log([p[1] for p in PARAMS])
    best, value = theta0, loss(theta0, f, measured)
    # Restarts from the best point so far: the max() makes the surface piecewise.
    for step in (1.0, 0.5, 0.25, 0.1):
        theta, v = nelder_mead(lambda t: loss(t, f, measured), best, step)
        if v < value:
            best, value = theta, v
    return best


def load_calibration():
    if not os.path.exists(CALIBRATION):
        return {'rows': []}
    with open(CALIBRATION) as fh:
        return json.load(fh)


def read_counters(path):
    rows = {}
    with open(path) as fh:
        header = fh.readline().rstrip('\n').split('\t')
        for line in fh:
            fields = line.rstrip('\n').split('\t')
            row = dict(zip(header, fields))
            rows[row['kernel']] = row
    return rows


def read_measured(path):
    """{row: median us} of the markdown table ember_bench_cuda_kernels prints on a GPU."""
    out = {}
    with open(path) as fh:
        for line in fh:
            cells = [c.strip() for c in line.strip().strip('|').split('|')]
            if len(cells) < 3:
                continue
            m = re.match(r'([0-9.]+) us$', cells[2])
            if m:
                out[cells[0]] = float(m.group(1))
    return out


def features(rows):
    return {k: np.array([counter(r['counters'], k) for r in rows]) for k in FEATURES}


def report_unseen(seen, new):
    """How the model fitted on the calibration so far predicts a GPU run's rows: its error on
    kernels (at this commit) it had not seen."""
    if len(seen) < 3 or not new:
        return
    theta = fit(features(seen), np.array([r['measured_us'] for r in seen]))
    pred = predict(theta, features(new))
    print('| kernel | measured | predicted before it joined | error |')
    print('|---|---|---|---|')
    errors = []
    for r, p in zip(new, pred):
        errors.append(abs(p - r['measured_us']) / r['measured_us'])
        print(f"| {r['kernel']} | {r['measured_us']:.1f} us | {p:.1f} us | {100 * errors[-1]:.0f}% |")
    print(f'\nThe model fitted on the {len(seen)} earlier rows, on these {len(new)}: mean absolute percentage '
          f'error {100 * np.mean(errors):.1f}% (median {100 * np.median(errors):.1f}%)\n')


def cmd_add(a):
    cal = load_calibration()
    counters = read_counters(a.counters)
    measured = read_measured(a.table)
    added = 0
    for name, us in measured.items():
        if name not in counters:
            continue
        c = counters[name]
        cal['rows'] = [r for r in cal['rows']
                       if not (r['kernel'] == name and r['commit'] == a.commit and r['gpu'] == a.gpu)]
        cal['rows'].append({
            'kernel': name, 'measured_us': us, 'commit': a.commit, 'gpu': a.gpu, 'date': a.date,
            'kernels': c.get('kernels', ''), 'bytes': float(c['bytes']),
            'counters': {k: counter(c, k) for k in FEATURES}})
        added += 1
    missing = sorted(set(measured) - set(counters))
    report_unseen(cal['rows'][:len(cal['rows']) - added], cal['rows'][len(cal['rows']) - added:])
    with open(CALIBRATION, 'w') as fh:
        json.dump(cal, fh, indent=1)
        fh.write('\n')
    print(f'{added} rows added to {os.path.relpath(CALIBRATION, ROOT)}; measured without counters '
          f'(no kernel of ember\'s, or another API): {", ".join(missing) or "none"}')


def report(cal_rows):
    f = features(cal_rows)
    measured = np.array([r['measured_us'] for r in cal_rows])
    theta = fit(f, measured)
    fitted = predict(theta, f)
    loo = np.empty(len(cal_rows))
    for i in range(len(cal_rows)):
        keep = np.arange(len(cal_rows)) != i
        t = fit({k: v[keep] for k, v in f.items()}, measured[keep])
        loo[i] = predict(t, {k: v[i:i + 1] for k, v in f.items()})[0]
    ape = np.abs(loo - measured) / measured
    # A row whose kind (the bf16 mma.sync GEMM) no other row shares cannot be predicted
    # leave-one-out: its rate is then the starting guess. Reported apart.
    kinds = [r['counters']['flop_kind'] if r['counters']['flops'] > 0 else -1 for r in cal_rows]
    alone = np.array([kinds.count(k) == 1 for k in kinds])
    pairs = right = share_right = 0
    share_m = np.array([r['bytes'] for r in cal_rows]) / measured
    share_p = np.array([r['bytes'] for r in cal_rows]) / loo
    memory = np.array([r['bytes'] > 0 for r in cal_rows])
    share_pairs = 0
    for i in range(len(cal_rows)):
        for j in range(i + 1, len(cal_rows)):
            pairs += 1
            right += (loo[i] - loo[j]) * (measured[i] - measured[j]) > 0
            if memory[i] and memory[j]:
                share_pairs += 1
                share_right += (share_p[i] - share_p[j]) * (share_m[i] - share_m[j]) > 0
    return theta, fitted, loo, ape, alone, right / pairs, share_right / max(share_pairs, 1)


def cmd_fit(a):
    cal = load_calibration()
    rows = cal['rows']
    if len(rows) < 3:
        sys.exit('fewer than 3 calibration rows')
    theta, fitted, loo, ape, alone, rank, share_rank = report(rows)
    f = features(rows)
    _, t = terms(theta, f)
    print('| kernel | measured | fitted | leave-one-out | error | bound |')
    print('|---|---|---|---|---|---|')
    for r, fi, lo, e, b in zip(rows, fitted, loo, ape, t.argmax(axis=0)):
        print(f"| {r['kernel']} | {r['measured_us']:.1f} us | {fi:.1f} us | {lo:.1f} us | {100 * e:.0f}% | {BOUNDS[b]} |")
    runs = sorted({(r['gpu'], r['date'], r['commit']) for r in rows})
    source = '; '.join(f'{g} {d} at {c}' for g, d, c in runs)
    seen = ape[~alone]
    print(f'\n{len(rows)} kernels ({source}). Leave-one-out over the {len(seen)} whose kind another row shares: '
          f'mean absolute percentage error {100 * seen.mean():.1f}% (median {100 * np.median(seen):.1f}%, '
          f'worst {100 * seen.max():.0f}%); over all {len(rows)}: {100 * ape.mean():.1f}%; '
          f'pairwise ranking of times right {100 * rank:.1f}%, of shares of the ceiling (memory-bound rows) '
          f'{100 * share_rank:.1f}%. Fitted on all:')
    for (name, _, _, unit), v in zip(PARAMS, values(theta)):
        print(f'  {name} = {v:.4g} ({unit})')
    if a.write:
        copy = cal.get('copy_gbs', 4077)
        cublas = cal.get('cublas_sgemm_4096_us', 2727.5)
        with open(MODEL, 'w') as fh:
            fh.write('# bench/kernel_model.h\'s parameters, fitted by scripts/kernel-model.py fit on '
                     'bench/calibration/h200.json\n')
            fh.write(f'# source: {source}\n')
            fh.write(f'# leave-one-out over {len(seen)} kernels: MAPE {100 * seen.mean():.1f}%, '
                     f'pairwise ranking {100 * rank:.1f}%\n')
            for (name, _, _, unit), v in zip(PARAMS, values(theta)):
                fh.write(f'{name} {v:.6g}\n')
            fh.write(f'copy_gbs {copy}\ncublas_sgemm_4096_us {cublas}\n')
        print(f'wrote {os.path.relpath(MODEL, ROOT)}')


def cmd_predict(a):
    cal = load_calibration()
    theta = fit(features(cal['rows']), np.array([r['measured_us'] for r in cal['rows']]))
    counters = read_counters(a.counters)
    names = list(counters)
    f = {k: np.array([counter(counters[n], k) for n in names]) for k in FEATURES}
    pred = predict(theta, f)
    copy = cal.get('copy_gbs', 4077)
    measured = {r['kernel']: r['measured_us'] for r in cal['rows']}
    print('| kernel | predicted | of copy (predicted) | measured (calibration) |')
    print('|---|---|---|---|')
    for n, p in zip(names, pred):
        b = float(counters[n]['bytes'])
        share = f'{100 * b / p / 1e3 / copy:.0f}%' if b > 0 else '-'
        m = f'{measured[n]:.1f} us' if n in measured else '-'
        print(f'| {n} | {p:.1f} us | {share} | {m} |')


def cmd_check(a):
    """The bench's predicted times against this script's formula at the written parameters:
    the two implementations (bench/kernel_model.h and terms() here) must agree."""
    written = {}
    with open(a.model) as fh:
        for line in fh:
            parts = line.split()
            if len(parts) == 2 and not line.startswith('#'):
                written[parts[0]] = float(parts[1])
    missing = [p[0] for p in PARAMS if p[0] not in written]
    if missing:
        sys.exit(f'{a.model} lacks {", ".join(missing)}')
    theta = np.log([written[p[0]] for p in PARAMS])
    counters = read_counters(a.counters)
    table = read_measured(a.table)  # the emulated bench prints its predictions where a GPU's measurements go
    names = [n for n in counters if n in table]
    if not names:
        sys.exit('no row both in the counters and with a predicted time in the table')
    f = {k: np.array([counter(counters[n], k) for n in names]) for k in FEATURES}
    pred = predict(theta, f)
    # The table prints 0.1 us: half of that, and a relative 1e-4 for the parameters' 6 digits.
    wrong = [(n, t, p) for n, p in zip(names, pred) for t in [table[n]] if abs(t - p) > 0.05 + 1e-4 * p]
    for n, t, p in wrong:
        print(f'{n}: the bench predicts {t:.1f} us, this script {p:.2f} us')
    print(f'{len(names) - len(wrong)} of {len(names)} rows agree')
    sys.exit(1 if wrong else 0)


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    sub = p.add_subparsers(dest='cmd', required=True)
    add = sub.add_parser('add', help='a GPU run joins the calibration')
    add.add_argument('--table', required=True)
    add.add_argument('--counters', required=True)
    add.add_argument('--commit', required=True)
    add.add_argument('--date', required=True)
    add.add_argument('--gpu', required=True)
    fi = sub.add_parser('fit', help='fit, report leave-one-out error')
    fi.add_argument('--write', action='store_true', help=f'write {os.path.relpath(MODEL, ROOT)}')
    pr = sub.add_parser('predict', help='predict a counters table')
    pr.add_argument('--counters', required=True)
    ch = sub.add_parser('check', help='the bench\'s predictions agree with this formula')
    ch.add_argument('--counters', required=True, help='the bench\'s --counters file')
    ch.add_argument('--table', required=True, help='the table the same run printed')
    ch.add_argument('--model', default=MODEL, help='the parameters the bench read')
    a = p.parse_args()
    {'add': cmd_add, 'fit': cmd_fit, 'predict': cmd_predict, 'check': cmd_check}[a.cmd](a)


if __name__ == '__main__':
    main()
