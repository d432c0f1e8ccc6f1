// Per-request serving figures of a row, as the serving benchmarks define them, from the same request
// timestamps as the columns (native in-process, the client's clock for an endpoint): TPOT, client-side
// queue time, achieved concurrency and goodput. Pure functions.
import { e2eMs, ttftOf, type TimedRequest } from './metrics.js';
import { summarize, type Distribution } from './stats.js';

/** --goodput bounds (ms); a request counts when it meets every bound given. */
export interface GoodputBounds {
  ttftMs?: number;
  tpotMs?: number;
  e2elMs?: number;
}

export interface LoadFigures {
  requested_concurrency: number;
  /** Σ request time (sent -> last token) / the timed phase's wall time. */
  achieved_concurrency: number | null;
  /** Open loop: the arrival rate asked for (requests/s; 'inf' = all at once; null = closed loop). */
  request_rate: number | 'inf' | null;
  burstiness: number | null;
  requests: number;
  /** Timed requests per second of wall time. */
  request_throughput: number | null;
  /** Per request: (E2E - TTFT) / (n - 1), for requests with at least two tokens. */
  tpot_ms: Distribution;
  /** Per request: scheduled (open loop) or submitted (closed loop) -> sent; time spent waiting in the client. */
  client_queue_ms: Distribution;
  goodput: {
    bounds: GoodputBounds; met: number; total: number; share: number | null; requests_per_s: number | null;
    /** With a tpot bound: requests whose TPOT could not be judged (fewer than two tokens: no TPOT). They
     * count as meeting it, as vLLM counts them, so goodput stays comparable; the row's notes say how many. */
    tpot_unjudged: number;
  } | null;
}

/** TPOT of one request: (E2E - TTFT) / (n - 1); null with fewer than two tokens. */
export function tpotMs(t: TimedRequest): number | null {
  const r = t.result;
  const n = r.tokenMs.length;
  const e = e2eMs(r);
  const f = ttftOf(r);
  return n >= 2 && e !== null && f !== null ? (e - f) / (n - 1) : null;
}

/** Client-side queue time: the request's ready time (scheduled or submitted) -> its enqueue/sent stamp. */
export function queueMs(t: TimedRequest): number | null {
  const ready = t.scheduledMs ?? t.submittedMs;
  return ready === undefined ? null : Math.max(0, t.result.enqueueMs - ready);
}

export function meetsGoodput(t: TimedRequest, b: GoodputBounds): boolean {
  const ttft = ttftOf(t.result);
  const e2e = e2eMs(t.result);
  if (ttft === null || e2e === null) return false;
  if (b.ttftMs !== undefined && ttft > b.ttftMs) return false;
  if (b.e2elMs !== undefined && e2e > b.e2elMs) return false;
  const tpot = tpotMs(t) ?? 0; // one token: no decode time per token (as vLLM counts it)
  return !(b.tpotMs !== undefined && tpot > b.tpotMs);
}

export function loadFigures(
  timed: readonly TimedRequest[], wallMs: number | null, concurrency: number,
  open: { rate: number; burstiness: number } | null, goodput: GoodputBounds | null,
): LoadFigures {
  const tpots: number[] = [];
  const queues: number[] = [];
  let busy = 0;
  for (const t of timed) {
    const tp = tpotMs(t);
    if (tp !== null) tpots.push(tp);
    const q = queueMs(t);
    if (q !== null) queues.push(q);
    const e = e2eMs(t.result);
    if (e !== null) busy += e;
  }
  const wall = wallMs !== null && wallMs > 0 ? wallMs : null;
  const met = goodput ? timed.filter((t) => meetsGoodput(t, goodput)).length : 0;
  const tpotUnjudged = goodput?.tpotMs !== undefined ? timed.filter((t) => tpotMs(t) === null).length : 0;
  return {
    requested_concurrency: concurrency,
    achieved_concurrency: wall !== null ? busy / wall : null,
    request_rate: open ? (Number.isFinite(open.rate) ? open.rate : 'inf') : null,
    burstiness: open ? open.burstiness : null,
    requests: timed.length,
    request_throughput: wall !== null ? (timed.length * 1000) / wall : null,
    tpot_ms: summarize(tpots),
    client_queue_ms: summarize(queues),
    goodput: goodput && {
      bounds: goodput, met, total: timed.length,
      share: timed.length ? met / timed.length : null,
      requests_per_s: wall !== null ? (met * 1000) / wall : null,
      tpot_unjudged: tpotUnjudged,
    },
  };
}
