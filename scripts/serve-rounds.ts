// The arithmetic of bench:serve (scripts/serve-bench.ts) over its round records, the order of its
// rounds, and the advice on their count (bench:tokenize-stall's too), apart from the servers so that
// tests can hold them. Every figure that compares two sides (HTTP / in-process, the endpoint
// sweep / in-process, HTTP TTFT - in-process TTFT) is taken within each round and the median of those
// per-round figures is the one printed: a median of one side over a median of the other pairs one
// round's measurement with another round's, and this machine's speed moves between rounds
// (docs/performance.md, "Serving over HTTP", the forty-second session's correction). Until then the
// table printed the ratio of the medians (and the difference of the TTFT medians), and the endpoint
// sweep always ran third in a round.
import { median, pairedRatios, roundOrder } from './bench-model.js';

/** What one in-process or HTTP measurement of one concurrency gave in one round. */
export interface ServeFigures {
  /** Steady-state aggregate decode tok/s (the window where all c streams decode, as bench:batch). */
  steadyTokS: number;
  /** The sweep's decode_tok_s (computeRowFigures). */
  decodeTokS: number;
  /** Mean TTFT, ms. */
  ttftMs: number;
  /** First token of the last stream minus that of the first, ms. */
  spreadMs: number;
  /** HTTP only: the median over the requests of the client's TTFT minus the engine's own TTFT of the same request, ms. */
  pairedTtftMs?: number;
}

/** What one endpoint-sweep measurement (`bench --endpoint`'s client) gave in one round. */
export interface EndpointFigures { decodeTokS: number; ttftMs: number }

/** The three measurements of a bench:serve round. */
export const SERVE_SIDES = ['in-process', 'http', 'endpoint'] as const;
export type ServeSide = (typeof SERVE_SIDES)[number];

/**
 * The order of bench:serve's round r: the three measurements rotated by r (in-process, http,
 * endpoint; http, endpoint, in-process; endpoint, in-process, http), so over a multiple of 3 rounds
 * each takes each slot equally often. Until the forty-second session in-process and HTTP alternated
 * and the endpoint sweep was always third.
 */
export function serveRoundOrder(r: number): ServeSide[] {
  return roundOrder(SERVE_SIDES, r);
}

/** '' when `rounds` rounds give each of `n` rotated measurements each slot equally often, else the advice to say so. */
export function roundsAdvice(rounds: number, n: number, what = 'measurements'): string {
  if (n <= 1 || rounds % n === 0) return '';
  const lower = Math.floor(rounds / n) * n;
  const upper = lower + n;
  const picks = lower >= 5 ? `${lower} or ${upper}` : `${upper}`;
  return `${rounds} rounds is not a multiple of ${n}, so the ${n} ${what} do not take each slot equally often: use ${picks}`;
}

/** A figure paired by round: each round's own value, and their median (the figure). */
export interface Paired { median: number; rounds: number[] }

/** The median over the rounds of num[i] / den[i]. */
export function pairedRatio(num: readonly number[], den: readonly number[]): Paired {
  if (num.length === 0) throw new Error('pairedRatio: no rounds');
  const rounds = pairedRatios(num, den);
  return { median: median(rounds), rounds };
}

/** The median over the rounds of a[i] - b[i]. */
export function pairedDelta(a: readonly number[], b: readonly number[]): Paired {
  if (a.length !== b.length || a.length === 0) throw new Error(`pairedDelta: ${a.length} against ${b.length} rounds`);
  const rounds = a.map((x, i) => x - b[i]!);
  return { median: median(rounds), rounds };
}

/** One concurrency's figures, as the JSON keeps them (the keys before the forty-second session kept, with their meaning). */
export interface ServeSummary {
  concurrency: number;
  // Medians over the rounds of each side's own figure.
  inprocess_steady_tok_s: number;
  http_steady_tok_s: number;
  inprocess_decode_tok_s: number;
  http_decode_tok_s: number;
  inprocess_ttft_ms: number;
  http_ttft_ms: number;
  inprocess_spread_ms: number;
  http_spread_ms: number;
  // Paired by round: the median over the rounds of each round's own http / in-process (http - in-process), and those per-round values.
  median_round_steady_ratio: number;
  median_round_decode_ratio: number;
  median_round_ttft_delta_ms: number;
  round_steady_ratios: number[];
  round_decode_ratios: number[];
  round_ttft_deltas_ms: number[];
  /** The median over the rounds of each round's paired TTFT overhead (itself a median over that round's requests). */
  http_paired_ttft_overhead_ms: number;
  rounds: { inproc: ServeFigures[]; http: ServeFigures[]; endpoint: EndpointFigures[] };
  endpoint_sweep: {
    /** Medians over the rounds of the endpoint sweep's own figures. */
    decode_tok_s: number;
    ttft_ms: number;
    /** Paired by round: the median over the rounds of each round's endpoint / in-process (decode_tok_s, TTFT), and those per-round values. */
    median_round_decode_ratio: number;
    median_round_ttft_ratio: number;
    round_decode_ratios: number[];
    round_ttft_ratios: number[];
  };
}

/** What each figure of the JSON is, by its rule. */
export const SERVE_FIGURE_RULES = {
  'inprocess_{steady_tok_s,decode_tok_s,ttft_ms,spread_ms}, http_{steady_tok_s,decode_tok_s,ttft_ms,spread_ms}, endpoint_sweep.decode_tok_s, endpoint_sweep.ttft_ms': 'the median over the rounds of that side\'s own figure',
  'median_round_*_ratio': 'the median over the rounds of each round\'s own http / in-process (round_*_ratios: those per-round values)',
  median_round_ttft_delta_ms: 'the median over the rounds of each round\'s own http TTFT - in-process TTFT (round_ttft_deltas_ms)',
  http_paired_ttft_overhead_ms: 'the median over the rounds of each round\'s median over its requests of the client\'s TTFT - the engine\'s own TTFT of that request',
  'endpoint_sweep.median_round_*_ratio': 'the median over the rounds of each round\'s own endpoint sweep / in-process (endpoint_sweep.round_*_ratios)',
  round_orders: 'each round\'s order of the three measurements (rotated by one every round), the same for every concurrency',
} as const;

/** One concurrency's summary from its rounds (inproc[i], http[i] and endpoint[i] from round i). */
export function summarizeServe(concurrency: number, inproc: readonly ServeFigures[], http: readonly ServeFigures[], endpoint: readonly EndpointFigures[]): ServeSummary {
  if (inproc.length === 0 || http.length !== inproc.length || endpoint.length !== inproc.length) {
    throw new Error(`summarizeServe: ${inproc.length} in-process, ${http.length} HTTP and ${endpoint.length} endpoint rounds`);
  }
  const med = (xs: readonly ServeFigures[], k: 'steadyTokS' | 'decodeTokS' | 'ttftMs' | 'spreadMs') => median(xs.map((x) => x[k]));
  const steady = pairedRatio(http.map((x) => x.steadyTokS), inproc.map((x) => x.steadyTokS));
  const decode = pairedRatio(http.map((x) => x.decodeTokS), inproc.map((x) => x.decodeTokS));
  const ttft = pairedDelta(http.map((x) => x.ttftMs), inproc.map((x) => x.ttftMs));
  const epDecode = pairedRatio(endpoint.map((x) => x.decodeTokS), inproc.map((x) => x.decodeTokS));
  const epTtft = pairedRatio(endpoint.map((x) => x.ttftMs), inproc.map((x) => x.ttftMs));
  return {
    concurrency,
    inprocess_steady_tok_s: med(inproc, 'steadyTokS'), http_steady_tok_s: med(http, 'steadyTokS'),
    inprocess_decode_tok_s: med(inproc, 'decodeTokS'), http_decode_tok_s: med(http, 'decodeTokS'),
    inprocess_ttft_ms: med(inproc, 'ttftMs'), http_ttft_ms: med(http, 'ttftMs'),
    inprocess_spread_ms: med(inproc, 'spreadMs'), http_spread_ms: med(http, 'spreadMs'),
    median_round_steady_ratio: steady.median, median_round_decode_ratio: decode.median, median_round_ttft_delta_ms: ttft.median,
    round_steady_ratios: steady.rounds, round_decode_ratios: decode.rounds, round_ttft_deltas_ms: ttft.rounds,
    http_paired_ttft_overhead_ms: median(http.map((x) => x.pairedTtftMs ?? NaN)),
    rounds: { inproc: [...inproc], http: [...http], endpoint: [...endpoint] },
    endpoint_sweep: {
      decode_tok_s: median(endpoint.map((x) => x.decodeTokS)), ttft_ms: median(endpoint.map((x) => x.ttftMs)),
      median_round_decode_ratio: epDecode.median, median_round_ttft_ratio: epTtft.median,
      round_decode_ratios: epDecode.rounds, round_ttft_ratios: epTtft.rounds,
    },
  };
}

/** The table's column heads (the rows: formatServeRows). */
export const SERVE_TABLE_HEAD =
  `${'c'.padEnd(3)}${'steady tok/s in-proc'.padStart(22)}${'http'.padStart(8)}${'ratio'.padStart(7)}${'sweep tok/s in-proc'.padStart(21)}${'http'.padStart(8)}${'ratio'.padStart(7)}` +
  `${'TTFT ms in-proc'.padStart(17)}${'http'.padStart(9)}${'delta'.padStart(8)}${'http spread ms'.padStart(16)}`;

/** What the table's columns are, printed above it. */
export const SERVE_TABLE_RULE =
  'tok/s and ms: medians over the rounds; ratio: the median over the rounds of each round\'s own http / in-process; ' +
  'delta: the median over the rounds of each round\'s own http TTFT - in-process TTFT (the per-round values below each row)';

/** One concurrency's table row, its per-round figures and its endpoint-sweep line. */
export function formatServeRows(s: ServeSummary): string[] {
  const list = (xs: readonly number[], digits: number) => xs.map((x) => x.toFixed(digits)).join(' ');
  const ep = s.endpoint_sweep;
  return [
    `${String(s.concurrency).padEnd(3)}${s.inprocess_steady_tok_s.toFixed(1).padStart(22)}${s.http_steady_tok_s.toFixed(1).padStart(8)}` +
      `${s.median_round_steady_ratio.toFixed(3).padStart(7)}${s.inprocess_decode_tok_s.toFixed(1).padStart(21)}` +
      `${s.http_decode_tok_s.toFixed(1).padStart(8)}${s.median_round_decode_ratio.toFixed(3).padStart(7)}` +
      `${s.inprocess_ttft_ms.toFixed(1).padStart(17)}${s.http_ttft_ms.toFixed(1).padStart(9)}${s.median_round_ttft_delta_ms.toFixed(2).padStart(8)}` +
      `${s.http_spread_ms.toFixed(0).padStart(16)}`,
    `   per round: steady ratios ${list(s.round_steady_ratios, 3)}; sweep ratios ${list(s.round_decode_ratios, 3)}; ` +
      `TTFT deltas ${list(s.round_ttft_deltas_ms, 2)} ms; ` +
      `paired TTFT overhead (median ${s.http_paired_ttft_overhead_ms.toFixed(2)} ms) ${list(s.rounds.http.map((x) => x.pairedTtftMs ?? NaN), 2)} ms`,
    `   endpoint sweep (bench --endpoint's client, text prompts; medians ${ep.decode_tok_s.toFixed(1)} decode_tok_s, ${ep.ttft_ms.toFixed(1)} ms TTFT): ` +
      `decode_tok_s x${ep.median_round_decode_ratio.toFixed(3)} in-process (per round ${list(ep.round_decode_ratios, 3)}), ` +
      `TTFT x${ep.median_round_ttft_ratio.toFixed(3)} in-process (per round ${list(ep.round_ttft_ratios, 3)}): medians of each round's own endpoint / in-process`,
  ];
}
