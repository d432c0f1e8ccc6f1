// The two engine features `bench serve` needs, checked against an independent computation from the
// engine's own logits rows: per-token logprobs (log-softmax of the row, top-N alternatives) and
// min_tokens (the stop tokens cannot be picked before n tokens).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EngineHandle } from '../src/engine/types.js';
import { loadEngine } from '../src/engine/engine.js';
import { loadCheckpoint } from '../src/model/checkpoint.js';
import { baseOptions, greedy, logSoftmaxRow, promptIds, tinyEngine } from './helpers/engine-fixture.js';
import { cleanupAllFixtures, nanFixture, nanLogitsError } from './helpers/synth-fixture.js';

const VOCAB = 248320;

/** Ids of a row sorted by logit, most likely first (ties: lower id), without the banned ones. */
function ranked(logits: Float32Array, row: number, banned: number[] = []): number[] {
  const ids: number[] = [];
  for (let i = 0; i < VOCAB; i++) if (!banned.includes(i)) ids.push(i);
  const base = row * VOCAB;
  return ids.sort((a, b) => logits[base + b]! - logits[base + a]! || a - b);
}

describe('engine: logprobs and min_tokens', () => {
  let engine: EngineHandle;
  beforeAll(async () => {
    engine = await tinyEngine({ maxSeqs: 4 });
  });
  afterAll(async () => {
    await engine.close();
  });

  it('returns each token\'s logprob and the top alternatives, as the log-softmax of its logits row', async () => {
    const prompt = promptIds(23, 5);
    const r = await engine.submit({ prompt, maxTokens: 6, ignoreEos: true, logits: 'all', logprobs: 5 }).done;
    expect(r.finishReason).toBe('length');
    expect(r.logprobs).toHaveLength(6);
    const plain = await greedy(engine, prompt, 6);
    expect(r.tokens).toEqual(plain.tokens); // asking for logprobs changes nothing
    for (let i = 0; i < 6; i++) {
      const row = prompt.length - 1 + i; // the row that produced generated token i
      const ref = logSoftmaxRow(r.logits!, row, VOCAB);
      const lp = r.logprobs![i]!;
      expect(lp.logprob).toBeCloseTo(ref[r.tokens[i]!]!, 4);
      const want = ranked(r.logits!, row).slice(0, 5);
      expect(lp.top.map((t) => t.token)).toEqual(want);
      for (const t of lp.top) expect(t.logprob).toBeCloseTo(ref[t.token]!, 4);
      // Greedy: the sampled token is the most likely one.
      expect(lp.top[0]!.token).toBe(r.tokens[i]);
    }
  });

  it('sampled requests in one step each get their own row\'s draw and logprobs (a step\'s host draws run side by side)', async () => {
    // Four whole-vocabulary draws with logprobs in every decode step (four rows drawn on the
    // backend's threads): each token and its logprobs as the same request gives alone, the logprobs
    // those of its own row.
    const reqs = [0, 1, 2, 3].map((k) => ({
      prompt: promptIds(11 + 7 * k, 30 + k), maxTokens: 6, ignoreEos: true, temperature: 1.3, seed: 100 + k, logits: 'all' as const, logprobs: 3,
    }));
    const alone = [];
    for (const q of reqs) alone.push(await engine.submit(q).done);
    // The same model on an engine that runs no step until all four are queued: they share steps on
    // any machine and load.
    const held = await tinyEngine({ maxSeqs: 4 }, { manualSteps: true });
    let together;
    try {
      const pending = reqs.map((q) => held.submit(q).done);
      held.allowSteps!(1000);
      together = await Promise.all(pending);
      expect(held.stats().steps).toBeLessThan(4 * 6); // they shared steps (alone: 6 each)
    } finally {
      await held.close();
    }
    for (let k = 0; k < 4; k++) {
      const r = together[k]!;
      expect(r.tokens, `request ${k}`).toEqual(alone[k]!.tokens);
      for (let i = 0; i < 6; i++) {
        const row = reqs[k]!.prompt.length - 1 + i;
        const ref = logSoftmaxRow(r.logits!, row, VOCAB);
        expect(r.logprobs![i]!.logprob).toBeCloseTo(ref[r.tokens[i]!]!, 4);
        expect(r.logprobs![i]!.top.map((t) => t.token)).toEqual(ranked(r.logits!, row).slice(0, 3));
      }
    }
  });

  it('logprobs 0 gives the sampled token\'s logprob alone; more than 20 alternatives is refused', async () => {
    const r = await engine.submit({ prompt: promptIds(9, 2), maxTokens: 3, ignoreEos: true, logprobs: 0 }).done;
    expect(r.logprobs!.map((l) => l.top.length)).toEqual([0, 0, 0]);
    expect(r.logprobs!.every((l) => l.logprob <= 0 && Number.isFinite(l.logprob))).toBe(true);
    expect(() => engine.submit({ prompt: [1, 2], maxTokens: 1, logprobs: 21 })).toThrow(/at most 20/);
  });

  it('min_tokens: a stop token is never picked before n tokens; the next best is (greedy and sampled)', async () => {
    const prompt = promptIds(17, 9);
    const free = await engine.submit({ prompt, maxTokens: 4, ignoreEos: true, logits: 'all' }).done;
    const row0 = prompt.length - 1;
    const order = ranked(free.logits!, row0);
    // The model's first three choices are all stop tokens: without min_tokens it stops at once.
    const stop = order.slice(0, 3);
    const stopped = await engine.submit({ prompt, maxTokens: 4, stopTokens: stop }).done;
    expect(stopped.finishReason).toBe('stop');
    expect(stopped.tokens).toEqual([order[0]]);
    // With min_tokens 1 the first pick is the best non-stop token of the same row.
    const held = await engine.submit({ prompt, maxTokens: 4, stopTokens: stop, minTokens: 1, logits: 'all' }).done;
    expect(held.tokens[0]).toBe(order[3]);
    // min_tokens 4 = max_tokens: no stop token anywhere, each pick the best allowed one of its row.
    const all = await engine.submit({ prompt, maxTokens: 4, stopTokens: stop, minTokens: 4, logits: 'all' }).done;
    expect(all.finishReason).toBe('length');
    expect(all.tokens).toHaveLength(4);
    for (let i = 0; i < 4; i++) {
      expect(stop).not.toContain(all.tokens[i]);
      expect(all.tokens[i]).toBe(ranked(all.logits!, prompt.length - 1 + i, stop)[0]);
    }
    // Sampling (top-k 1 over the allowed ids) honours the ban the same way.
    const sampled = await engine.submit({ prompt, maxTokens: 1, stopTokens: stop, minTokens: 1, temperature: 1, topK: 1, seed: 3 }).done;
    expect(sampled.tokens).toEqual([order[3]]);
  });
});

describe('engine: a request whose logits are not finite fails, whichever way its token is picked', () => {
  let engine: EngineHandle;
  beforeAll(async () => {
    const f = await nanFixture();
    engine = await loadEngine(loadCheckpoint(f.dir), { ...baseOptions, maxSeq: 128, maxSeqs: 4 });
  });
  afterAll(async () => {
    await engine.close();
    cleanupAllFixtures();
  });

  it('greedy, top-k on the pick, the whole-row sampler, min_tokens, logprobs, streamed: each an error naming the token (all were token 0, finish length)', async () => {
    const base = { prompt: [1, 2, 3], maxTokens: 3, ignoreEos: true };
    const asks = [
      base,                                             // the greedy pick
      { ...base, temperature: 0.8, topK: 5, seed: 1 },  // top-k candidates from the pick
      { ...base, temperature: 0.8, seed: 1 },           // the sampler over the whole row
      { ...base, minTokens: 2, stopTokens: [0] },       // greedy with a stop token banned
      { ...base, logprobs: 2 },                         // logprobs: the whole row
    ];
    // Submitted together: one step picks for all of them.
    const results = await Promise.all(asks.map((a) => engine.submit(a).done));
    const streamed: number[] = [];
    results.push(await engine.submit(base, (ev) => streamed.push(ev.token)).done);
    for (const [i, r] of results.entries()) {
      expect(r.finishReason, `ask ${i}`).toBe('error');
      expect(r.error, `ask ${i}`).toBe(nanLogitsError(0));
      expect(r.errorCode, `ask ${i}`).toBe('non_finite_logits');
      expect(r.tokens, `ask ${i}`).toEqual([]);
    }
    expect(streamed).toEqual([]);
  });
});
