// Open-loop arrivals (--request-rate, --burstiness), as the serving benchmarks draw them: the gaps
// between requests are gamma distributed with shape = burstiness and mean 1/rate (burstiness 1 is a
// Poisson process; below 1 burstier, above 1 more even); an infinite rate sends every request at once.
// Seeded: the schedule is a pure function of (seed, stream). A row's timed requests take the schedule of
// its cell (cellArrivalOffsetsMs), not of its concurrency, so every row of a cell sees the same arrivals.
import { Rng } from '../util/rng.js';

/** A gamma(shape, 1) draw (Marsaglia and Tsang; shape < 1 by the boost gamma(shape + 1) * U^(1/shape)). */
export function gammaDraw(rng: Rng, shape: number): number {
  if (shape < 1) return gammaDraw(rng, shape + 1) * Math.pow(rng.nextOpenFloat(), 1 / shape);
  const d = shape - 1 / 3;
  const c = 1 / Math.sqrt(9 * d);
  for (;;) {
    let x: number;
    let v: number;
    do {
      x = rng.nextNormal();
      v = 1 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const u = rng.nextOpenFloat();
    if (u < 1 - 0.0331 * x * x * x * x) return d * v;
    if (Math.log(u) < 0.5 * x * x + d * (1 - v + Math.log(v))) return d * v;
  }
}

/** Offsets (ms from the phase start) of `n` arrivals at `rate` requests/s; the first arrives at 0. */
export function arrivalOffsetsMs(n: number, rate: number, burstiness: number, seed: number, stream: string): number[] {
  const out: number[] = [];
  if (!Number.isFinite(rate)) return Array.from({ length: n }, () => 0);
  const rng = new Rng(seed, `arrivals:${stream}`);
  const scaleMs = 1000 / (rate * burstiness); // mean gap = shape * scale = 1000 / rate
  let t = 0;
  for (let i = 0; i < n; i++) {
    out.push(t);
    t += gammaDraw(rng, burstiness) * scaleMs;
  }
  return out;
}

/**
 * The arrival offsets of a row's `n` timed requests: one sequence per (seed, cell, rate, burstiness), the
 * same at every concurrency, so the rows of a cell (and the c=1 row their speedup_vs_c1 divides by) are
 * measured under the same arrival times. The draws are sequential, so a row with fewer requests sees the
 * first `n` arrivals of the same sequence.
 */
export function cellArrivalOffsetsMs(
  n: number, load: { rate: number; burstiness: number }, seed: number, cell: { isl: number; osl: number },
): number[] {
  return arrivalOffsetsMs(n, load.rate, load.burstiness, seed, `timed:${cell.isl}:${cell.osl}`);
}
