// Summary statistics for the sweep. One percentile method everywhere: nearest rank.

/** Summary of a sample: count, mean, nearest-rank percentiles, extremes. Fields are null for an empty sample. */
export interface Distribution {
  n: number;
  mean: number | null;
  p50: number | null;
  p90: number | null;
  p99: number | null;
  min: number | null;
  max: number | null;
}

/** The 1-based rank of the nearest-rank p-th percentile of n ascending samples (n >= 1). */
export function nearestRank(n: number, p: number): number {
  if (!(p >= 0 && p <= 100)) throw new RangeError(`percentile out of range: ${p}`);
  return Math.min(n, Math.max(1, Math.ceil((p / 100) * n)));
}

/**
 * Nearest-rank percentile of an ascending-sorted sample: the value at rank ceil(p/100 * n)
 * (1-based), with rank clamped to [1, n]. p50 of [1,2,3,4] is 2, p99 of 100 values is the 99th.
 * Returns null for an empty sample.
 */
export function percentileSorted(sorted: readonly number[], p: number): number | null {
  const n = sorted.length;
  if (n === 0) return null;
  return sorted[nearestRank(n, p) - 1]!;
}

export function percentile(values: readonly number[], p: number): number | null {
  return percentileSorted(sortAscending(values), p);
}

export function sortAscending(values: readonly number[]): number[] {
  // Typed-array sort is numeric (the default Array sort compares strings).
  return Array.from(Float64Array.from(values).sort());
}

export function mean(values: readonly number[]): number | null {
  if (values.length === 0) return null;
  let s = 0;
  for (const v of values) s += v;
  return s / values.length;
}

export function summarize(values: readonly number[]): Distribution {
  const sorted = sortAscending(values);
  const n = sorted.length;
  return {
    n,
    mean: mean(sorted),
    p50: percentileSorted(sorted, 50),
    p90: percentileSorted(sorted, 90),
    p99: percentileSorted(sorted, 99),
    min: n ? sorted[0]! : null,
    max: n ? sorted[n - 1]! : null,
  };
}

/** Total length of the union of closed intervals [start, end] (end >= start). */
export function unionLength(intervals: ReadonlyArray<readonly [number, number]>): number {
  const sorted = intervals.filter(([a, b]) => b > a).slice().sort((x, y) => x[0] - y[0]);
  let total = 0;
  let curStart = Number.NaN;
  let curEnd = Number.NaN;
  for (const [a, b] of sorted) {
    if (Number.isNaN(curStart)) { curStart = a; curEnd = b; continue; }
    if (a <= curEnd) {
      if (b > curEnd) curEnd = b;
    } else {
      total += curEnd - curStart;
      curStart = a;
      curEnd = b;
    }
  }
  if (!Number.isNaN(curStart)) total += curEnd - curStart;
  return total;
}
