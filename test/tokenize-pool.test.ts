// bench serve's prompt tokenizing: the bounded encode (a text that cannot fit in --max-seq refused
// before it is tokenized whole) and the worker threads that tokenize long texts and render long
// conversations off the JS thread, which must give the JS thread's ids, texts and refusals. Held texts (tokenize-worker.ts' gate) force
// "a text is being tokenized" without any timing.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ensureEmbeddedModel } from '../src/model/embedded.js';
import { loadModel, loadModelTokenizerParts } from '../src/model/model-path.js';
import type { LoadedTokenizer, TokenizerParts } from '../src/model/tokenizer.js';
import { boundedEncode, type PromptBound } from '../src/serve/prompt-bound.js';
import { INLINE_MAX_CHARS, INLINE_MAX_MESSAGES, TokenizePool } from '../src/serve/tokenize-pool.js';
import { until } from './helpers/serve-fixture.js';

const words = (chars: number) => {
  let t = '';
  for (let i = 0; t.length < chars; i++) t += ['alpha', 'beta', 'gamma', 'delta'][i % 4] + ' ';
  return t;
};

describe('boundedEncode', () => {
  const bound: PromptBound = { maxSeq: 100, longestTokenBytes: 10, prefixCountable: true };
  const oneIdPerChar = (t: string) => Array.from(t, (c) => c.charCodeAt(0));

  it('refuses a text of more bytes than max_seq tokens can hold without tokenizing it', () => {
    const encode = vi.fn(oneIdPerChar);
    const r = boundedEncode(encode, bound, 'x'.repeat(100 * 10 * 4 + 1));
    expect(r).toEqual({ tooLong: '4001 bytes of text, at least 101 tokens (no token of this model is longer than 10 bytes)' });
    expect(encode).not.toHaveBeenCalled();
  });

  it('counts a long text on a prefix cut at a space between ASCII letters, and refuses it when the prefix alone is too long', () => {
    const encode = vi.fn(oneIdPerChar);
    const text = words(3000);
    const r = boundedEncode(encode, bound, text);
    expect(encode).toHaveBeenCalledTimes(1);
    const prefix = encode.mock.calls[0]![0];
    expect(text.startsWith(prefix)).toBe(true);
    expect(prefix.length).toBeGreaterThanOrEqual(800); // 8 characters per max_seq token
    expect(text[prefix.length]).toBe(' ');
    expect(r).toEqual({ tooLong: `more than ${prefix.length} tokens (its first ${prefix.length} characters are ${prefix.length})` });
  });

  it('tokenizes whole a text that fits, one without a cut point, and any text when unbounded', () => {
    for (const [b, text] of [[bound, words(500)], [bound, 'x'.repeat(3000)], [null, words(3000)]] as const) {
      const encode = vi.fn(oneIdPerChar);
      expect(boundedEncode(encode, b, text)).toEqual({ ids: oneIdPerChar(text) });
      expect(encode).toHaveBeenCalledTimes(1);
    }
  });
});

describe('TokenizePool', () => {
  let tokenizer: LoadedTokenizer;
  let parts: TokenizerParts;
  const gate = new Int32Array(new SharedArrayBuffer(4));
  const HOLD = 40_000;
  const release = () => { Atomics.store(gate, 0, 1); Atomics.notify(gate, 0); };
  const pools: TokenizePool[] = [];
  const start = (o: { hold?: boolean; onFailure?: (e: Error) => void } = {}) => {
    const p = TokenizePool.start(parts, tokenizer, 2, { ...(o.hold ? { hold: { minChars: HOLD, gate } } : {}), ...(o.onFailure ? { onFailure: o.onFailure } : {}) });
    expect(p).toBeInstanceOf(TokenizePool); // the compiled worker exists (npm ci builds dist/)
    pools.push(p as TokenizePool);
    return p as TokenizePool;
  };
  beforeAll(async () => {
    const ckpt = loadModel(await ensureEmbeddedModel(), { hash: false });
    ({ tokenizer, parts } = await loadModelTokenizerParts(ckpt));
  });
  afterAll(async () => {
    release();
    await Promise.all(pools.map((p) => p.close()));
  });

  it('gives the JS thread\'s ids for every text, short ones on the JS thread and long ones on a worker', async () => {
    const pool = start();
    const base = 'Hello <|im_start|>user\ncafé 東京 🙂 123\t\n  spaces, and a word:supercalifragilistic ';
    const texts = ['', 'x', base, base.repeat(20), base.repeat(400), 'ü'.repeat(5000), '\u6771'.repeat(3000) + ' x', words(60_000)];
    for (const t of texts) {
      expect((await pool.encode(t, null)), `${t.length} characters`).toEqual({ ids: tokenizer.encode(t) });
    }
    expect(texts.filter((t) => t.length > INLINE_MAX_CHARS).length).toBeGreaterThan(3);
  });

  it('renders a long conversation through the chat template on a worker as the JS thread does', async () => {
    const pool = start();
    const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
    const long = Array.from({ length: INLINE_MAX_MESSAGES * 2 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: `turn ${i}: café 東京 <think>` }));
    for (const [messages, opts] of [
      [long, { addGenerationPrompt: true }],
      [long, { addGenerationPrompt: true, enableThinking: true, tools, extra: { custom: 1 } }],
      [long.slice(0, 3), { addGenerationPrompt: false }],
    ] as const) {
      const expected = tokenizer.applyChatTemplate(messages, opts);
      const onThisThread = vi.spyOn(tokenizer, 'applyChatTemplate');
      try {
        expect(await pool.render([...messages], opts)).toBe(expected);
        expect(onThisThread).toHaveBeenCalledTimes(messages.length > INLINE_MAX_MESSAGES ? 0 : 1);
      } finally {
        onThisThread.mockRestore();
      }
    }
    expect(pool.inFlight).toBe(0);
  });

  it('refuses what the JS thread refuses, with the same words', async () => {
    const pool = start();
    const bound: PromptBound = { maxSeq: 512, longestTokenBytes: 16, prefixCountable: true };
    for (const t of [words(512 * 16 * 4 + 100), words(20_000), words(2500)]) {
      expect(await pool.encode(t, bound), `${t.length} characters`).toEqual(boundedEncode((x) => tokenizer.encode(x), bound, t));
    }
  });

  it('a text held on one worker holds up neither the JS thread nor the other worker', async () => {
    Atomics.store(gate, 0, 0);
    const pool = start({ hold: true });
    const held = words(HOLD + 10);
    let settled = false;
    const first = pool.encode(held, null).then((r) => { settled = true; return r; });
    await until(() => pool.inFlight === 1);
    // A long text under the hold size goes to the idle worker and is answered; a short one on the JS thread.
    const other = words(HOLD / 2);
    expect(await pool.encode(other, null)).toEqual({ ids: tokenizer.encode(other) });
    expect(await pool.encode('short', null)).toEqual({ ids: tokenizer.encode('short') });
    expect(settled).toBe(false);
    expect(pool.inFlight).toBe(1);
    release();
    expect(await first).toEqual({ ids: tokenizer.encode(held) });
  });

  it('a worker that dies fails only its own texts; the pool goes on with the other', async () => {
    Atomics.store(gate, 0, 0);
    const failures: string[] = [];
    const pool = start({ hold: true, onFailure: (e) => failures.push(e.message) });
    const held = pool.encode(words(HOLD + 10), null).then(() => null, (e: unknown) => e);
    await until(() => pool.inFlight === 1);
    const slots = (pool as unknown as { slots: Array<{ worker: { terminate(): Promise<number> }; pending: Map<number, unknown> }> }).slots;
    await slots.find((s) => s.pending.size === 1)!.worker.terminate();
    expect(String(await held)).toMatch(/the tokenizer worker failed: the tokenizer worker exited/);
    expect(failures).toHaveLength(1);
    expect(pool.workers).toBe(1);
    const next = words(5000);
    expect(await pool.encode(next, null)).toEqual({ ids: tokenizer.encode(next) });
    release();
  });

  it('close answers the texts still on the workers, and every later one, with a 503', async () => {
    Atomics.store(gate, 0, 0);
    const pool = start({ hold: true });
    const held = pool.encode(words(HOLD + 10), null).then(() => null, (e: unknown) => e);
    await until(() => pool.inFlight === 1);
    await pool.close();
    expect(await held).toMatchObject({ status: 503, message: 'the server is shutting down' });
    // After close nothing is tokenized, not even on the JS thread: the 503 at once.
    await expect(pool.encode(words(HOLD + 10), null)).rejects.toMatchObject({ status: 503 });
    await expect(pool.encode('short', null)).rejects.toMatchObject({ status: 503 });
    await expect(pool.render([{ role: 'user', content: 'x' }], { addGenerationPrompt: true })).rejects.toMatchObject({ status: 503 });
    release();
  });
});
