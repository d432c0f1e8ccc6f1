// The noise floor of a figure, from a run's own per-request samples (rows[].samples): a two-stage
// (cluster) bootstrap of the median (or of the percentile the figure is). Timed passes are resampled with replacement, then requests within
// each chosen pass, so the interval carries the pass-to-pass spread as well as the spread within a
// pass. One pass has no pass-to-pass spread to resample: its floor is unknown, not invented.
import { percentileSorted, sortAscending } from '../bench/stats.js';
import { Rng } from '../util/rng.js';

/** Resamples per interval; the interval is the central 95 %. One place for both. */
export const BOOTSTRAP = { resamples: 2000, level: 0.95, seed: 0x5eed } as const;

export interface MedianInterval {
  /** The statistic on the whole sample: the median, or the percentile asked for. */
  median: number;
  lo: number;
  hi: number;
  passes: number;
  n: number;
}

export type FloorUnknown = { unknown: string };

/**
 * The bootstrap interval of the median of `values`, grouped by `pass` (parallel arrays; null values
 * dropped). Deterministic: the same samples give the same interval.
 */
export function medianInterval(values: ReadonlyArray<number | null>, pass: readonly number[]): MedianInterval | FloorUnknown {
  return percentileInterval(values, pass, 50);
}

/** The same two-stage bootstrap interval for the nearest-rank percentile `p` (50: the median; 99: a tail figure). */
export function percentileInterval(values: ReadonlyArray<number | null>, pass: readonly number[], p: number): MedianInterval | FloorUnknown {
  const median = (sorted: readonly number[]): number => percentileSorted(sorted, p)!;
  const groups = new Map<number, number[]>();
  values.forEach((v, i) => {
    if (v === null || !Number.isFinite(v)) return;
    const p = pass[i] ?? 0;
    const g = groups.get(p);
    if (g) g.push(v); else groups.set(p, [v]);
  });
  const clusters = [...groups.values()];
  const n = clusters.reduce((s, c) => s + c.length, 0);
  if (n === 0) return { unknown: 'no samples' };
  if (clusters.length < 2) return { unknown: `one timed pass (${n} request${n === 1 ? '' : 's'})` };
  const rng = new Rng(BOOTSTRAP.seed, 'median-interval'); // one stream for every percentile: the median's intervals stay as they were
  const pick = (k: number) => Math.min(k - 1, Math.floor(rng.nextFloat() * k));
  const medians = new Float64Array(BOOTSTRAP.resamples);
  const buf: number[] = [];
  for (let b = 0; b < BOOTSTRAP.resamples; b++) {
    buf.length = 0;
    for (let c = 0; c < clusters.length; c++) {
      const cluster = clusters[pick(clusters.length)]!;
      for (let j = 0; j < cluster.length; j++) buf.push(cluster[pick(cluster.length)]!);
    }
    medians[b] = median(sortAscending(buf));
  }
  medians.sort();
  const tail = ((1 - BOOTSTRAP.level) / 2) * 100;
  const all = sortAscending(clusters.flat());
  return {
    median: median(all),
    lo: percentileSorted(Array.from(medians), tail)!,
    hi: percentileSorted(Array.from(medians), 100 - tail)!,
    passes: clusters.length,
    n,
  };
}

/** The interval's half-width on a log scale: ln(hi / lo) / 2 (a relative spread, scale-free); unknown when lo <= 0. */
export function logHalfWidth(iv: MedianInterval): number | null {
  return iv.lo > 0 && iv.hi > 0 ? Math.log(iv.hi / iv.lo) / 2 : null;
}

/** The floor of a comparison: the two runs' half-widths added in quadrature (log scale). */
export function combinedFloor(base: number, next: number): number {
  return Math.hypot(base, next);
}
