// A row's per-request samples for the JSON report (`rows[].samples`): what `bench compare` needs to put a
// noise floor under each figure. Column form, one entry per timed request, in pass then session order.
import { percentile } from './stats.js';
import { classifyGaps, requestDecodeTokS, ttftOf, type TimedRequest } from './metrics.js';

export interface RowSamples {
  /** The timed pass each request ran in, 0 = the row's first timed pass (open loop: request i is in pass floor(i / concurrency)). */
  pass: number[];
  ttft_ms: Array<number | null>;
  /** The request's own decode rate: (tokens - 1) * 1000 / (last token - first token). */
  decode_tok_s: Array<number | null>;
  /** Nearest-rank p50 / p99 of the request's decode-only gaps (the gaps itl_p50_ms / itl_p99_ms pool). */
  itl_p50_ms: Array<number | null>;
  itl_p99_ms: Array<number | null>;
}

/** The runner's number of a row's first timed pass (the warm-up passes come before it): `pass` in the
 * JSON's samples and in PREFIX.jsonl counts the timed passes from 0. */
export function firstTimedPass(timed: readonly TimedRequest[]): number {
  return Math.min(...timed.map((t) => t.pass));
}

/** The samples of a row's timed requests; null for a row without any. */
export function rowSamples(timed: readonly TimedRequest[]): RowSamples | null {
  if (timed.length === 0) return null;
  const first = firstTimedPass(timed);
  const gaps = classifyGaps(timed.map((t) => t.result));
  return {
    pass: timed.map((t) => t.pass - first),
    ttft_ms: timed.map((t) => ttftOf(t.result)),
    decode_tok_s: timed.map((t) => requestDecodeTokS(t.result)),
    itl_p50_ms: gaps.map((g) => percentile(g.decode, 50)),
    itl_p99_ms: gaps.map((g) => percentile(g.decode, 99)),
  };
}
