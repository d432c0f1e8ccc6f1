// The pure parts of bench:serve (scripts/serve-bench.ts) and bench:tokenize-stall
// (scripts/tokenize-stall-bench.ts), in scripts/serve-rounds.ts: the order of a round, and the figures
// the table prints from the round records. No server runs and nothing is timed.
import { describe, expect, it } from 'vitest';
import {
  formatServeRows, pairedDelta, pairedRatio, roundsAdvice, SERVE_SIDES, serveRoundOrder, summarizeServe,
  type EndpointFigures, type ServeFigures,
} from '../scripts/serve-rounds.js';
import { roundOrder } from '../scripts/bench-model.js';

/** Every item takes every slot exactly once over `orders` (as many orders as items). */
function expectEachSlotOnce(orders: readonly (readonly string[])[], items: readonly string[]): void {
  expect(orders).toHaveLength(items.length);
  for (const o of orders) expect([...o].sort()).toEqual([...items].sort());
  for (let slot = 0; slot < items.length; slot++) expect(new Set(orders.map((o) => o[slot])).size).toBe(items.length);
}

describe('the order of a round', () => {
  it('bench:serve rotates in-process, HTTP and the endpoint sweep, so over 3 rounds each takes each slot (the endpoint sweep is not always third)', () => {
    const orders = [0, 1, 2].map((r) => serveRoundOrder(r));
    expectEachSlotOnce(orders, SERVE_SIDES);
    expect(orders.map((o) => o[2])).not.toEqual(['endpoint', 'endpoint', 'endpoint']);
    expect(orders).toEqual([['in-process', 'http', 'endpoint'], ['http', 'endpoint', 'in-process'], ['endpoint', 'in-process', 'http']]);
    // The cycle repeats: 6 rounds give each side each slot twice.
    expect(serveRoundOrder(3)).toEqual(serveRoundOrder(0));
  });

  it('bench:tokenize-stall rotates its three configurations, so the middle one does not keep the middle slot', () => {
    const configs = ['0', '2', '2, no text sent'];
    const orders = [0, 1, 2].map((r) => roundOrder(configs, r));
    expectEachSlotOnce(orders, configs);
    expect(orders.map((o) => o[1])).not.toEqual(['2', '2', '2']);
    expect(roundOrder(configs, 3)).toEqual(configs);
  });

  it('advises a multiple of the number of measurements when --rounds is not one', () => {
    expect(roundsAdvice(6, 3)).toBe('');
    expect(roundsAdvice(9, 3)).toBe('');
    expect(roundsAdvice(7, 3)).toContain('use 6 or 9');
    expect(roundsAdvice(5, 3)).toContain('use 6');
    expect(roundsAdvice(5, 3)).not.toContain('3 or');
    expect(roundsAdvice(5, 1)).toBe('');
    expect(roundsAdvice(7, 3, 'configurations')).toContain('the 3 configurations do not');
  });
});

describe('bench:serve figures', () => {
  const fig = (steadyTokS: number, decodeTokS: number, ttftMs: number, pairedTtftMs?: number): ServeFigures =>
    ({ steadyTokS, decodeTokS, ttftMs, spreadMs: 1, ...(pairedTtftMs === undefined ? {} : { pairedTtftMs }) });
  // Three rounds where each round's own ratio disagrees with the ratio of the medians: the machine got
  // faster over the rounds, so a median of one side pairs with another round's median of the other.
  const inproc = [fig(10, 10, 100), fig(12, 12, 200), fig(14, 14, 300)];
  const http = [fig(11, 11, 150, 2), fig(11, 11, 190, 1.5), fig(15, 15, 400, 3)];
  const endpoint: EndpointFigures[] = [{ decodeTokS: 12, ttftMs: 110 }, { decodeTokS: 10, ttftMs: 220 }, { decodeTokS: 13, ttftMs: 360 }];

  it('pairs by round: the median of each round\'s own ratio or difference', () => {
    expect(pairedRatio([11, 11, 15], [10, 12, 14])).toEqual({ rounds: [1.1, 11 / 12, 15 / 14], median: 15 / 14 });
    expect(pairedDelta([150, 190, 400], [100, 200, 300])).toEqual({ rounds: [50, -10, 100], median: 50 });
    expect(() => pairedRatio([1, 2], [1])).toThrow(/rounds/);
  });

  it('keeps the medians of each side and adds the paired figures, each per round', () => {
    const s = summarizeServe(8, inproc, http, endpoint);
    expect(s).toMatchObject({
      concurrency: 8, inprocess_steady_tok_s: 12, http_steady_tok_s: 11, inprocess_ttft_ms: 200, http_ttft_ms: 190,
      median_round_steady_ratio: 15 / 14, median_round_decode_ratio: 15 / 14, median_round_ttft_delta_ms: 50,
      round_steady_ratios: [1.1, 11 / 12, 15 / 14], round_ttft_deltas_ms: [50, -10, 100], http_paired_ttft_overhead_ms: 2,
    });
    // The ratio of the medians (11 / 12) is not the figure.
    expect(s.median_round_steady_ratio).not.toBeCloseTo(s.http_steady_tok_s / s.inprocess_steady_tok_s, 2);
    expect(s.endpoint_sweep).toMatchObject({
      decode_tok_s: 12, ttft_ms: 220, round_decode_ratios: [1.2, 10 / 12, 13 / 14], median_round_decode_ratio: 13 / 14,
      round_ttft_ratios: [1.1, 1.1, 1.2], median_round_ttft_ratio: 1.1,
    });
    expect(s.endpoint_sweep.median_round_decode_ratio).not.toBeCloseTo(s.endpoint_sweep.decode_tok_s / s.inprocess_decode_tok_s, 2);
  });

  it('prints the paired figures in the table, with the per-round values, not the ratio or difference of the medians', () => {
    const [row, perRound, ep] = formatServeRows(summarizeServe(8, inproc, http, endpoint));
    const cols = row!.trim().split(/\s+/);
    // c, steady in-proc, http, ratio, sweep in-proc, http, ratio, TTFT in-proc, http, delta, spread
    expect(cols).toEqual(['8', '12.0', '11.0', (15 / 14).toFixed(3), '12.0', '11.0', (15 / 14).toFixed(3), '200.0', '190.0', '50.00', '1']);
    expect(cols[3]).not.toBe((11 / 12).toFixed(3));
    expect(cols[9]).not.toBe('-10.00');
    expect(perRound).toContain(`steady ratios 1.100 ${(11 / 12).toFixed(3)} ${(15 / 14).toFixed(3)}`);
    expect(perRound).toContain('TTFT deltas 50.00 -10.00 100.00 ms');
    expect(ep).toContain(`decode_tok_s x${(13 / 14).toFixed(3)} in-process (per round 1.200 ${(10 / 12).toFixed(3)} ${(13 / 14).toFixed(3)})`);
    expect(ep).toContain('TTFT x1.100 in-process (per round 1.100 1.100 1.200)');
    expect(ep).not.toContain('x1.000 in-process');
  });
});
