#!/usr/bin/env python3
"""Summaries for scripts/gpu-decode-profile.sh (python3, standard library only).

  gpu-profile-summary.py ncu FILE.csv    Nsight Compute's CSV (the details page, one row per kernel
                                         and metric, or the raw page, one row per kernel) of
                                         gpu__time_duration.sum: GPU time by kernel over the whole
                                         decode steps inside the profiled window, per step.
  gpu-profile-summary.py nsys FILE.sqlite Nsight Systems' SQLite export of a graphs-on decode
                                         (--cuda-graph-trace=node): per decode step, the wall time
                                         between steps against the kernels' time and the GPU's busy
                                         time, the host API calls and copies, and GPU time by kernel.

A decode step is counted from one launch of the step kernel (--step-kernel, default the embedding
kernels: one per step, the step's first launch) to the next.
"""
import argparse
import collections
import csv
import re
import sqlite3
import statistics
import sys

STEP_KERNEL = r'^q?embed_kernel$'
TIME_SCALE_US = {'nsecond': 1e-3, 'ns': 1e-3, 'usecond': 1.0, 'us': 1.0, 'msecond': 1e3, 'ms': 1e3, 'second': 1e6, 's': 1e6}


def _cut_params(name):
    """Drops a trailing parameter list '(...)' (the last top-level parentheses) from a demangled name."""
    name = name.strip()
    if not name.endswith(')'):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        ch = name[i]
        if ch == ')':
            depth += 1
        elif ch == '(':
            depth -= 1
            if depth == 0:
                head = name[:i].rstrip()
                # '(anonymous namespace)' or a cast inside template arguments is not a parameter list.
                return head if head and not head.endswith('::') else name
    return name


def clean_name(name):
    """'void lumen::cuda::(anonymous namespace)::gemv_kernel<1, (lumen::cuda::W)0>(lumen::cuda::GemvArgs)'
    -> 'gemv_kernel<1, (W)0>'. Also takes names printed with --print-kernel-base function (unchanged)."""
    s = _cut_params(name)
    s = s.replace('(anonymous namespace)::', '')
    s = re.sub(r'^(void|auto)\s+', '', s)
    s = re.sub(r'\b[A-Za-z_]\w*::', '', s)  # namespace and class qualifiers, also inside template arguments
    return s.strip()


def base_name(name):
    """The function's name without template arguments: 'gemv_kernel<1, (W)0>' -> 'gemv_kernel'."""
    s = clean_name(name)
    i = s.find('<')
    return s[:i] if i > 0 else s


def _step_windows(names, step_re):
    """Indices of the step kernel's launches in a launch-ordered list of names."""
    return [i for i, n in enumerate(names) if step_re.search(base_name(n))]


def _table(rows, steps, title):
    """rows: name -> (total us, launches). Prints per-step figures."""
    total = sum(t for t, _ in rows.values())
    print(title)
    print(f'{"us/step":>10} {"%":>6} {"launches/step":>14} {"us/launch":>10}  kernel')
    for k, (t, n) in sorted(rows.items(), key=lambda kv: -kv[1][0]):
        print(f'{t / steps:10.2f} {100 * t / total if total else 0:6.1f} {n / steps:14.2f} {t / n:10.2f}  {k[:110]}')


def ncu_rows(path):
    """(id, kernel name, us) per profiled kernel, in launch order, from ncu's CSV output."""
    lines = [l for l in open(path, encoding='utf-8', errors='replace') if l.startswith('"')]
    rows = list(csv.reader(lines))
    if not rows:
        raise SystemExit(f'{path}: no CSV rows (did ncu profile anything? see ncu.txt)')
    head, body = rows[0], rows[1:]
    ik, iid = head.index('Kernel Name'), head.index('ID')
    out = []
    if 'Metric Name' in head:  # details page: one row per (kernel, metric)
        im, iv, iu = head.index('Metric Name'), head.index('Metric Value'), head.index('Metric Unit')
        for r in body:
            if len(r) < len(head) or r[im] != 'gpu__time_duration.sum':
                continue
            out.append((int(r[iid]), r[ik], float(r[iv].replace(',', '')) * TIME_SCALE_US.get(r[iu], 1.0)))
    elif 'gpu__time_duration.sum' in head:  # raw page: one row per kernel, a units row first
        it = head.index('gpu__time_duration.sum')
        unit = 'nsecond'
        for r in body:
            if len(r) < len(head):
                continue
            if not r[iid].strip().isdigit():
                unit = r[it] or unit
                continue
            out.append((int(r[iid]), r[ik], float(r[it].replace(',', '')) * TIME_SCALE_US.get(unit, 1.0)))
    else:
        raise SystemExit(f'{path}: neither a details nor a raw page with gpu__time_duration.sum: {head}')
    out.sort()
    return out


def ncu_summary(path, step_kernel):
    rows = ncu_rows(path)
    all_us = sum(t for _, _, t in rows)
    print(f'ncu: {len(rows)} kernels profiled, {all_us:.1f} us of GPU time in all (each kernel run alone, caches not '
          'flushed, clocks as the driver sets them)')
    names = [n for _, n, _ in rows]
    marks = _step_windows(names, re.compile(step_kernel))
    if len(marks) < 2:
        print(f'fewer than two launches of the step kernel ({step_kernel}): no whole step in the window; totals only')
        a, b, steps = 0, len(rows), 1
    else:
        a, b, steps = marks[0], marks[-1], len(marks) - 1
        print(f'whole decode steps in the window: {steps} (launch IDs {rows[a][0]}..{rows[b][0] - 1}), '
              f'{(b - a) / steps:.1f} kernels a step')
    win = rows[a:b]
    tot = collections.defaultdict(lambda: [0.0, 0])
    fn = collections.defaultdict(lambda: [0.0, 0])
    for _, n, t in win:
        for d, k in ((tot, clean_name(n)), (fn, base_name(n))):
            d[k][0] += t
            d[k][1] += 1
    step_us = sum(t for _, _, t in win) / steps
    print(f'KERNEL TIME PER STEP: {step_us:.1f} us (sum of the kernels\' GPU time; set it against the measured step time: '
          'the rest is launch gaps, host work and synchronisation)')
    print()
    _table({k: tuple(v) for k, v in tot.items()}, steps, 'by kernel (template arguments kept)')
    if len(fn) != len(tot):
        print()
        _table({k: tuple(v) for k, v in fn.items()}, steps, 'by function')


def _strings(db):
    try:
        return dict(db.execute('SELECT id, value FROM StringIds'))
    except sqlite3.Error:
        return {}


def _columns(db, table):
    return [r[1] for r in db.execute(f'PRAGMA table_info({table})')]


def _union(intervals):
    busy, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            busy += e - s
            end = e
        elif e > end:
            busy += e - end
            end = e
    return busy


def _q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * (len(xs) - 1) + 0.5))]


def _api_and_copies(db, name, in_steps, n):
    us = lambda ns: ns / 1e3
    if _columns(db, 'CUPTI_ACTIVITY_KIND_RUNTIME'):
        api = collections.defaultdict(lambda: [0, 0])
        for s, e, nid in db.execute('SELECT start, end, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME'):
            if in_steps(s):
                k = re.sub(r'_v\d+$', '', name(nid))
                api[k][0] += e - s
                api[k][1] += 1
        print('host CUDA API calls that start inside the decode steps, per step')
        print(f'{"us/step":>10} {"calls/step":>11}  call')
        for k, (t, c) in sorted(api.items(), key=lambda kv: -kv[1][0]):
            print(f'{us(t) / n:10.1f} {c / n:11.2f}  {k}')
        print()
    if _columns(db, 'CUPTI_ACTIVITY_KIND_MEMCPY'):
        mc = collections.defaultdict(lambda: [0, 0, 0])
        kinds = {1: 'H2D', 2: 'D2H', 8: 'D2D'}
        for s, e, kind, nbytes in db.execute('SELECT start, end, copyKind, bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY'):
            if in_steps(s):
                k = kinds.get(kind, f'kind {kind}')
                mc[k][0] += e - s
                mc[k][1] += 1
                mc[k][2] += nbytes
        print('copies inside the decode steps, per step')
        for k, (t, c, b) in sorted(mc.items()):
            print(f'  {k}: {c / n:.2f} copies, {b / n / 1024:.1f} KiB, {us(t) / n:.1f} us of copy time')
        print()


def nsys_summary(path, step_kernel):
    db = sqlite3.connect(path)
    strs = _strings(db)
    name = lambda v: strs.get(v, str(v)) if isinstance(v, int) else str(v)
    kcols = _columns(db, 'CUPTI_ACTIVITY_KIND_KERNEL')
    if not kcols:
        raise SystemExit(f'{path}: no CUPTI_ACTIVITY_KIND_KERNEL table (no kernels traced?)')
    short = 'shortName' if 'shortName' in kcols else 'demangledName'
    full = 'demangledName' if 'demangledName' in kcols else short
    graph = ', graphNodeId' if 'graphNodeId' in kcols else ', 0'
    ks = [(s, e, name(sn), name(dn), g or 0) for s, e, sn, dn, g in
          db.execute(f'SELECT start, end, {short}, {full}{graph} FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start')]
    step_re = re.compile(step_kernel)
    marks = [i for i, k in enumerate(ks) if step_re.search(base_name(k[2]))]
    print(f'nsys: {len(ks)} kernels traced, {sum(1 for k in ks if k[4])} of them graph nodes; '
          f'{len(marks)} launches of the step kernel ({step_kernel})')
    if len(marks) < 3:
        raise SystemExit('too few steps to summarise')
    steps = []
    for a, b in zip(marks, marks[1:]):
        kk = ks[a:b]
        wall = ks[b][0] - ks[a][0]
        steps.append({'a': a, 'b': b, 'n': len(kk), 'wall': wall, 'kern': sum(e - s for s, e, *_ in kk),
                      'busy': _union([(s, e) for s, e, *_ in kk]), 't0': ks[a][0], 't1': ks[b][0],
                      'last_end': max(e for _, e, *_ in kk)})
    # Decode steps of one batch size have one kernel count; a prefill step has another.
    mode = collections.Counter(s['n'] for s in steps).most_common(1)[0][0]
    dec = [s for s in steps if s['n'] == mode]
    us = lambda ns: ns / 1e3
    print(f'decode steps: {len(dec)} of {len(steps)} step intervals have {mode} kernels (the most common count); '
          'figures are medians over them [p10, p90]; tracing graph nodes one by one adds some cost to each, so the '
          'untraced step time (batch-bench) is the reference')
    for key, label in (('wall', 'wall time a step (step kernel to step kernel)'),
                       ('kern', 'kernel time a step (sum of kernel durations)'),
                       ('busy', 'GPU busy a step (union of kernel intervals)')):
        xs = [us(s[key]) for s in dec]
        print(f'  {label:48s} {statistics.median(xs):9.1f} us  [{_q(xs, 0.1):.1f}, {_q(xs, 0.9):.1f}]')
    for label, xs in (('GPU idle a step (wall - busy)', [us(s['wall'] - s['busy']) for s in dec]),
                      ('  of it between the step\'s kernels', [us(s['last_end'] - s['t0'] - s['busy']) for s in dec]),
                      ('  of it after the last kernel (to the next step)', [us(s['t1'] - s['last_end']) for s in dec])):
        print(f'  {label:48s} {statistics.median(xs):9.1f} us  [{_q(xs, 0.1):.1f}, {_q(xs, 0.9):.1f}]')
    # Gaps: the longest idle stretch inside each step, and where it falls.
    gaps = []
    for s in dec:
        kk = ks[s['a']:s['b'] + 1]
        g = max(((kk[i + 1][0] - kk[i][1], kk[i][2], kk[i + 1][2]) for i in range(len(kk) - 1)), default=(0, '', ''))
        gaps.append(g)
    gm = statistics.median(g[0] for g in gaps)
    common = collections.Counter((g[1], g[2]) for g in gaps).most_common(1)[0][0]
    print(f'  longest gap inside a step: median {us(gm):.1f} us, most often between {common[0]} and {common[1]}')
    windows = [(s['t0'], s['t1']) for s in dec]

    def in_steps(t):
        # windows are ordered and disjoint
        lo, hi = 0, len(windows)
        while lo < hi:
            mid = (lo + hi) // 2
            if windows[mid][1] <= t:
                lo = mid + 1
            else:
                hi = mid
        return lo < len(windows) and windows[lo][0] <= t < windows[lo][1]

    n = len(dec)
    print()
    try:
        _api_and_copies(db, name, in_steps, n)
    except sqlite3.Error as e:
        print(f'(host API calls and copies not summarised: {e})\n')
    tot = collections.defaultdict(lambda: [0.0, 0])
    for s in dec:
        for st, en, _, dn, _ in ks[s['a']:s['b']]:
            k = clean_name(dn)
            tot[k][0] += us(en - st)
            tot[k][1] += 1
    _table({k: tuple(v) for k, v in tot.items()}, n, 'GPU time by kernel inside the decode steps (graph replay)')


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('kind', choices=['ncu', 'nsys'])
    p.add_argument('file')
    p.add_argument('--step-kernel', default=STEP_KERNEL, help='regex on the kernel function name that starts a step')
    a = p.parse_args()
    (ncu_summary if a.kind == 'ncu' else nsys_summary)(a.file, a.step_kernel)


if __name__ == '__main__':
    main()
