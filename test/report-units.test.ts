// The noise floor (src/report/noise.ts) and the comparison rule (src/report/compare.ts) on made-up
// samples, where the answer is known: no sweep, no browser.
import { linkSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Command } from 'commander';
import { afterAll, describe, expect, it } from 'vitest';
import { registerCompare } from '../src/cli/cmd-compare.js';
import { registerReport } from '../src/cli/cmd-report.js';
import { compareReports } from '../src/report/compare.js';
import { CONTENTION_SHARE } from '../src/util/machine.js';
import { parse } from 'csv-parse/sync';
import { bandText, formatCsv, formatMarkdown, ratioText, verdictLine } from '../src/report/compare-format.js';
import type { FigureChange } from '../src/report/compare.js';
import { renderHtml, shownFigure } from '../src/report/html.js';
import { checkReport } from '../src/report/report-file.js';
import { chartPoints, chartSpec, CHARTS, renderChart } from '../src/report/charts.js';
import { gateFloor, minTailSamples, RANK_REACH, rowSpreads, studentTQuantile, type FloorRule, type FloorUnknown, type Spread } from '../src/report/noise.js';
import { gapHistogram, ITL_BINS_PER_OCTAVE } from '../src/bench/row-samples.js';
import { UsageError } from '../src/util/usage-error.js';

const known = (sp: Spread | FloorUnknown | undefined): Spread => {
  if (!sp || 'unknown' in sp) throw new Error(`floor unknown: ${sp ? sp.unknown : 'missing'}`);
  return sp;
};

/** One rule's spread over a row's samples. */
const spread = (rule: FloorRule, values: Array<number | null>, pass: number[], extra: Record<string, Array<number | null>> = {}, osl = 8) =>
  rowSpreads({ osl, samples: { pass, ttft_ms: values, decode_tok_s: values, itl_p50_ms: values, itl_p99_ms: values, ...extra } }, [['x', rule]]).get('x');

describe('the noise floor (noise.ts)', () => {
  it('Student t quantiles: the textbook values', () => {
    expect(studentTQuantile(0.975, 4)).toBeCloseTo(2.776, 3);
    expect(studentTQuantile(0.995, 10)).toBeCloseTo(3.169, 3);
    expect(studentTQuantile(0.975, 1)).toBeCloseTo(12.706, 3);
    expect(studentTQuantile(0.975, 1e6)).toBeCloseTo(1.96, 3);
    expect(studentTQuantile(0.5, 3)).toBeCloseTo(0, 6);
  });

  it('a tail percentile is judged from 5 samples above it: 500 for a p99, 100 for a p95', () => {
    expect(minTailSamples(99)).toBe(500);
    expect(minTailSamples(95)).toBe(100);
  });

  it('one pass: unknown, with the reason; no samples: unknown', () => {
    for (const rule of [{ stat: 'mean', sample: 'ttft_ms' }, { stat: 'percentile', sample: 'ttft_ms', p: 50 }, { stat: 'request-spread', sample: 'itl_p99_ms' }, { stat: 'aggregate-rate' }] as FloorRule[]) {
      expect(spread(rule, [1, 2, 3, 4], [0, 0, 0, 0])).toEqual({ unknown: 'one timed pass (4 requests)' });
      expect(spread(rule, [null, null], [0, 1])).toEqual({ unknown: 'no samples' });
    }
    expect(rowSpreads({ osl: 8, samples: null }, [['x', { stat: 'mean', sample: 'ttft_ms' }]]).get('x')).toEqual({ unknown: 'no per-request samples in the report' });
  });

  it('passes of different sizes (open loop: 8, 8, 4 requests): a draw holding the largest pass more than once is read whole', () => {
    // Pass 1 holds one request 20x slower: a p90 over draws that repeat pass 1 moves far; read in a
    // buffer of one run's size, such draws were cut short and the floor came out ~100x too narrow.
    const pass = Array.from({ length: 20 }, (_, i) => Math.floor(i / 8));
    const ttft = pass.map((_, i) => (i === 15 ? 2000 : 100 + (i % 8)));
    expect(known(spread({ stat: 'percentile', sample: 'ttft_ms', p: 90 }, ttft, pass)).se).toBeGreaterThan(0.3);
  });

  it('identical passes give a zero floor; passes that disagree a wider one; the same samples the same floor', () => {
    const pass = [0, 0, 1, 1, 2, 2];
    for (const rule of [{ stat: 'mean', sample: 'ttft_ms' }, { stat: 'percentile', sample: 'ttft_ms', p: 50 }, { stat: 'aggregate-rate' }] as FloorRule[]) {
      expect(known(spread(rule, [5, 5, 5, 5, 5, 5], pass)).se).toBeLessThan(1e-12);
      const tight = known(spread(rule, [100, 101, 99, 100, 102, 98], pass));
      const wide = known(spread(rule, [100, 101, 50, 51, 200, 201], pass));
      expect(wide.se).toBeGreaterThan(5 * tight.se);
      expect(tight).toMatchObject({ df: 2, passes: 3, n: 6 });
      expect(spread(rule, [100, 101, 50, 51, 200, 201], pass)).toEqual(wide);
    }
  });

  it('the mean\'s floor is the standard error of the mean of the passes (the bootstrap\'s (k-1)/k corrected)', () => {
    // Passes with means 1, e and e^2 on a log scale: ln(mean) of a draw ~ the mean of the drawn logs.
    const v = [1, 1, 10, 10, 100, 100];
    const se = known(spread({ stat: 'mean', sample: 'ttft_ms' }, v, [0, 0, 1, 1, 2, 2])).se;
    // The standard error of ln(mean) by the delta method: sd of the pass means / mean / sqrt(3).
    const means = [1, 10, 100];
    const m = 37;
    const sd = Math.sqrt(means.reduce((a, x) => a + (x - m) ** 2, 0) / 2);
    expect(se).toBeGreaterThan(0.5 * (sd / m / Math.sqrt(3)));
    expect(se).toBeLessThan(2 * (sd / m / Math.sqrt(3)));
  });

  it('drops null samples and is scale-free on the log scale', () => {
    const a = known(spread({ stat: 'percentile', sample: 'ttft_ms', p: 50 }, [1, 2, null, 3, 4, 5], [0, 0, 0, 1, 1, 1]));
    const b = known(spread({ stat: 'percentile', sample: 'ttft_ms', p: 50 }, [10, 20, null, 30, 40, 50], [0, 0, 0, 1, 1, 1]));
    expect(a.n).toBe(5);
    expect(b.se).toBeCloseTo(a.se, 9);
  });

  it('the ITL p99\'s floor is the spread of the requests\' own p99s, not divided by their number', () => {
    const v = [10, 12, 10, 40, 11, 10];
    const sp = known(spread({ stat: 'request-spread', sample: 'itl_p99_ms' }, v, [0, 0, 1, 1, 2, 2]));
    const logs = v.map(Math.log);
    const m = logs.reduce((a, x) => a + x, 0) / 6;
    expect(sp.se).toBeCloseTo(Math.sqrt(logs.reduce((a, x) => a + (x - m) ** 2, 0) / 5), 12);
    expect(sp.df).toBe(2);
  });

  it('the pooled ITL percentiles are drawn from the passes\' gap histograms; a report without them keeps the requests\' own', () => {
    const p50: FloorRule = { stat: 'pooled-gaps', p: 50, fallback: { stat: 'mean', sample: 'itl_p50_ms' } };
    const pass = [0, 0, 1, 1, 2, 2];
    const perRequest = [10, 10, 10, 10, 10, 10];
    const withGaps = (byPass: number[][]) => rowSpreads({ osl: 8, samples: {
      pass, ttft_ms: perRequest, decode_tok_s: perRequest, itl_p50_ms: perRequest, itl_p99_ms: perRequest,
      itl_bins_per_octave: ITL_BINS_PER_OCTAVE, itl_gap_bins: byPass.map(gapHistogram),
    } }, [['x', p50]]).get('x');
    // Every pass the same gaps, all equal: no spread between passes, none around the rank.
    expect(known(withGaps([[10, 10, 10], [10, 10, 10], [10, 10, 10]])).se).toBeLessThan(1e-12);
    // Passes whose gaps sit at 10, 20 and 40 ms: the pooled median moves with the draw, though every
    // request's own p50 is 10 (the stand-in sees nothing).
    const moving = known(withGaps([[10, 10, 10], [20, 20, 20], [40, 40, 40]]));
    expect(moving).toMatchObject({ df: 2, passes: 3, n: 9 });
    expect(moving.se).toBeGreaterThan(0.3);
    expect(known(spread(p50, perRequest, pass)).se).toBeLessThan(1e-12);
    // A pass without decode gaps (every gap overlapped a prefill): draws of it alone are left out.
    expect(known(withGaps([[10, 10, 10], [], [20, 20, 20]])).se).toBeGreaterThan(0.1);
    // One pass: unknown, counted in gaps.
    expect(rowSpreads({ osl: 8, samples: { pass: [0, 0], itl_p50_ms: [1, 1], itl_bins_per_octave: ITL_BINS_PER_OCTAVE, itl_gap_bins: [gapHistogram([1, 2, 3])] } }, [['x', p50]]).get('x'))
      .toEqual({ unknown: 'one timed pass (3 decode gaps)' });
  });

  it('a pooled p99 a few ranks below a cluster of stalls: its floor reaches the stalls', () => {
    // 600 gaps over 5 passes, the 4 largest stalls of 200 ms in different passes, the rest 19-21 ms: the
    // p99 (rank 594) is ordinary, and no draw of these passes holds the 7 stalls that would make it a
    // stall; a second run with a few more stalls would. The values RANK_REACH binomial standard
    // deviations of rank (2.44) either side reach them.
    const byPass = Array.from({ length: 5 }, (_, p) => Array.from({ length: 120 }, (_, i) => (p < 4 && i === 0 ? 200 : 19 + (2 * ((i * 7 + p) % 120)) / 119)));
    const pass = [0, 1, 2, 3, 4];
    const one = [20, 20, 20, 20, 20];
    const sp = known(rowSpreads({ osl: 121, samples: {
      pass, ttft_ms: one, decode_tok_s: one, itl_p50_ms: one, itl_p99_ms: one,
      itl_bins_per_octave: ITL_BINS_PER_OCTAVE, itl_gap_bins: byPass.map(gapHistogram),
    } }, [['x', { stat: 'pooled-gaps', p: 99, fallback: { stat: 'request-spread', sample: 'itl_p99_ms' } }]]).get('x'));
    expect(sp.se).toBeCloseTo(Math.log(200 / 21) / (2 * RANK_REACH), 2);
  });

  it('the aggregate rate\'s floor follows the passes\' decode windows', () => {
    // c=2: each pass's window runs from its first first token to its last last token; a slow pass widens it.
    const pass = [0, 0, 1, 1, 2, 2];
    const ttft = [10, 12, 10, 12, 10, 12];
    const even = known(spread({ stat: 'aggregate-rate' }, [100, 100, 100, 100, 100, 100], pass, { ttft_ms: ttft }, 101));
    const slowPass = known(spread({ stat: 'aggregate-rate' }, [100, 100, 50, 100, 100, 100], pass, { ttft_ms: ttft }, 101));
    expect(even.se).toBeLessThan(1e-12);
    expect(slowPass.se).toBeGreaterThan(0.05);
  });

  it('the gate\'s floor grows with the number of figures tested (alpha / m) and with fewer passes', () => {
    const s5: Spread = { se: 0.02, df: 4, passes: 5, n: 5 };
    const s3: Spread = { se: 0.02, df: 2, passes: 3, n: 3 };
    expect(gateFloor(s5, s5, 1)).toBeCloseTo(studentTQuantile(0.95, 8) * Math.hypot(0.02, 0.02), 6);
    expect(gateFloor(s5, s5, 24)).toBeGreaterThan(gateFloor(s5, s5, 6));
    expect(gateFloor(s3, s3, 24)).toBeGreaterThan(gateFloor(s5, s5, 24));
    expect(gateFloor({ ...s5, se: 0 }, { ...s5, se: 0 }, 24)).toBe(0);
  });
});

/** A minimal report row: the compared figures and their samples. */
function row(isl: number, c: number, decode: number, itl: number, ttft: number, spread: number, passes: number) {
  const n = passes * c;
  const around = (v: number) => Array.from({ length: n }, (_, i) => v * (1 + spread * (((i % 3) - 1))));
  return {
    isl, osl: 8, concurrency: c, status: 'ok', reason: '',
    decode_tok_s: decode * c, ttft_ms: ttft, itl_p50_ms: itl, itl_p99_ms: itl * 2, batching_efficiency: 1,
    distributions: { request_decode_tok_s: { mean: decode }, ttft_ms: { n, p50: ttft, p99: ttft }, itl_ms: { n: n * 7 } },
    samples: {
      pass: Array.from({ length: n }, (_, i) => Math.floor(i / c)),
      ttft_ms: around(ttft), decode_tok_s: around(decode), itl_p50_ms: around(itl), itl_p99_ms: around(itl * 2),
    },
  };
}

function report(rows: unknown[], extra: Record<string, unknown> = {}) {
  return checkReport({ schema_version: 1, status: 'complete', machine: { cpu_model: 'x' }, engine: { isa: 'avx2', threads: 2 }, tool: { git_commit: 'a' }, rows, ...extra }, 'r.json');
}

describe('compareReports', () => {
  it('flags a change only beyond both the floor and the threshold, in the worse direction', () => {
    const base = report([row(16, 1, 100, 10, 5, 0.02, 3)]);
    // decode 20% slower (beyond a ~2% floor and 5%), ITL 3% slower (below the threshold), TTFT 20% faster.
    const next = report([row(16, 1, 80, 10.3, 4, 0.02, 3)]);
    const c = compareReports(base, next, 5);
    const v = Object.fromEntries(c.rows[0]!.figures.map((f) => [f.figure, f.verdict]));
    // The p99s of 3 requests (21 gaps) are their largest values: not judged.
    expect(v).toEqual({ decode_tok_s: 'regression', per_user_tok_s: 'regression', ttft_mean_ms: 'improvement', ttft_p50_ms: 'improvement', ttft_p99_ms: 'not judged', itl_p50_ms: 'below threshold', itl_p99_ms: 'not judged' });
    expect(c.rows[0]!.figures.find((f) => f.figure === 'ttft_p99_ms')!.not_judged).toBe('BASE: 3 requests; a p99 is judged from 500');
    expect(c.tests).toBe(5);
    expect(c.exit_code).toBe(5);
    expect(c.regressions).toBe(2);
    // A noisy pair of runs: the same 20% is within the floor.
    const noisy = compareReports(report([row(16, 1, 100, 10, 5, 0.3, 3)]), report([row(16, 1, 80, 10, 5, 0.3, 3)]), 5);
    expect(noisy.rows[0]!.figures.find((f) => f.figure === 'decode_tok_s')!.verdict).toBe('within noise');
    expect(noisy.exit_code).toBe(0);
    // A higher threshold hides it too.
    expect(compareReports(base, next, 25).exit_code).toBe(0);
  });

  it('judges a p99 only from 500 samples: TTFT p99 counts requests, ITL p99 counts gaps', () => {
    const big = (ttft: number) => row(16, 100, 100, 10, ttft, 0.02, 5); // 500 requests, 3500 gaps
    const c = compareReports(report([big(5)]), report([big(10)]), 5);
    const f = Object.fromEntries(c.rows[0]!.figures.map((x) => [x.figure, x]));
    expect(f.ttft_p99_ms!.verdict).toBe('regression');
    expect(f.ttft_p99_ms!.not_judged).toBeNull();
    expect(f.itl_p99_ms!.verdict).toBe('below threshold');
    const thin = compareReports(report([row(16, 4, 100, 10, 5, 0.02, 5)]), report([row(16, 4, 100, 10, 10, 0.02, 5)]), 5);
    const g = Object.fromEntries(thin.rows[0]!.figures.map((x) => [x.figure, x]));
    expect(g.ttft_p99_ms!.verdict).toBe('not judged');
    expect(g.ttft_p99_ms!.not_judged).toBe('BASE: 20 requests; a p99 is judged from 500');
    expect(g.itl_p99_ms!.not_judged).toBe('BASE: 140 gaps; a p99 is judged from 500');
    expect(thin.not_judged).toEqual({ figures: 2, reason: 'BASE: 20 requests; a p99 is judged from 500' });
    expect(formatMarkdown(thin)).toContain('2.00× not judged (20 requests)');
    // Not judged is not a regression, whatever the ratio.
    expect(thin.exit_code).toBe(5); // the TTFT mean and p50 doubled
    expect(thin.regressions).toBe(2);
  });

  it('the TTFT mean gets the mean\'s floor: one slow request moves it, and its floor, more than the median\'s', () => {
    const pass = [0, 0, 0, 1, 1, 1, 2, 2, 2];
    const ttft = [10, 10.2, 9.9, 10.1, 80, 10, 9.8, 10, 10.3];
    const sp = rowSpreads({ osl: 8, samples: { pass, ttft_ms: ttft } }, [['mean', { stat: 'mean', sample: 'ttft_ms' }], ['p50', { stat: 'percentile', sample: 'ttft_ms', p: 50 }]]);
    expect(known(sp.get('mean')).se).toBeGreaterThan(10 * known(sp.get('p50')).se);
  });

  it('the floor of each figure accounts for every figure tested: more rows, a wider floor', () => {
    const one = compareReports(report([row(16, 1, 100, 10, 5, 0.02, 3)]), report([row(16, 1, 100, 10, 5, 0.02, 3)]));
    const four = compareReports(report([1, 2, 4, 8].map((c) => row(16, c, 100, 10, 5, 0.02, 3))), report([1, 2, 4, 8].map((c) => row(16, c, 100, 10, 5, 0.02, 3))));
    expect(one.tests).toBe(5);
    expect(four.tests).toBe(20);
    expect(four.rows[0]!.figures[0]!.floor!).toBeGreaterThan(one.rows[0]!.figures[0]!.floor!);
  });

  it('rows measured under CPU contention (either report) are listed; a move beyond noise there is not a regression, and not a pass', () => {
    const quiet = (decode: number, c = 1) => ({ ...row(16, c, decode, 10, 5, 0.02, 3), cpu_other_share: 0.02 });
    const busy = (decode: number, share: number, c = 1) => ({ ...row(16, c, decode, 10, 5, 0.02, 3), cpu_other_share: share });
    // NEW ran beside another process and its decode is 20% slower: contention may explain it.
    const c = compareReports(report([quiet(100), quiet(100, 2)]), report([busy(80, 0.52), quiet(100, 2)]), 5);
    expect(c.rows.map((r) => [r.key, r.contended, r.cpu_other_share])).toEqual([
      ['16:8 c=1 engine', true, { base: 0.02, next: 0.52 }],
      ['16:8 c=2 engine', false, { base: 0.02, next: 0.02 }],
    ]);
    const v = Object.fromEntries(c.rows[0]!.figures.map((f) => [f.figure, f.verdict]));
    expect(v.decode_tok_s).toBe('regression under contention');
    expect(c.regressions).toBe(0);
    expect(c.contended_regressions).toBe(2);
    expect(c.contended_rows).toEqual(['16:8 c=1 engine (BASE 2%, NEW 52%)']);
    expect(c.not_a_pass).toEqual(["2 figures moved beyond noise in the worse direction in rows measured under CPU contention (16:8 c=1 engine: aggregate decode tok/s; 16:8 c=1 engine: per-user decode tok/s): other processes' load, not the change, may explain them; rerun both on a quiet machine"]);
    expect(c.exit_code).toBe(5);
    const md = formatMarkdown(c);
    expect(md).toContain('Measured under CPU contention (other processes used 10% or more');
    expect(md).toContain('16:8 c=1 engine (BASE 2%, NEW 52%)');
    expect(md).toContain('▼ worse, under contention**');
    expect(md).not.toContain('▼ regression');
    // Contention in BASE counts too; an unchanged contended row passes, listed.
    const same = compareReports(report([busy(100, 0.47)]), report([quiet(100)]), 5);
    expect(same.contended_rows).toEqual(['16:8 c=1 engine (BASE 47%, NEW 2%)']);
    expect(same.exit_code).toBe(0);
    // Under the share, or not recorded: an ordinary row.
    const calm = compareReports(report([busy(100, 0.09)]), report([{ ...busy(80, 0.09), cpu_other_share: null }]), 5);
    expect(calm.contended_rows).toEqual([]);
    expect(calm.regressions).toBe(2);
  });

  it('a figure measured in BASE and missing or invalid in NEW is lost: listed, and not a pass', () => {
    const ok = row(16, 1, 100, 10, 5, 0.02, 3);
    const c = compareReports(report([ok]), report([{ ...ok, itl_p50_ms: null, decode_tok_s: 0 }]));
    const v = Object.fromEntries(c.rows[0]!.figures.map((f) => [f.figure, f.verdict]));
    expect(v.itl_p50_ms).toBe('lost in NEW');
    expect(v.decode_tok_s).toBe('lost in NEW');
    expect(c.lost).toEqual(['16:8 c=1 engine: aggregate decode tok/s', '16:8 c=1 engine: ITL p50']);
    expect(c.regressions).toBe(0);
    expect(c.not_a_pass).toEqual(['2 figures measured in BASE are missing in NEW or not a measurement there (16:8 c=1 engine: aggregate decode tok/s; 16:8 c=1 engine: ITL p50): a lost figure cannot be judged']);
    expect(c.exit_code).toBe(5);
    const md = formatMarkdown(c);
    expect(md).toContain('**Not a pass**: 2 figures measured in BASE are missing in NEW or not a measurement there');
    expect(md).toContain('| 16:8 c=1 engine | **▼ lost in NEW** |');
    // The other way round (a figure NEW measures and BASE did not) is nothing to compare: a pass.
    const gained = compareReports(report([{ ...ok, itl_p50_ms: null }]), report([ok]));
    expect(gained.rows[0]!.figures.find((f) => f.figure === 'itl_p50_ms')!.verdict).toBe('not measured');
    expect(gained.exit_code).toBe(0);
  });

  it('matches rows by cell, concurrency and target; lists the rest', () => {
    const base = report([row(16, 1, 100, 10, 5, 0.02, 3), row(16, 2, 100, 10, 5, 0.02, 3)]);
    const next = report([row(16, 2, 100, 10, 5, 0.02, 3), row(32, 1, 100, 10, 5, 0.02, 3)]);
    const c = compareReports(base, next);
    expect(c.rows.map((r) => r.key)).toEqual(['16:8 c=2 engine']);
    expect(c.only_in_base).toEqual(['16:8 c=1 engine']);
    expect(c.only_in_next).toEqual(['32:8 c=1 engine']);
    const ep = report([row(16, 2, 100, 10, 5, 0.02, 3)], { endpoint: { url: 'http://h:1' } });
    const cross = compareReports(base, ep);
    expect(cross.rows).toEqual([]);
    expect(cross.provenance[0]).toEqual({ field: 'target', base: 'engine', next: 'endpoint' });
    // Nothing compared is not a pass.
    expect(cross.not_a_pass).toEqual(['no row of BASE is in NEW: nothing was compared']);
    expect(cross.exit_code).toBe(5);
    expect(verdictLine(cross)).toBe('**Not a pass**: no row of BASE is in NEW: nothing was compared (exit 5).');
    expect(c.not_a_pass).toEqual([]);
    expect(c.exit_code).toBe(0);
    // Rows in both that failed in both: nothing was compared either.
    const failed = { ...row(16, 1, 100, 10, 5, 0.02, 3), status: 'error', reason: 'x' };
    const both = compareReports(report([failed]), report([failed]));
    expect(both.rows.map((r) => r.row)).toEqual(['failed in both']);
    expect(both.not_a_pass).toEqual(['every row both runs share failed in both: nothing was compared']);
    expect(both.exit_code).toBe(5);
  });

  it('does not pair rows of a key a report holds twice: says so and fails the gate', () => {
    // `--cells 8:4,8:4` ran the cell twice; the last row was paired with the first (1.38x against itself).
    const twice = report([row(16, 1, 100, 10, 5, 0.02, 3), row(16, 1, 138, 10, 5, 0.02, 3), row(16, 2, 100, 10, 5, 0.02, 3)]);
    const c = compareReports(twice, twice);
    expect(c.rows.map((r) => r.key)).toEqual(['16:8 c=2 engine']);
    expect(c.rows[0]!.figures.every((f) => f.ratio === 1)).toBe(true);
    expect(c.duplicated).toEqual(['16:8 c=1 engine: 2 rows in BASE', '16:8 c=1 engine: 2 rows in NEW']);
    expect(c.only_in_base).toEqual([]);
    expect(c.only_in_next).toEqual([]);
    expect(c.not_a_pass).toHaveLength(1);
    expect(c.not_a_pass[0]).toMatch(/^a report holds more than one row for one cell and concurrency \(16:8 c=1 engine: 2 rows in BASE; .*those rows were not compared$/);
    expect(c.exit_code).toBe(5);
    expect(formatMarkdown(c)).toContain('More than one row for one key (not compared): 16:8 c=1 engine: 2 rows in BASE; 16:8 c=1 engine: 2 rows in NEW.');
    // Only in NEW: the same.
    const once = report([row(16, 1, 100, 10, 5, 0.02, 3), row(16, 2, 100, 10, 5, 0.02, 3)]);
    const d = compareReports(once, twice);
    expect(d.duplicated).toEqual(['16:8 c=1 engine: 2 rows in NEW']);
    expect(d.rows.map((r) => r.key)).toEqual(['16:8 c=2 engine']);
  });

  it('names the true reason when every shared row is ok in BASE and failed in NEW', () => {
    const ok = row(16, 1, 100, 10, 5, 0.02, 3);
    const failed = { ...ok, status: 'error', reason: 'engine error: x' };
    const c = compareReports(report([ok]), report([failed]));
    expect(c.rows.map((r) => r.row)).toEqual(['failed in NEW']);
    expect(c.not_a_pass).toEqual(['every row both runs share failed in NEW (ok in BASE): nothing was compared']);
    expect(c.exit_code).toBe(5);
    expect(verdictLine(c)).toBe('**Not a pass**: every row both runs share failed in NEW (ok in BASE): nothing was compared (exit 5).');
    const mixed = compareReports(report([ok, { ...failed, concurrency: 2 }]), report([failed, { ...failed, concurrency: 2 }]));
    expect(mixed.not_a_pass).toEqual(['every row both runs share failed in NEW (1 ok in BASE, 1 failed in both): nothing was compared']);
  });

  it('keeps a reason with a carriage return on one Markdown line and one quoted CSV field', () => {
    const ok = row(16, 1, 100, 10, 5, 0.02, 3);
    const c = compareReports(report([ok]), report([{ ...ok, status: 'error', reason: 'engine error: a\rb' }]));
    const md = formatMarkdown(c);
    expect(md).not.toMatch(/\r/);
    expect(md).toContain('**▼ failed in NEW**: engine error: a b |');
    const recs = parse(formatCsv(c), { columns: true }) as Array<Record<string, string>>;
    expect(recs).toHaveLength(1);
    expect(recs[0]!.note).toBe('engine error: a\rb');
  });

  it('fails the gate when NEW did not complete, whatever its rows say', () => {
    const rows = [row(16, 1, 100, 10, 5, 0.02, 3)];
    for (const status of ['interrupted', 'load_failed', 'running']) {
      const c = compareReports(report(rows), report(rows, { status }));
      expect(c.regressions).toBe(0);
      expect(c.not_a_pass).toEqual([`NEW's run is ${status}, not complete`]);
      expect(c.exit_code).toBe(5);
      expect(formatMarkdown(c)).toContain(`**Not a pass**: NEW's run is ${status}, not complete (exit 5).`);
    }
    // An interrupted BASE is only a baseline with fewer rows.
    expect(compareReports(report(rows, { status: 'interrupted' }), report(rows)).exit_code).toBe(0);
  });

  it('lists a changed weights file (same config, another GGUF) as a provenance difference', () => {
    const wf = (sha256: string) => ({ container: 'gguf', name: 'Q4_K_M', bits_per_weight: 4.89, files: ['m-Q4_K_M.gguf'], sha256 });
    const a = report([], { model: { dtype: 'Q4_K_M', config_sha256: 'c', weight_format: wf('aaa') } });
    const b = report([], { model: { dtype: 'Q4_K_M', config_sha256: 'c', weight_format: wf('bbb') } });
    const d = compareReports(a, b).provenance;
    expect(d.map((x) => x.field)).toEqual(['model.weight_format']);
    expect(d[0]!.next).toContain('"sha256":"bbb"');
  });

  it('lists provenance differences field by field', () => {
    const a = report([], { engine: { isa: 'avx2', threads: 2 }, model: { dtype: 'BF16' } });
    const b = report([], { engine: { isa: 'avx512', threads: 2 }, model: { dtype: 'F32' }, tool: { git_commit: 'b' } });
    expect(compareReports(a, b).provenance).toEqual([
      { field: 'engine.isa', base: 'avx2', next: 'avx512' },
      { field: 'model.dtype', base: 'BF16', next: 'F32' },
      { field: 'tool.git_commit', base: 'a', next: 'b' },
    ]);
  });

  it('compares engine settings, not what was measured at load: the KV pool\'s size apart, free memory and RSS not at all', () => {
    const engine = (blocks: number, free: number, rss: number, fraction = 0.02) => ({
      backend: 'cpu', isa: 'avx2', threads: 2, kv_blocks_total: blocks, kv_memory: { fraction },
      kv_pool: { blocks, block_bytes: 32768, dtype: 'f32', bytes: blocks * 32768, source: 'fraction of available host memory', fraction, free_bytes: free, budget_bytes: free * fraction },
      rss_before_release_bytes: rss, rss_after_release_bytes: rss / 2,
    });
    const a = report([], { engine: engine(13180, 21679042560, 1e9) });
    const b = report([], { engine: engine(13077, 21500000000, 1.1e9) });
    const c = compareReports(a, b);
    expect(c.provenance).toEqual([]);
    expect(c.measured).toEqual([{ field: 'engine.kv_blocks_total', base: '13180', next: '13077' }]);
    const md = formatMarkdown(c);
    expect(md).toContain('**Provenance**: no difference');
    expect(md).toContain('Measured at load, not a setting: engine.kv_blocks_total 13180 → 13077');
    expect(md).not.toMatch(/free_bytes|budget_bytes|rss_/);
    // The settings that size the pool are compared, inside kv_pool too.
    const d = compareReports(a, report([], { engine: engine(6590, 21679042560, 1e9, 0.01) }));
    expect(d.provenance.map((x) => x.field)).toEqual(['engine.kv_memory', 'engine.kv_pool.fraction']);
  });

  it('lists a KV cache dtype change among the engine differences, and the page states the dtype', async () => {
    const a = report([], { engine: { isa: 'avx2', threads: 2, kv_cache_dtype: 'f32' } });
    const b = report([], { engine: { isa: 'avx2', threads: 2, kv_cache_dtype: 'f16' } });
    expect(compareReports(a, b).provenance).toEqual([{ field: 'engine.kv_cache_dtype', base: 'f32', next: 'f16' }]);
    expect(await renderHtml(b)).toContain('<dt>KV cache dtype</dt><dd>f16</dd>');
  });
});

describe('compare formatting', () => {
  const change = (ratio: number, floor: number | null): FigureChange => ({
    figure: 'decode_tok_s', label: 'x', better: 'higher', base: 100, next: 100 * ratio, ratio, floor,
    band: floor === null ? null : [Math.exp(-floor), Math.exp(floor)], floor_unknown: null, not_judged: null, verdict: 'below threshold',
  });

  it('prints a ratio with the digits its verdict needs: 0.949 and 0.951 around a 5% threshold differ', () => {
    expect(ratioText(change(0.949, 0.01), 5)).toBe('0.949×');
    expect(ratioText(change(0.951, 0.01), 5)).toBe('0.951×');
    expect(ratioText(change(0.9501, 0.01), 5)).toBe('0.9501×');
    expect(ratioText(change(1.0503, 0.01), 5)).toBe('1.0503×');
    expect(ratioText(change(0.9, 0.01), 5)).toBe('0.90×');
    expect(ratioText(change(1.0004, 0.01), 5)).toBe('1.00×');
    // Near the band's edge too: e^0.1 = 1.10517.
    expect(ratioText(change(1.104, 0.1), 5)).toBe('1.10×'); // the band prints (0.90–1.11): inside, as it is
    expect(bandText(change(1.106, 0.1), 5)).toBe('(0.905–1.105)');
    expect(ratioText(change(1.106, 0.1), 5)).toBe('1.106×');
    expect(ratioText(change(12.345, 0.1), 5)).toBe('12.3×');
  });

  it('prints the noise band as the range of ratios, not as ±(e^floor − 1)', () => {
    expect(bandText(change(1, Math.log(2)), 5)).toBe('(0.50–2.00)');
    expect(bandText(change(1, 0.001), 5)).toBe('(0.999–1.001)');
    expect(bandText(change(1, Math.log(200)), 5)).toBe('(0.005–200)');
    expect(bandText(change(1, null), 5)).toBe('(noise ?)');
    expect(bandText(change(1, 0), 5)).toBe('(no noise)');
  });

  it('says so when the only regression is a row that failed in NEW', () => {
    const ok = row(16, 1, 100, 10, 5, 0.02, 3);
    const ok2 = row(16, 2, 100, 10, 5, 0.02, 3);
    const c = compareReports(report([ok, ok2]), report([{ ...ok, status: 'error', reason: 'engine error: x' }, ok2]));
    expect(c.regressions).toBe(1);
    expect(verdictLine(c)).toBe('**1 row failed in NEW** (ok in BASE): a regression (exit 5); no figure regressed beyond noise.');
    const both = compareReports(report([ok, ok2]), report([{ ...ok, status: 'error', reason: 'x' }, row(16, 2, 50, 10, 5, 0.02, 3)]));
    expect(verdictLine(both)).toBe('**2 regressions** beyond both the noise floor and the 5% threshold, and **1 row failed in NEW** (ok in BASE) (exit 5).');
  });
});

describe('checkReport and the chart points', () => {
  it('names the field that is wrong', () => {
    expect(() => checkReport([], 'x.json')).toThrow(UsageError);
    expect(() => checkReport({ schema_version: 2, rows: [] }, 'x.json')).toThrow('x.json: schema_version is 2, expected 1');
    expect(() => checkReport({ schema_version: 1 }, 'x.json')).toThrow('x.json: rows is not an array');
    expect(() => checkReport({ schema_version: 1, rows: [{ isl: 1, osl: 1, concurrency: 1, status: 'maybe' }] }, 'x.json')).toThrow('rows[0].status is "maybe"');
  });

  it('checks the type of every field a reader uses: a one-line usage error naming the file and the field, never a crash or a silent "not measured"', async () => {
    const ok = () => structuredClone(row(16, 1, 100, 10, 5, 0.02, 3)) as Record<string, any>;
    const base = () => ({ schema_version: 1, status: 'complete', machine: { cpu_model: 'x', gpus: [{ name: 'g' }] }, command_line: { shell: 'bench' }, notes: ['n'], rows: [ok()] });
    const cases: Array<[string, (r: ReturnType<typeof base>) => void, string]> = [
      ['a number as the reason', (r) => { Object.assign(r.rows[0]!, { status: 'error', reason: 42 }); }, 'x.json: rows[0].reason is 42, expected a string'],
      ['an array as the notes of a row', (r) => { r.rows[0]!.notes = ['x']; }, 'x.json: rows[0].notes is ["x"], expected a string'],
      ['a string as a figure', (r) => { r.rows[0]!.decode_tok_s = '250.5'; }, 'x.json: rows[0].decode_tok_s is "250.5", expected a number or null'],
      ['a figure no measurement can be', (r) => { r.rows[0]!.decode_tok_s = 1e300; }, 'x.json: rows[0].decode_tok_s is 1e+300, outside what a measurement can be (1e-9 to 1e+15 in size, or 0)'],
      ['a distribution field no measurement can be', (r) => { r.rows[0]!.distributions.ttft_ms.p50 = 1e-320; }, 'x.json: rows[0].distributions.ttft_ms.p50 is 1e-320, outside what a measurement can be (1e-9 to 1e+15 in size, or 0)'],
      ['an overflowed figure (1e999 parses as Infinity)', (r) => { r.rows[0]!.ttft_ms = Infinity; }, "x.json: rows[0].ttft_ms is Infinity (a number beyond a double's range), expected a number or null"],
      ['an overflowed sample', (r) => { r.rows[0]!.samples.ttft_ms[0] = -Infinity; }, "x.json: rows[0].samples.ttft_ms[0] is -Infinity (a number beyond a double's range), expected a number or null"],
      ['a negative figure', (r) => { r.rows[0]!.decode_tok_s = -5; }, 'x.json: rows[0].decode_tok_s is -5, a negative figure (no measurement of a sweep is below 0)'],
      ['a negative distribution count', (r) => { r.rows[0]!.distributions.ttft_ms.n = -3; }, 'x.json: rows[0].distributions.ttft_ms.n is -3, a negative figure (no measurement of a sweep is below 0)'],
      ['a negative sample', (r) => { r.rows[0]!.samples.decode_tok_s[1] = -1; }, 'x.json: rows[0].samples.decode_tok_s[1] is -1, a negative figure (no measurement of a sweep is below 0)'],
      ['a CPU share above the whole machine', (r) => { r.rows[0]!.cpu_other_share = 5; }, "x.json: rows[0].cpu_other_share is 5, expected a share of the machine's CPU, 0 to 1"],
      ['a negative CPU share', (r) => { r.rows[0]!.cpu_other_share = -1; }, "x.json: rows[0].cpu_other_share is -1, expected a share of the machine's CPU, 0 to 1"],
      ['a string as cpu_other_share', (r) => { r.rows[0]!.cpu_other_share = 'high'; }, 'x.json: rows[0].cpu_other_share is "high", expected a number or null'],
      ['a zero concurrency', (r) => { r.rows[0]!.concurrency = 0; }, 'x.json: rows[0].concurrency is 0, expected a whole number >= 1'],
      ['a string as distributions', (r) => { r.rows[0]!.distributions = 'x'; }, 'x.json: rows[0].distributions is "x", expected an object or null'],
      ['a string in a distribution', (r) => { r.rows[0]!.distributions.ttft_ms.p99 = '5'; }, 'x.json: rows[0].distributions.ttft_ms.p99 is "5", expected a number or null'],
      ['samples without pass', (r) => { r.rows[0]!.samples = { pass: 'x' }; }, 'x.json: rows[0].samples.pass is "x", expected an array'],
      ['a null pass', (r) => { r.rows[0]!.samples.pass[1] = null; }, 'x.json: rows[0].samples.pass[1] is null, expected a whole number >= 0'],
      ['a missing sample column', (r) => { r.rows[0]!.samples.ttft_ms = null; }, 'x.json: rows[0].samples.ttft_ms is null, expected an array'],
      ['a short sample column', (r) => { r.rows[0]!.samples.itl_p99_ms.pop(); }, 'x.json: rows[0].samples.itl_p99_ms has 2 entries, samples.pass 3'],
      ['a string sample', (r) => { r.rows[0]!.samples.decode_tok_s[2] = '1'; }, 'x.json: rows[0].samples.decode_tok_s[2] is "1", expected a number or null'],
      ['gap bins without their scale', (r) => { r.rows[0]!.samples.itl_gap_bins = [[], [], []]; }, 'x.json: rows[0].samples.itl_bins_per_octave is missing, expected a whole number 1..65536 beside itl_gap_bins'],
      ['a scale without gap bins', (r) => { r.rows[0]!.samples.itl_bins_per_octave = 128; }, 'x.json: rows[0].samples.itl_gap_bins is missing, expected an array beside itl_bins_per_octave'],
      ['gap bins for too few passes', (r) => { Object.assign(r.rows[0]!.samples, { itl_bins_per_octave: 128, itl_gap_bins: [[], []] }); }, 'x.json: rows[0].samples.itl_gap_bins has 2 entries, samples.pass has 3 timed passes'],
      ['a bin that is not a pair', (r) => { Object.assign(r.rows[0]!.samples, { itl_bins_per_octave: 128, itl_gap_bins: [[], [[3]], []] }); }, 'x.json: rows[0].samples.itl_gap_bins[1][0] is [3], expected a [bin, count] pair'],
      ['a bin past any number of ms', (r) => { Object.assign(r.rows[0]!.samples, { itl_bins_per_octave: 1, itl_gap_bins: [[], [], [[5000, 1]]] }); }, 'x.json: rows[0].samples.itl_gap_bins[2][0] has the bin 5000, expected a whole number whose gap, 2^(bin / 1) ms, is a measurement (1e-9 to 1e+15)'],
      ['a zero count', (r) => { Object.assign(r.rows[0]!.samples, { itl_bins_per_octave: 128, itl_gap_bins: [[[425, 0]], [], []] }); }, 'x.json: rows[0].samples.itl_gap_bins[0][0] has the count 0, expected a whole number >= 1'],
      ['notes as a string', (r) => { (r as any).notes = 'a note'; }, 'x.json: notes is "a note", expected an array of strings'],
      ['a number among the notes', (r) => { (r as any).notes = ['a', 1]; }, 'x.json: notes[1] is 1, expected a string'],
      ['a null GPU', (r) => { r.machine.gpus = [null as any]; }, 'x.json: machine.gpus[0] is null, expected an object'],
      ['an object as the shell line', (r) => { (r.command_line as any).shell = { a: 1 }; }, 'x.json: command_line.shell is {"a":1}, expected a string'],
      ['a number as the status', (r) => { (r as any).status = 3; }, 'x.json: status is 3, expected a string'],
    ];
    expect(() => checkReport(base(), 'x.json')).not.toThrow();
    for (const [what, edit, msg] of cases) {
      const r = base();
      edit(r);
      let err: unknown = null;
      try { checkReport(r, 'x.json'); } catch (e) { err = e; }
      expect(err, what).toBeInstanceOf(UsageError);
      expect((err as Error).message, what).toBe(`${msg} (is it a PREFIX.json written by bench --output?)`);
    }
  });

  it('shows a figure to 5 significant digits without a made-up zero before the point; the exact value is the title', async () => {
    expect(shownFigure(123456.78)).toBe('123457');
    expect(shownFigure(-123456.78)).toBe('-123457');
    expect(shownFigure(12345.678)).toBe('12346');
    expect(shownFigure(12.3456789)).toBe('12.346');
    expect(shownFigure(0.000123456789)).toBe('0.00012346');
    expect(shownFigure(42)).toBe('42');
    const html = await renderHtml(checkReport({ schema_version: 1, rows: [{ ...row(16, 1, 100, 10, 5, 0.02, 3), prefill_tok_s: 123456.78 }] }, 'r.json'));
    expect(html).toContain('<td class="figure" title="123456.78">123457</td>');
  });

  it('plots ok rows with measured figures only: an error row and a null figure are left out', () => {
    const ok = row(16, 1, 100, 10, 5, 0.02, 3);
    const nullItl = { ...row(16, 2, 100, 10, 5, 0.02, 3), itl_p99_ms: null };
    const err = { ...row(16, 4, 100, 10, 5, 0.02, 3), status: 'error', reason: 'x' };
    const rows = checkReport({ schema_version: 1, rows: [ok, nullItl, err] }, 'r.json').rows;
    const itl = CHARTS.find((c) => c.id === 'itl')!;
    expect(chartPoints(itl, rows, '16:8').map((p) => p.desc)).toEqual(['16:8 c=1 itl_p50_ms=10', '16:8 c=1 itl_p99_ms=20', '16:8 c=2 itl_p50_ms=10']);
    const frontier = CHARTS.find((c) => c.id === 'frontier')!;
    expect(chartPoints(frontier, rows, null).map((p) => [p.x, p.y])).toEqual([[100, 100], [200, 100]]);
  });

  it('renders a chart to SVG with one point mark per point, and refuses a spec vega-lite warns about', async () => {
    const rows = checkReport({ schema_version: 1, rows: [row(16, 1, 100, 10, 5, 0.02, 3), row(16, 2, 90, 11, 6, 0.02, 3)] }, 'r.json').rows;
    const ttft = CHARTS.find((c) => c.id === 'ttft')!;
    const spec = chartSpec(ttft, chartPoints(ttft, rows, '16:8'));
    const svg = await renderChart(spec);
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg.match(/<path aria-label="16:8 c=\d ttft_p\d\d_ms=[\d.]+"/g)).toHaveLength(4);
    const bad = structuredClone(spec) as any;
    bad.layer[1].encoding.shape = { field: 'series', type: 'nominal', legend: null };
    await expect(renderChart(bad)).rejects.toThrow(/^chart warn: .*legend/);
  });
});

describe('bench report --out', () => {
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'bench-report-units-'));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  const run = async (args: string[]) => {
    const program = new Command().exitOverride();
    let code: number | null = null;
    registerReport(program, (c) => { code = c; });
    await program.parseAsync(['node', 'bench', 'report', ...args]);
    return code;
  };

  it('refuses an --out that is the report itself (any spelling, a symlink, a hard link), and leaves the report as it was', async () => {
    const file = path.join(tmp, 'run.json');
    const text = JSON.stringify({ schema_version: 1, status: 'complete', rows: [row(16, 1, 100, 10, 5, 0.02, 3)] });
    writeFileSync(file, text);
    symlinkSync(file, path.join(tmp, 'link.json'));
    linkSync(file, path.join(tmp, 'hard.json'));
    for (const out of [file, path.join(tmp, '.', 'run.json'), path.relative(process.cwd(), file), path.join(tmp, 'link.json'), path.join(tmp, 'hard.json')]) {
      await expect(run([file, '--out', out]), out).rejects.toThrow(new UsageError(`--out: ${out} is the report being read; the page would overwrite it (give another file, or leave --out out for ${path.join(tmp, 'run.html')})`));
      expect(readFileSync(file, 'utf8')).toBe(text);
    }
    // Another file is fine.
    expect(await run([file, '--out', path.join(tmp, 'page.html')])).toBe(0);
    expect(readFileSync(path.join(tmp, 'page.html'), 'utf8')).toMatch(/^<!DOCTYPE html>/);
    // An existing page is replaced; an existing file of another kind (the run's CSV, another report) is not.
    expect(await run([file, '--out', path.join(tmp, 'page.html')])).toBe(0);
    for (const other of ['run.csv', 'other.json']) {
      const out = path.join(tmp, other);
      writeFileSync(out, 'isl,osl\n');
      await expect(run([file, '--out', out]), out).rejects.toThrow(new UsageError(`--out: ${out} exists and is not a page (.html); the page would overwrite it (give a .html file)`));
      expect(readFileSync(out, 'utf8')).toBe('isl,osl\n');
    }
  });
});

describe('bench compare --help', () => {
  it('lists every reason for exit 5', () => {
    const program = new Command();
    registerCompare(program, () => {});
    const help = program.commands.find((c) => c.name() === 'compare')!.helpInformation().replace(/\s+/g, ' ');
    for (const why of ['a figure beyond noise and --threshold', 'a row ok in BASE that failed in NEW', 'NEW did not complete',
      'a figure of BASE is missing in NEW', 'under CPU contention', 'a report holds two rows for one key', 'no row of BASE is in NEW', 'every row both share failed']) {
      expect(help, why).toContain(why);
    }
  });
});
