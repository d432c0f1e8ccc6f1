// A row's per-request samples for the JSON report (`rows[].samples`): what `bench compare` needs to put a
// noise floor under each figure. Column form, one entry per timed request, in pass then session order.
import { percentile } from './stats.js';
import { requestDecodeTokS, ttftOf, type RequestGaps, type TimedRequest } from './metrics.js';

export interface RowSamples {
  /** The timed pass each request ran in, 0 = the row's first timed pass (open loop: request i is in pass floor(i / concurrency)). */
  pass: number[];
  ttft_ms: Array<number | null>;
  /** The request's own decode rate: (tokens - 1) * 1000 / (last token - first token). */
  decode_tok_s: Array<number | null>;
  /** Nearest-rank p50 / p99 of the request's decode-only gaps (the gaps itl_p50_ms / itl_p99_ms pool). */
  itl_p50_ms: Array<number | null>;
  itl_p99_ms: Array<number | null>;
  /** A gap's bin is round(log2(gap in ms) x this): a bin spans 0.54 %, its value is 2^(bin / this) ms. */
  itl_bins_per_octave: number;
  /**
   * Each timed pass's decode-only gaps (those itl_p50_ms / itl_p99_ms pool), as [bin, count] pairs in
   * ascending bin order; entry p is the pass numbered p in `pass`. Not one entry per request: a pass's
   * pooled gaps are what `bench compare` draws to put a floor under the pooled ITL figures, and a
   * histogram keeps a row's size bounded by the spread of its gaps, not by their number.
   */
  itl_gap_bins: Array<Array<[number, number]>>;
}

/** The resolution of `itl_gap_bins`: 128 bins an octave, 0.54 % apart (a nearest-rank percentile read
 * from them is within 0.27 % of the gaps' own). */
export const ITL_BINS_PER_OCTAVE = 128;

/** The smallest gap a bin tells apart (ms); shorter ones (two tokens in one chunk) share its bin. */
const SMALLEST_BINNED_GAP_MS = 1e-3;

export const gapBin = (ms: number): number => Math.round(Math.log2(Math.max(ms, SMALLEST_BINNED_GAP_MS)) * ITL_BINS_PER_OCTAVE);

export const binValueMs = (bin: number, binsPerOctave: number): number => 2 ** (bin / binsPerOctave);

/** Gaps as [bin, count] pairs, ascending. */
export function gapHistogram(gaps: Iterable<number>): Array<[number, number]> {
  const counts = new Map<number, number>();
  for (const g of gaps) {
    const b = gapBin(g);
    counts.set(b, (counts.get(b) ?? 0) + 1);
  }
  return [...counts.entries()].sort((x, y) => x[0] - y[0]);
}

/** The runner's number of a row's first timed pass (the warm-up passes come before it): `pass` in the
 * JSON's samples and in PREFIX.jsonl counts the timed passes from 0. */
export function firstTimedPass(timed: readonly TimedRequest[]): number {
  return Math.min(...timed.map((t) => t.pass));
}

/** The samples of a row's timed requests, with their gaps as the row's figures split them
 * (RowFigures.requestGaps: one entry per request, in the same order); null for a row without any. */
export function rowSamples(timed: readonly TimedRequest[], gaps: readonly RequestGaps[]): RowSamples | null {
  if (timed.length === 0) return null;
  if (gaps.length !== timed.length) throw new Error(`internal: ${gaps.length} gap splits for ${timed.length} timed requests`);
  const first = firstTimedPass(timed);
  const pass = timed.map((t) => t.pass - first);
  const byPass: number[][] = Array.from({ length: pass.reduce((m, p) => Math.max(m, p), 0) + 1 }, () => []);
  gaps.forEach((g, i) => { for (const v of g.decode) byPass[pass[i]!]!.push(v); });
  return {
    pass,
    ttft_ms: timed.map((t) => ttftOf(t.result)),
    decode_tok_s: timed.map((t) => requestDecodeTokS(t.result)),
    itl_p50_ms: gaps.map((g) => percentile(g.decode, 50)),
    itl_p99_ms: gaps.map((g) => percentile(g.decode, 99)),
    itl_bins_per_octave: ITL_BINS_PER_OCTAVE,
    itl_gap_bins: byPass.map(gapHistogram),
  };
}
