// Row figures from the engine's native timestamps. Pure functions: RequestResults in, numbers out.
// Every definition here is the one docs/bench.md states; change both together.
import type { RequestResult } from '../engine/types.js';
import { summarize, unionLength, type Distribution } from './stats.js';

/** One timed request with its place in the closed loop. */
export interface TimedRequest {
  /** Pass index counted from the cell's first warm-up pass. */
  pass: number;
  session: number;
  result: RequestResult;
  /** When the request was handed to the engine (engine clock, ms); before its enqueue stamp. */
  submittedMs?: number;
  /** Open loop: when its arrival was scheduled (engine clock, ms). */
  scheduledMs?: number;
}

export interface RowFigures {
  /** enqueue -> last token of the cell's first request (null when it produced no token). */
  firstCallMs: number | null;
  /** Mean over timed requests of (first token - enqueue). */
  ttftMs: number | null;
  /** isl * 1000 / ttftMs. */
  prefillTokS: number | null;
  itlP50Ms: number | null;
  itlP99Ms: number | null;
  prefillChunkP50Ms: number | null;
  prefillChunkMaxMs: number | null;
  /** decodeTokens * 1000 / decodeWindowMs. */
  decodeTokS: number | null;
  decodeTokens: number;
  /** The time at least one request was decoding (ms); null when no request decoded (every osl = 1): not measured, not 0. */
  decodeWindowMs: number | null;
  generatedTokens: number;
  /** Timed requests that generated fewer (or more) than osl tokens. */
  wrongLength: number;
  minGenerated: number | null;
  maxGenerated: number | null;
  /** Decode gaps that overlapped another request's prefill (or its own recompute after a preemption), excluded from the itl figures. */
  mixedGaps: number;
  /** Of those, the gaps of a preempted request that held its own recompute prefill. */
  recomputeGaps: number;
  /** Preemptions of the timed requests (from their results). */
  preemptions: number;
  cachedPromptTokens: number;
  /** Each timed request's gaps, split as the itl figures split them (classifyGaps), in the order given:
   * the JSON's per-request samples (row-samples.ts) read them rather than split them again. */
  requestGaps: RequestGaps[];
  distributions: {
    ttft_ms: Distribution;
    /** Decode-only inter-token gaps (what itl_p50_ms/itl_p99_ms read). */
    itl_ms: Distribution;
    /** Inter-token gaps that overlapped some other request's prefill (kept out of itl_ms). */
    itl_mixed_ms: Distribution;
    /** One sample per (request, prefill step it took part in). */
    prefill_chunk_ms: Distribution;
    /** Per request: the sum of its prefill step walls. */
    prefill_ms: Distribution;
    /** Per request: enqueue -> last token. */
    e2e_ms: Distribution;
    /** Per request: (tokens - 1) * 1000 / (last token - first token). */
    request_decode_tok_s: Distribution;
  };
}

/** End-to-end wall of a request: enqueue -> last token; null without tokens. */
export function e2eMs(r: RequestResult): number | null {
  const n = r.tokenMs.length;
  return n > 0 ? r.tokenMs[n - 1]! - r.enqueueMs : null;
}

/** One request's decode rate: (tokens - 1) * 1000 / (last token - first token); null under two tokens or a zero span. */
export function requestDecodeTokS(r: RequestResult): number | null {
  const n = r.tokenMs.length;
  if (n < 2) return null;
  const span = r.tokenMs[n - 1]! - r.tokenMs[0]!;
  return span > 0 ? ((n - 1) * 1000) / span : null;
}

export function ttftOf(r: RequestResult): number | null {
  return r.tokenMs.length > 0 ? r.tokenMs[0]! - r.enqueueMs : null;
}

/** One request's inter-token gaps, split into decode-only gaps and gaps that overlapped a prefill. */
export interface RequestGaps {
  decode: number[];
  mixed: number[];
  /** How many of `mixed` held the request's own recompute prefill (it had been preempted). */
  recompute: number;
}

/**
 * When a request was prefilling, for the gaps of the requests beside it: [enqueue, first token], and
 * for each preemption (after it had generated g tokens) [re-admission, token g]: its recompute ran
 * from its re-admission on (before it, it only waited, while the others decoded in smaller batches).
 * Without the re-admission time (an older addon): from token g - 1. And its own gaps that held a
 * recompute: the gap before token g, for each preemption with g >= 1.
 */
function prefillSpans(r: RequestResult): { spans: Array<readonly [number, number]>; ownGaps: Set<number> } {
  const t = r.tokenMs;
  const spans: Array<readonly [number, number]> = [[r.enqueueMs, t.length ? t[0]! : Number.POSITIVE_INFINITY]];
  const ownGaps = new Set<number>();
  (r.preemptedAfter ?? []).forEach((g, i) => {
    const end = g < t.length ? t[g]! : Number.POSITIVE_INFINITY;
    const start = r.readmitMs?.[i] ?? (g >= 1 && g - 1 < t.length ? t[g - 1]! : r.enqueueMs);
    spans.push([start, end]);
    if (g >= 1 && g < t.length) ownGaps.add(g);
  });
  return { spans, ownGaps };
}

/**
 * Splits every request's gaps t[k] - t[k-1] (k >= 1). While another timed request is prefilling (its
 * prompt, or its recompute after a preemption: prefillSpans), a gap may contain a prefill step, so that
 * gap is mixed, not decode-only; so is a request's own gap that held its recompute. One entry per
 * request, in the order given.
 */
export function classifyGaps(results: readonly RequestResult[]): RequestGaps[] {
  const prefills = results.map(prefillSpans);
  // A span [s, e] overlaps the gap (a, b) when s < b and e > a. Over spans with s <= e, those with e <= a
  // all have s < b, so the overlapping ones number #(s < b) - #(e <= a): two binary searches a gap over
  // every request's spans, minus the request's own (a handful), instead of a scan of all requests'
  // spans for each gap (quadratic in the requests: 11 s for 1000 requests of 1024 tokens). A span
  // with s > e (not one the engine reports) is tested directly.
  const starts: number[] = [];
  const ends: number[] = [];
  const odd: Array<{ q: number; s: number; e: number }> = [];
  prefills.forEach((p, q) => {
    for (const [s, e] of p.spans) {
      if (s <= e) { starts.push(s); ends.push(e); } else odd.push({ q, s, e });
    }
  });
  const sortedStarts = Float64Array.from(starts).sort();
  const sortedEnds = Float64Array.from(ends).sort();
  const overlapping = (a: number, b: number): number => countBelow(sortedStarts, b, false) - countBelow(sortedEnds, a, true);
  return results.map((r, idx) => {
    const out: RequestGaps = { decode: [], mixed: [], recompute: 0 };
    const mine = prefills[idx]!;
    for (let k = 1; k < r.tokenMs.length; k++) {
      const a = r.tokenMs[k - 1]!;
      const b = r.tokenMs[k]!;
      const own = mine.ownGaps.has(k);
      let mixed = own;
      if (!mixed) {
        let ownOverlaps = 0;
        for (const [s, e] of mine.spans) if (s <= e && s < b && e > a) ownOverlaps++;
        mixed = overlapping(a, b) - ownOverlaps > 0 || odd.some((o) => o.q !== idx && o.s < b && o.e > a);
      }
      if (own) out.recompute++;
      (mixed ? out.mixed : out.decode).push(b - a);
    }
    return out;
  });
}

/** How many of the ascending values are < x (or <= x with `orEqual`). */
function countBelow(sorted: Float64Array, x: number, orEqual: boolean): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (orEqual ? sorted[mid]! <= x : sorted[mid]! < x) lo = mid + 1; else hi = mid;
  }
  return lo;
}

export function computeRowFigures(
  isl: number,
  osl: number,
  timed: readonly TimedRequest[],
  firstCall: RequestResult | null,
): RowFigures {
  const results = timed.map((t) => t.result);

  const ttfts: number[] = [];
  for (const r of results) {
    const t = ttftOf(r);
    if (t !== null) ttfts.push(t);
  }

  const gaps = classifyGaps(results);
  const decodeGaps = gaps.flatMap((g) => g.decode);
  const mixedGaps = gaps.flatMap((g) => g.mixed);
  const recomputeGaps = gaps.reduce((n, g) => n + g.recompute, 0);
  const preemptions = results.reduce((n, r) => n + (r.preemptedAfter?.length ?? 0), 0);

  const chunks: number[] = [];
  const prefillSums: number[] = [];
  const e2es: number[] = [];
  const perRequestDecode: number[] = [];
  const windows: Array<[number, number]> = [];
  let decodeTokens = 0;
  let generated = 0;
  let wrongLength = 0;
  let minGen: number | null = null;
  let maxGen: number | null = null;
  let cached = 0;
  for (const r of results) {
    // Every prefill step's wall is a chunk sample; the request's prefill time (the compute part of its
    // TTFT) sums only those up to its first token, not the recomputes after a later preemption.
    let sum = 0;
    const toFirst = r.prefillChunksToFirst ?? r.prefillChunkMs.length;
    r.prefillChunkMs.forEach((c, i) => { chunks.push(c); if (i < toFirst) sum += c; });
    if (toFirst > 0 && r.prefillChunkMs.length) prefillSums.push(sum);
    const e = e2eMs(r);
    if (e !== null) e2es.push(e);
    const n = r.tokenMs.length;
    generated += r.tokens.length;
    if (r.tokens.length !== osl) wrongLength++;
    minGen = minGen === null ? r.tokens.length : Math.min(minGen, r.tokens.length);
    maxGen = maxGen === null ? r.tokens.length : Math.max(maxGen, r.tokens.length);
    cached += r.cachedPromptTokens;
    if (n >= 2) {
      const first = r.tokenMs[0]!;
      const last = r.tokenMs[n - 1]!;
      decodeTokens += n - 1;
      windows.push([first, last]);
      const rate = requestDecodeTokS(r);
      if (rate !== null) perRequestDecode.push(rate);
    }
  }
  const decodeWindowMs = unionLength(windows);

  const ttft = summarize(ttfts);
  const itl = summarize(decodeGaps);
  const chunk = summarize(chunks);
  const ttftMs = ttfts.length === results.length && results.length > 0 ? ttft.mean : null;
  const firstE2e = firstCall ? e2eMs(firstCall) : null;

  return {
    firstCallMs: firstE2e,
    ttftMs,
    prefillTokS: ttftMs !== null && ttftMs > 0 ? (isl * 1000) / ttftMs : null,
    itlP50Ms: itl.p50,
    itlP99Ms: itl.p99,
    prefillChunkP50Ms: chunk.p50,
    prefillChunkMaxMs: chunk.max,
    decodeTokS: decodeTokens > 0 && decodeWindowMs > 0 ? (decodeTokens * 1000) / decodeWindowMs : null,
    decodeTokens,
    decodeWindowMs: windows.length > 0 ? decodeWindowMs : null,
    generatedTokens: generated,
    wrongLength,
    minGenerated: minGen,
    maxGenerated: maxGen,
    mixedGaps: mixedGaps.length,
    recomputeGaps,
    preemptions,
    cachedPromptTokens: cached,
    requestGaps: gaps,
    distributions: {
      ttft_ms: ttft,
      itl_ms: itl,
      itl_mixed_ms: summarize(mixedGaps),
      prefill_chunk_ms: chunk,
      prefill_ms: summarize(prefillSums),
      e2e_ms: summarize(e2es),
      request_decode_tok_s: summarize(perRequestDecode),
    },
  };
}

/** speedup_vs_c1 = decode_tok_s / the same cell's c=1 decode_tok_s; null when either is missing. */
export function speedupVsC1(decodeTokS: number | null, c1DecodeTokS: number | null): number | null {
  if (decodeTokS === null || c1DecodeTokS === null || !(c1DecodeTokS > 0)) return null;
  return decodeTokS / c1DecodeTokS;
}

/** batching_efficiency = speedup_vs_c1 / concurrency. */
export function batchingEfficiency(speedup: number | null, concurrency: number): number | null {
  return speedup === null ? null : speedup / concurrency;
}

/**
 * Steady-state aggregate decode rate of streams that run together: the window starts when the
 * last stream has its first token (every stream is decoding) and ends when the first stream emits
 * its last; tokens emitted inside the window, over its length. Streams whose prefills or tails do
 * not overlap are not counted as decode. Token times in ms; null without a window.
 */
export function steadyDecodeRate(streams: readonly (readonly number[])[]): number | null {
  if (streams.length === 0 || streams.some((t) => t.length < 2)) return null;
  const start = Math.max(...streams.map((t) => t[0]!));
  const end = Math.min(...streams.map((t) => t[t.length - 1]!));
  if (!(end > start)) return null;
  let n = 0;
  for (const t of streams) for (const x of t) if (x > start && x <= end) n++;
  return (n * 1000) / (end - start);
}
