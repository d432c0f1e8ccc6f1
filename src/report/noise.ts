// The noise floor of a figure, from a run's own per-request samples (rows[].samples), and the gate's rule
// for many figures at once (docs/report.md, "The noise floor").
//
// What varies between two runs of one build is mostly what varies between the timed passes of one run:
// the requests of a pass share the machine's state at that moment (another process, the CPU's clock, the
// caches), so the spread of requests within a pass understates how much a second run would differ.
// Each figure's spread is therefore measured on passes, in one of three ways (FloorRule, figures.ts):
//
// - `aggregate-rate`, `mean`, `percentile`: a cluster bootstrap: the row's timed passes are drawn with
//   replacement, each drawn pass with all its requests, and the figure is computed on the draw as the
//   row computes it (the mean, the nearest-rank percentile, the aggregate rate: decode tokens over the
//   passes' decode windows). Its spread on a log scale over the draws, times sqrt(k / (k - 1)) (with k
//   passes the bootstrap's variance is (k - 1) / k of the usual estimate), is the run's standard error,
//   with k - 1 degrees of freedom.
// - `pooled-gaps` (ITL p50 and p99): the same cluster bootstrap, drawing each pass with all its decode
//   gaps (the samples keep them per pass as a log-scale histogram, row-samples.ts), and the pooled
//   nearest-rank percentile computed on the draw: the figure as the row computes it, to within the
//   bins' 0.27 %.
// - `request-spread`: for a report written before the gap histograms (its ITL p99). The pooled p99 of
//   every gap lies between the smallest and the largest of the requests' own p99s, so the spread of
//   those (one request's, not divided by the number of requests) bounds how far it moves: the standard
//   error used is that spread, k - 1 degrees of freedom. Conservative: flagged only on a large change.
//   Such a report's ITL p50 uses the bootstrap of the mean of its requests' p50s.
//
// Two runs' errors add in quadrature; the floor is a one-sided Student t quantile (Welch-Satterthwaite
// degrees of freedom) at level alpha / m, m the number of figures the comparison tests (Bonferroni): the
// gate's chance to flag a regression that is not there stays below alpha however many rows and figures
// the sweep has. One timed pass has no pass-to-pass spread: its floor is unknown, not invented.
import { binValueMs } from '../bench/row-samples.js';
import { nearestRank, percentileSorted } from '../bench/stats.js';
import { Rng } from '../util/rng.js';

/** The gate: its false-alarm rate for a comparison as a whole; the bootstrap's draws and seed. */
export const GATE = { alpha: 0.05, resamples: 1000, seed: 0x5eed } as const;

/**
 * A percentile p is judged only when at least this many samples lie above it (n (1 - p/100) >= 5, so
 * 500 samples for a p99). Below that the nearest-rank p99 is one of the sample's few largest values (the
 * largest when n <= 100): no resampling can see beyond the largest value, and a distribution-free 95 %
 * interval of a p99 needs 367 samples only for its upper end to exist (0.99^n <= 0.025).
 */
export const TAIL_EXCEEDANCES = 5;

/**
 * How far from a pooled percentile's rank (in binomial standard deviations of rank) its floor looks for
 * a change of level (rowSpreads, `pooled-gaps`). In the simulation of test/compare-sim.test.ts, with
 * stalls on 1 % of the gaps: 1 let identical runs fail on ITL p99 twice as often as the floor from the
 * requests' p99s; 2 as often (once in 100 pairs), catching a 15 % slower decode on ITL p99 in 82 % of
 * pairs (1 %: the requests' p99s); 3 in 30 %.
 */
export const RANK_REACH = 2;

export function minTailSamples(p: number): number {
  return Math.ceil(TAIL_EXCEEDANCES / (1 - p / 100) - 1e-9);
}

export type SampleName = 'ttft_ms' | 'decode_tok_s' | 'itl_p50_ms' | 'itl_p99_ms';

/** How a figure's spread is measured (see the top of this file). */
export type FloorRule =
  | { stat: 'aggregate-rate' }
  | { stat: 'mean'; sample: SampleName }
  | { stat: 'percentile'; sample: SampleName; p: number }
  | { stat: 'request-spread'; sample: SampleName }
  /** A pooled percentile of the rows' decode gaps; `fallback` for a report without `itl_gap_bins`. */
  | { stat: 'pooled-gaps'; p: number; fallback: FloorRule };

/** A run's spread for one figure: the standard error of ln(figure), and its degrees of freedom. */
export interface Spread {
  se: number;
  df: number;
  passes: number;
  n: number;
}

export type FloorUnknown = { unknown: string };

/** The samples as the JSON holds them (rows[].samples), and the row's osl (for the decode windows). */
export interface RowSampleData {
  osl: number;
  samples: (Partial<Record<SampleName | 'pass', ReadonlyArray<number | null>>> & {
    itl_bins_per_octave?: number;
    itl_gap_bins?: ReadonlyArray<ReadonlyArray<readonly [number, number]>>;
  }) | null | undefined;
}

const finite = (v: number | null | undefined): v is number => typeof v === 'number' && Number.isFinite(v);

/**
 * Each rule's spread for one row, from one set of bootstrap draws (seeded: the same samples always give
 * the same spreads). The rules are keyed by the caller's names.
 */
export function rowSpreads<K extends string>(row: RowSampleData, rules: ReadonlyArray<readonly [K, FloorRule]>): Map<K, Spread | FloorUnknown> {
  const out = new Map<K, Spread | FloorUnknown>();
  const s = row.samples;
  const pass = s?.pass;
  if (!s || !Array.isArray(pass)) {
    for (const [k] of rules) out.set(k, { unknown: 'no per-request samples in the report' });
    return out;
  }
  // The passes, each the list of its requests' indices.
  const groupOf = new Map<number, number[]>();
  pass.forEach((p, i) => {
    const g = groupOf.get(p ?? 0);
    if (g) g.push(i); else groupOf.set(p ?? 0, [i]);
  });
  const groups = [...groupOf.values()];
  const passIds = [...groupOf.keys()];
  const k = groups.length;
  const gapBins = s.itl_gap_bins;
  const binsPerOctave = s.itl_bins_per_octave;
  const hasGapBins = Array.isArray(gapBins) && typeof binsPerOctave === 'number' && binsPerOctave > 0;
  const col = (name: SampleName): ReadonlyArray<number | null> => s[name] ?? [];
  const valid = (name: SampleName, i: number): boolean => finite(col(name)[i]);
  /** eval: the figure on a draw of passes; null when the draw has no figure (left out of the spread). */
  const boot: Array<{ key: K; eval: (drawn: Int32Array) => number | null; n: number; of?: string; atLeast?: () => number }> = [];
  // A draw of k passes with replacement holds up to k x the largest pass (passes differ in size in open-loop rows).
  const scratch = new Float64Array(k * Math.max(0, ...groups.map((g) => g.length)));
  // The passes' gap histograms, read once for the pooled-gaps rules (ITL p50 and p99).
  let gaps: PooledGaps | undefined;
  for (const [key, asked] of rules) {
    const rule = asked.stat === 'pooled-gaps' && !hasGapBins ? asked.fallback : asked;
    if (rule.stat === 'pooled-gaps') {
      const { bins, sparse, passGaps, n, all } = (gaps ??= pooledGaps(passIds.map((id) => gapBins![id] ?? [])));
      const acc = new Float64Array(bins.length);
      // At least the percentile's own rank uncertainty, from the whole row: ln of the ratio of the values
      // RANK_REACH binomial standard deviations of rank, sqrt(n p (1 - p)), either side of it, over
      // 2 x RANK_REACH (one standard error where ln(value) is linear in rank over that span). Where a
      // p99 sits just below or above a cluster of stalls, a second run's share of stalls puts it on the
      // other side half the time; drawing this run's passes does not see that when its own stalls lie a
      // few ranks away, the values around the rank do.
      const rankSe = (): number => {
        const sd = Math.sqrt(n * (rule.p / 100) * (1 - rule.p / 100));
        const r = nearestRank(n, rule.p);
        const lo = valueAtRank(all, Math.max(1, Math.floor(r - RANK_REACH * sd)));
        const hi = valueAtRank(all, Math.min(n, Math.ceil(r + RANK_REACH * sd)));
        return Math.log(hi / lo) / (2 * RANK_REACH);
      };
      /** The value of the rank-th smallest gap of a histogram over `bins`. */
      const valueAtRank = (counts: Float64Array, rank: number): number => {
        let c = 0;
        for (let j = 0; j < bins.length; j++) { c += counts[j]!; if (c >= rank) return binValueMs(bins[j]!, binsPerOctave!); }
        return binValueMs(bins[bins.length - 1]!, binsPerOctave!);
      };
      boot.push({ key, n, of: 'decode gap', atLeast: rankSe, eval: (drawn) => {
        acc.fill(0);
        let total = 0;
        for (const gi of drawn) {
          const h = sparse[gi]!;
          for (let j = 0; j < h.at.length; j++) acc[h.at[j]!] += h.count[j]!;
          total += passGaps[gi]!;
        }
        // A draw of passes that hold no decode gap (high concurrency, a short osl: every gap overlapped
        // a prefill) has no figure: it is left out of the spread, not taken for a bad sample.
        return total === 0 ? null : valueAtRank(acc, nearestRank(total, rule.p));
      } });
    } else if (rule.stat === 'aggregate-rate') {
      // Per pass: decode tokens, and the decode window from the first first token to the last last token
      // (each request's decode lasts (osl - 1) tokens at its own rate). On the audit's runs this gives the
      // row's decode_tok_s to within 1 % (exactly at c=1); a draw of passes sums both.
      const tok = new Float64Array(k);
      const win = new Float64Array(k);
      let n = 0;
      groups.forEach((g, gi) => {
        let lo = Infinity;
        let hi = -Infinity;
        for (const i of g) {
          const rate = col('decode_tok_s')[i];
          const ttft = col('ttft_ms')[i];
          if (!finite(rate) || !(rate > 0) || !finite(ttft)) continue;
          lo = Math.min(lo, ttft);
          hi = Math.max(hi, ttft + ((row.osl - 1) * 1000) / rate);
          tok[gi] += row.osl - 1;
          n++;
        }
        win[gi] = hi > lo ? hi - lo : 0;
      });
      boot.push({ key, n, eval: (drawn) => {
        let t = 0;
        let w = 0;
        for (const gi of drawn) { t += tok[gi]!; w += win[gi]!; }
        return w > 0 ? (t * 1000) / w : Number.NaN;
      } });
    } else if (rule.stat === 'mean') {
      const sum = new Float64Array(k);
      const cnt = new Float64Array(k);
      groups.forEach((g, gi) => { for (const i of g) if (valid(rule.sample, i)) { sum[gi] += col(rule.sample)[i]!; cnt[gi]++; } });
      boot.push({ key, n: cnt.reduce((a, b) => a + b, 0), eval: (drawn) => {
        let t = 0;
        let c = 0;
        for (const gi of drawn) { t += sum[gi]!; c += cnt[gi]!; }
        return c > 0 ? t / c : Number.NaN;
      } });
    } else if (rule.stat === 'percentile') {
      const vals = groups.map((g) => g.filter((i) => valid(rule.sample, i)).map((i) => col(rule.sample)[i]!));
      boot.push({ key, n: vals.reduce((a, v) => a + v.length, 0), eval: (drawn) => {
        let m = 0;
        for (const gi of drawn) for (const v of vals[gi]!) scratch[m++] = v;
        if (m === 0) return Number.NaN;
        return percentileSorted(scratch.subarray(0, m).sort() as unknown as number[], rule.p)!;
      } });
    } else {
      // request-spread: the requests' own spread, no draws.
      const logs: number[] = [];
      for (let i = 0; i < pass.length; i++) {
        const v = col(rule.sample)[i];
        if (finite(v) && v > 0) logs.push(Math.log(v));
      }
      if (logs.length === 0) out.set(key, { unknown: 'no samples' });
      else if (k < 2) out.set(key, { unknown: `one timed pass (${logs.length} request${logs.length === 1 ? '' : 's'})` });
      else {
        const m = logs.reduce((a, b) => a + b, 0) / logs.length;
        const sd = logs.length > 1 ? Math.sqrt(logs.reduce((a, x) => a + (x - m) ** 2, 0) / (logs.length - 1)) : 0;
        out.set(key, { se: sd, df: k - 1, passes: k, n: logs.length });
      }
    }
  }
  const todo = boot.filter((b) => {
    if (b.n === 0) { out.set(b.key, { unknown: 'no samples' }); return false; }
    if (k < 2) { out.set(b.key, { unknown: `one timed pass (${b.n} ${b.of ?? 'request'}${b.n === 1 ? '' : 's'})` }); return false; }
    return true;
  });
  if (todo.length === 0) return out;
  const rng = new Rng(GATE.seed, 'pass-bootstrap');
  const B = GATE.resamples;
  const drawn = new Int32Array(k);
  const logs = todo.map(() => new Float64Array(B));
  const used = new Int32Array(todo.length);
  const bad = new Uint8Array(todo.length);
  for (let b = 0; b < B; b++) {
    for (let c = 0; c < k; c++) drawn[c] = Math.min(k - 1, Math.floor(rng.nextFloat() * k));
    todo.forEach((t, ti) => {
      const v = t.eval(drawn);
      if (v === null) return;
      if (!(v > 0) || !Number.isFinite(v)) bad[ti] = 1;
      else logs[ti]![used[ti]!++] = Math.log(v);
    });
  }
  todo.forEach((t, ti) => {
    if (bad[ti]) { out.set(t.key, { unknown: 'samples not all positive' }); return; }
    const m = used[ti]!;
    if (m < 2) { out.set(t.key, { unknown: 'too few passes hold a sample' }); return; }
    const l = logs[ti]!;
    let mean = 0;
    for (let b = 0; b < m; b++) mean += l[b]!;
    mean /= m;
    let ss = 0;
    for (let b = 0; b < m; b++) ss += (l[b]! - mean) ** 2;
    const se = Math.sqrt(((ss / (m - 1)) * k) / (k - 1));
    out.set(t.key, { se: Math.max(se, t.atLeast?.() ?? 0), df: k - 1, passes: k, n: t.n });
  });
  return out;
}

/** The passes' decode-gap histograms (samples.itl_gap_bins) over one ascending list of the row's bins. */
interface PooledGaps {
  bins: Int32Array;
  /** Per pass (in the order given): its bins' indices in `bins`, and their counts. */
  sparse: Array<{ at: Int32Array; count: Float64Array }>;
  passGaps: Float64Array;
  /** Every pass's gaps, and their histogram over `bins`. */
  n: number;
  all: Float64Array;
}

function pooledGaps(hist: ReadonlyArray<ReadonlyArray<readonly [number, number]>>): PooledGaps {
  const bins = Int32Array.from(new Set(hist.flatMap((h) => h.map(([b]) => b)))).sort();
  const at = new Map<number, number>();
  bins.forEach((b, j) => at.set(b, j));
  const sparse = hist.map((h) => ({ at: Int32Array.from(h, ([b]) => at.get(b)!), count: Float64Array.from(h, ([, c]) => c) }));
  const passGaps = Float64Array.from(sparse, (h) => h.count.reduce((a, b) => a + b, 0));
  const all = new Float64Array(bins.length);
  for (const h of sparse) for (let j = 0; j < h.at.length; j++) all[h.at[j]!] += h.count[j]!;
  return { bins, sparse, passGaps, n: passGaps.reduce((a, b) => a + b, 0), all };
}

/**
 * The floor of a comparison on a log scale: |ln(NEW / BASE)| beyond it is a change at one-sided level
 * alpha / tests. The two runs' errors add in quadrature; Welch-Satterthwaite degrees of freedom.
 */
export function gateFloor(a: Spread, b: Spread, tests: number, alpha: number = GATE.alpha): number {
  const va = a.se * a.se;
  const vb = b.se * b.se;
  if (va + vb === 0) return 0;
  const df = (va + vb) ** 2 / (va * va / a.df + vb * vb / b.df);
  return studentTQuantile(1 - alpha / Math.max(1, tests), df) * Math.sqrt(va + vb);
}

// Student's t distribution: the CDF from the regularized incomplete beta function (continued fraction,
// Numerical Recipes' betacf), the quantile by bisection. Enough digits for a floor.
function logGamma(x: number): number {
  const c = [76.18009172947146, -86.50532032941677, 24.01409824083091, -1.231739572450155, 0.1208650973866179e-2, -0.5395239384953e-5];
  let y = x;
  let tmp = x + 5.5;
  tmp -= (x + 0.5) * Math.log(tmp);
  let ser = 1.000000000190015;
  for (const cj of c) ser += cj / ++y;
  return -tmp + Math.log((2.5066282746310005 * ser) / x);
}

function betaContinuedFraction(a: number, b: number, x: number): number {
  const tiny = 1e-300;
  const qab = a + b;
  const qap = a + 1;
  const qam = a - 1;
  let c = 1;
  let d = 1 - (qab * x) / qap;
  if (Math.abs(d) < tiny) d = tiny;
  d = 1 / d;
  let h = d;
  for (let m = 1; m <= 300; m++) {
    const m2 = 2 * m;
    let aa = (m * (b - m) * x) / ((qam + m2) * (a + m2));
    d = 1 + aa * d; if (Math.abs(d) < tiny) d = tiny;
    c = 1 + aa / c; if (Math.abs(c) < tiny) c = tiny;
    d = 1 / d;
    h *= d * c;
    aa = (-(a + m) * (qab + m) * x) / ((a + m2) * (qap + m2));
    d = 1 + aa * d; if (Math.abs(d) < tiny) d = tiny;
    c = 1 + aa / c; if (Math.abs(c) < tiny) c = tiny;
    d = 1 / d;
    const del = d * c;
    h *= del;
    if (Math.abs(del - 1) < 1e-15) break;
  }
  return h;
}

function regularizedBeta(a: number, b: number, x: number): number {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const front = Math.exp(logGamma(a + b) - logGamma(a) - logGamma(b) + a * Math.log(x) + b * Math.log(1 - x));
  return x < (a + 1) / (a + b + 2) ? (front * betaContinuedFraction(a, b, x)) / a : 1 - (front * betaContinuedFraction(b, a, 1 - x)) / b;
}

/** P(T <= t) for Student's t with `df` degrees of freedom (df > 0, not necessarily whole). */
export function studentTCdf(t: number, df: number): number {
  const tail = 0.5 * regularizedBeta(df / 2, 0.5, df / (df + t * t));
  return t >= 0 ? 1 - tail : tail;
}

/** The t with P(T <= t) = p, for 0.5 <= p < 1. */
export function studentTQuantile(p: number, df: number): number {
  if (!(p >= 0.5 && p < 1) || !(df > 0)) throw new RangeError(`studentTQuantile(${p}, ${df})`);
  let lo = 0;
  let hi = 1;
  while (studentTCdf(hi, df) < p) hi *= 2;
  for (let i = 0; i < 100; i++) {
    const mid = (lo + hi) / 2;
    if (studentTCdf(mid, df) < p) lo = mid; else hi = mid;
  }
  return (lo + hi) / 2;
}
