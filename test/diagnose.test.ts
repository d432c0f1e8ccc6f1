// `bench diagnose`: the scoring rules on canned right and wrong answers (the seed report's own
// responses among the right ones), the retrieval prompt and its sizing, the isolation verdict on
// canned answers, then the whole command against `bench serve` over the embedded random-weight model
// (the report's every seed field with the seed's JSON type; the determinism and isolation checks
// really ran; the behaviour checks fail honestly), and the exit codes of the process (4 when the
// endpoint is unreachable or never answers, 2 for usage errors), then one situation at a time forced
// by a fake that sends exactly the bytes a test wants (malformed replies, refusals by status,
// answers that change under load, broken streams, bad usage, oversized bodies). No assertion depends
// on timing: figures are checked for their type, never their size.
import { execFile, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { main } from '../src/cli/main.js';
import { BEHAVIOR_CHECKS } from '../src/diagnose/checks.js';
import { DIAGNOSE_DEFAULTS, runDiagnose } from '../src/diagnose/diagnose.js';
import { decodeFigures, median, TIMING_SCOPE } from '../src/diagnose/decode.js';
import { normalizeBaseUrl, summarizeStream } from '../src/diagnose/http-client.js';
import { codeWords, firstDifference, holdsWord, isolationPrompts, judgeIsolation, type Completion } from '../src/diagnose/isolation.js';
import { PROTOCOL_CHECK_IDS, stopFromReference, usageDisagreement } from '../src/diagnose/protocol.js';
import {
  buildRetrievalPrompt, fillerSentences, RETRIEVAL_ANSWER_TOKENS, RETRIEVAL_ID, retrievalKey, retrievalLimit, sizeRetrievalPrompt,
} from '../src/diagnose/retrieval.js';
import { exactAnswer, jsonAnswer, judgeIsEven, numberInAnswer, toolCallAnswer } from '../src/diagnose/scoring.js';
import type { RunningServer } from '../src/serve/server.js';
import { replyKind, runCheck } from '../src/diagnose/session.js';
import { REPO_ROOT } from '../src/util/version.js';
import { startDiagnoseFake, type FakeOptions, type FakeReply, type FakeRequest, type FakeServer, chunk } from './helpers/diagnose-fake-server.js';
import { startOracleServer } from './helpers/oracle-server.js';
import { API_KEY, startTestServer, until } from './helpers/serve-fixture.js';

type Json = Record<string, any>;

const SEED_REPORT = JSON.parse(readFileSync(path.join(REPO_ROOT, 'test', 'fixtures', 'serving-diagnostics-report.json'), 'utf8')) as Json;
const BENCH = path.join(REPO_ROOT, 'bin', 'bench.js');
const run = promisify(execFile);

/** A chat completion whose message has `content` (and tool calls). */
function reply(content: string | null, toolCalls: Json[] = []): Json {
  return { id: 'x', object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content, tool_calls: toolCalls }, finish_reason: 'stop' }] };
}

function call(name: string, args: string): Json {
  return { id: 'call-1', type: 'function', function: { name, arguments: args } };
}

const check = (id: string) => BEHAVIOR_CHECKS.find((c) => c.id === id)!;

describe('behaviour table and scoring rules', () => {
  it('has the seed\'s eleven ids, in its order', () => {
    expect(BEHAVIOR_CHECKS.map((c) => c.id)).toEqual((SEED_REPORT.behavior as Json[]).map((b) => b.id));
    expect(new Set(BEHAVIOR_CHECKS.map((c) => c.prompt)).size).toBe(11);
  });

  it('passes every response of the seed report (a real server\'s right answers)', () => {
    for (const b of SEED_REPORT.behavior as Json[]) {
      const score = check(b.id).score(b.response);
      expect(score.pass, `${b.id}: ${score.reason}`).toBe(true);
    }
  });

  it.each([
    ['behavior-arithmetic', '  391\n', true], ['behavior-arithmetic', '391.', false], ['behavior-arithmetic', 'The answer is 391', false],
    ['behavior-arithmetic', '392', false], ['behavior-arithmetic', '<think>17 times 23…</think>\n\n391', true],
    ['behavior-json', '{"age": 37, "name": "Ada"}', true], ['behavior-json', '```json\n{"name": "Ada", "age": 37}\n```', true],
    ['behavior-json', '{"name": "Ada", "age": "37"}', false], ['behavior-json', '{"name": "Ada", "age": 37, "x": 1}', false],
    ['behavior-json', 'name: Ada, age: 37', false],
    ['behavior-sort', '[-2,0,5,8]', true], ['behavior-sort', '[-2, 0, 8, 5]', false], ['behavior-sort', '-2, 0, 5, 8', false],
    ['behavior-french', 'bonjour', true], ['behavior-french', 'Bonjour', false], ['behavior-french', 'bonjour!', false],
    ['behavior-spanish', '31', true], ['behavior-spanish', 'treinta y uno', false],
    ['behavior-japanese', '東京', true], ['behavior-japanese', '東京都', false], ['behavior-japanese', 'Tokyo', false],
    ['behavior-python', 'def is_even(n):\n    return n % 2 == 0', true],
    ['behavior-python', '```python\ndef is_even(x: int) -> bool:\n    return (x % 2) == 0\n```', true],
    ['behavior-python', 'def is_even(n):\n    """Even?"""\n    return not n % 2', true],
    ['behavior-python', 'def is_even(n): return n & 1 == 0', true],
    ['behavior-python', 'def is_even(n):\n    return n % 2 == 1', false],
    ['behavior-python', 'def is_even(n):\n    return m % 2 == 0', false],
    ['behavior-python', 'def is_odd(n):\n    return n % 2 == 0', false],
    ['behavior-python', 'is_even = lambda n: n % 2 == 0', false],
    // Only the first return of is_even's body counts, and its parentheses must balance.
    ['behavior-python', 'def is_even(n):\n return n % 2 == 1\n\ndef is_odd(n):\n return not n % 2', false],
    ['behavior-python', 'def is_even(n):\n return n % 2 != 0\n return n % 2 == 0', false],
    ['behavior-python', 'def is_even(n):\n return (n % 2 == 0', false],
    ['behavior-python', 'def is_even(n):\n return n % 2) == 0', false],
    ['behavior-python', 'def is_even(n):\n return ((n % 2) == 0', false],
    ['behavior-python', 'def is_even(n):\n    if n:\n        return False\n    return n % 2 == 0', false],
    ['behavior-python', 'def is_even(n): return n % 2 == 1; return n % 2 == 0', false],
    ['behavior-python', 'def is_even(n):\n    pass\nreturn n % 2 == 0', false],
    ['behavior-python', 'def is_even(n):\n    return ((n % 2) == 0)', true],
    ['behavior-python', 'def is_even(n):\n    return not (n % 2)  # even', true],
    ['behavior-python', 'def is_even(n):\n    """\n    return True when n is even\n    """\n    return (n & 1) == 0', true],
    ['behavior-python', "def is_even(n):\n    '''return n % 2 == 1'''\n    return n % 2 == 0", true],
    ['behavior-extract', 'mira@example.org', true], ['behavior-extract', 'Mira: mira@example.org', false], ['behavior-extract', 'mira@example.com', false],
    ['behavior-reasoning', '14', true], ['behavior-reasoning', '12', false],
    ['behavior-instruction', 'violet', true], ['behavior-instruction', 'red', false], ['behavior-instruction', 'Violet.', false],
  ])('%s: %j -> %s', (id, content, pass) => {
    expect(check(id as string).score(reply(content as string)).pass).toBe(pass);
  });

  it('behavior-tool: a get_weather call with {"city": "Oslo"}, nothing else', () => {
    const tool = check('behavior-tool');
    expect(tool.score(reply(null, [call('get_weather', '{"city": "Oslo"}')])).pass).toBe(true);
    expect(tool.score(reply(null, [call('get_weather', '{"city":"Oslo"}')])).pass).toBe(true);
    expect(tool.score(reply(null, [call('get_weather', '{"city": "Bergen"}')])).pass).toBe(false);
    expect(tool.score(reply(null, [call('get_weather', '{"city": "Oslo", "unit": "C"}')])).pass).toBe(false);
    expect(tool.score(reply(null, [call('get_time', '{"city": "Oslo"}')])).pass).toBe(false);
    expect(tool.score(reply(null, [call('get_weather', '{"city": "Oslo"')])).pass).toBe(false);
    expect(tool.score(reply('get_weather(city="Oslo")')).pass).toBe(false);
    expect(tool.score({ error: { message: 'tools are not supported' } }).pass).toBe(false);
  });

  it('the rules read no answer as a failure, with a reason', () => {
    for (const s of [exactAnswer('391'), jsonAnswer([1]), toolCallAnswer('f', {}), numberInAnswer(5)]) {
      const r = s({ choices: [] });
      expect(r.pass).toBe(false);
      expect(r.reason).toMatch(/./);
    }
    expect(judgeIsEven('def is_even(n):\n return n % 2 == 0').pass).toBe(true);
  });

  it('numberInAnswer: the whole number, not part of a longer one', () => {
    const s = numberInAnswer(32737);
    expect(s(reply('32737')).pass).toBe(true);
    expect(s(reply('The vault code is 32737.')).pass).toBe(true);
    expect(s(reply('327370')).pass).toBe(false);
    expect(s(reply('132737')).pass).toBe(false);
    expect(s(reply('3273')).pass).toBe(false);
  });
});

describe('held-out retrieval prompt', () => {
  it('filler has no digits; the key is the only number; the same seed gives the same prompt', () => {
    for (const seed of [0, 1, 12345]) {
      const p = buildRetrievalPrompt(seed, 200);
      expect(p.key).toBeGreaterThanOrEqual(10000);
      expect(p.key).toBeLessThan(100000);
      expect(p.prompt.match(/\d+/g)).toEqual([String(p.key)]);
      expect(p.depth).toBeGreaterThanOrEqual(0.14);
      expect(p.depth).toBeLessThanOrEqual(0.86);
      expect(buildRetrievalPrompt(seed, 200).prompt).toBe(p.prompt);
      expect(fillerSentences(seed, 500).join(' ')).not.toMatch(/\d|vault/i);
    }
    expect(retrievalKey(1).key).not.toBe(retrievalKey(2).key);
    expect(buildRetrievalPrompt(1, 50).prompt).not.toBe(buildRetrievalPrompt(2, 50).prompt);
  });

  it('the key sits at the seeded depth of the filler', () => {
    const p = buildRetrievalPrompt(7, 300);
    const body = p.prompt.split('\n\n').slice(1, -1).join(' ');
    const sentences = body.split(/(?<=\.) /);
    const at = sentences.findIndex((s) => s.includes(String(p.key)));
    expect(at / 300).toBeCloseTo(p.depth, 5);
  });

  it('the limit: under 8192 with the answer, and within max_model_len when that is smaller', () => {
    expect(retrievalLimit(null)).toEqual({ target: 8191 - RETRIEVAL_ANSWER_TOKENS, limit: 8192, limitedBy: 'window' });
    expect(retrievalLimit(32768)).toEqual({ target: 8191 - RETRIEVAL_ANSWER_TOKENS, limit: 8192, limitedBy: 'window' });
    expect(retrievalLimit(4096)).toEqual({ target: 4096 - RETRIEVAL_ANSWER_TOKENS, limit: 4096, limitedBy: 'max_model_len' });
  });

  it('sizing: the largest prompt within the target, near it, in a few counts', async () => {
    // A stand-in for the server's tokenizer: about 1.3 tokens per word plus a template's overhead.
    const counter = async (prompt: string) => Math.round(prompt.split(/\s+/).length * 1.3) + 21;
    for (const target of [8175, 4080, 1000]) {
      const sized = await sizeRetrievalPrompt(3, target, counter);
      expect(sized.tokens).toBeLessThanOrEqual(target);
      expect(sized.tokens).toBe(await counter(sized.prompt));
      expect(target - sized.tokens).toBeLessThanOrEqual(Math.max(32, Math.floor(target * 0.015)));
      expect(sized.counts).toBeLessThanOrEqual(12);
    }
    await expect(sizeRetrievalPrompt(3, 20, counter)).rejects.toThrow(/exceeds the room/);
  });
});

describe('stop strings, decode figures, stream summaries', () => {
  it('the stop string comes from the middle of the reference text; the text before it is what a stop must leave', () => {
    expect(stopFromReference('a b c d e f g h i j')).toEqual({ stop: ' f ', before: 'a b c d e' });
    expect(stopFromReference('abc')).toBeNull();
    const pick = stopFromReference('xyz 東京🚀 xyz 東京🚀 tail')!;
    expect('xyz 東京🚀 xyz 東京🚀 tail'.indexOf(pick.stop)).toBe(pick.before.length);
  });

  it('decode figures exclude the first token; null when they cannot be computed', () => {
    expect(decodeFigures(100, 1100, 11, { chunks: 10, reads: 10 })).toEqual({ ttft_ms: 100, decode_seconds: 1, decode_tokens_per_second: 10, decode_rate_note: null });
    expect(decodeFigures(100, 1100, 1).decode_tokens_per_second).toBeNull();
    expect(decodeFigures(100, 1100, null).decode_rate_note).toBe('no usage chunk');
    expect(decodeFigures(null, 1100, 11)).toEqual({ ttft_ms: null, decode_seconds: null, decode_tokens_per_second: null, decode_rate_note: 'no content chunk or no finish chunk' });
    // Chunks the client read in bursts: no rate (it would time the client, not the server).
    expect(decodeFigures(100, 1100, 11, { chunks: 10, reads: 0 }).decode_rate_note).toBe('every token arrived in the first content chunk\'s network read');
    const burst = decodeFigures(100, 100.03, 11, { chunks: 10, reads: 2 });
    expect(burst.decode_tokens_per_second).toBeNull();
    expect(burst.decode_rate_note).toBe('the 10 chunks after the first arrived in 2 network reads (fewer than 0.5 a chunk): delivered in bursts');
    expect(decodeFigures(100, 1100, 11, { chunks: 10, reads: 5 }).decode_tokens_per_second).toBe(10);
    expect(decodeFigures(100, 1100, 11, { chunks: 0, reads: 1 }).decode_rate_note).toBe('every token arrived in the first content chunk');
    expect(median([3, 1, 2])).toBe(2);
    expect(median([])).toBeNull();
  });

  it('a stream summary: first non-empty delta (a role-only chunk does not count), finish chunk, usage chunk', () => {
    const s = summarizeStream([
      { atMs: 5, data: { choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] } },
      { atMs: 9, data: { choices: [{ index: 0, delta: { content: 'Hi' }, finish_reason: null, token_ids: [1] }] } },
      { atMs: 12, data: { choices: [{ index: 0, delta: { content: ' there' }, finish_reason: null, token_ids: [2, 3] }] } },
      { atMs: 14, data: { choices: [{ index: 0, delta: {}, finish_reason: 'length' }] } },
      { atMs: 15, data: { choices: [], usage: { prompt_tokens: 4, completion_tokens: 3, total_tokens: 7 } } },
    ]);
    expect(s).toMatchObject({ text: 'Hi there', finishReason: 'length', firstContentMs: 9, finishMs: 14, tokenIds: [1, 2, 3], usage: { completion_tokens: 3 } });
    // Reads: the chunks after the first content chunk, and the reads past its read through the finish chunk's.
    const r = summarizeStream([
      { atMs: 9, read: 0, data: { choices: [{ index: 0, delta: { content: 'a' }, finish_reason: null }] } },
      { atMs: 9, read: 0, data: { choices: [{ index: 0, delta: { content: 'b' }, finish_reason: null }] } },
      { atMs: 11, read: 1, data: { choices: [{ index: 0, delta: { content: 'c' }, finish_reason: null }] } },
      { atMs: 11, read: 1, data: { choices: [{ index: 0, delta: { content: 'd' }, finish_reason: 'length' }] } },
    ]);
    expect(r).toMatchObject({ decodeChunks: 3, decodeReads: 1, firstContentMs: 9, finishMs: 11 });
  });

  it('base URLs: a trailing /v1 and slashes go', () => {
    expect(normalizeBaseUrl('http://h:8000/v1/')).toBe('http://h:8000');
    expect(normalizeBaseUrl('http://h:8000')).toBe('http://h:8000');
  });
});

describe('isolation verdict on canned answers', () => {
  const prompts = isolationPrompts(5, 4, 3);
  const words = prompts.map((p) => p.word);
  const c = (text: string, ids: number[] | null = null): Completion => ({ text, ids, finish: 'stop', response: {} });

  it('code words are distinct, digit-free, and half the prompts share the prefix', () => {
    expect(new Set(codeWords(9, 40)).size).toBe(40);
    expect(codeWords(9, 40).join('')).not.toMatch(/\d/);
    expect(prompts.filter((p) => p.sharedPrefix)).toHaveLength(2);
    const shared = prompts.filter((p) => p.sharedPrefix).map((p) => p.prompt.slice(0, 200));
    expect(shared[0]).toBe(shared[1]);
    expect(holdsWord(`ok ${words[0]!.toLowerCase()}.`, words[0]!)).toBe(true);
    expect(holdsWord(`X${words[0]}`, words[0]!)).toBe(false);
  });

  it('every answer its own word: pass, not vacuous, all equal to solo', () => {
    const solo = words.slice(0, 3).map((w, i) => c(w, [i, 9]));
    const j = judgeIsolation(prompts, solo, solo, words[3]!);
    expect(j).toMatchObject({ pass: true, vacuous: false, equal: 3, compared: 3, comparedBy: 'token_ids' });
    // The cancelled request's partial text empty: nothing of it was checked, so no pass.
    expect(judgeIsolation(prompts, solo, solo, '')).toMatchObject({ pass: null, undetermined: 1 });
  });

  it('an answer holding another request\'s word fails, naming the word', () => {
    const solo = words.slice(0, 3).map((w) => c(w));
    const conc = [c(words[0]!), c(`${words[1]} and ${words[2]}`), c(words[2]!)];
    const j = judgeIsolation(prompts, solo, conc, '');
    expect(j.pass).toBe(false);
    expect(j.requests[1]!.foreign_words).toEqual([words[2]]);
    expect(j.equal).toBe(2);
    expect(j.requests[1]!.first_difference).toMatchObject({ compared_by: 'text' });
  });

  it('a request that lost its own word under load fails; the cancelled one is checked for foreign words', () => {
    const solo = words.slice(0, 3).map((w) => c(w));
    expect(judgeIsolation(prompts, solo, [c(words[0]!), c('something else'), c(words[2]!)], '').pass).toBe(false);
    expect(judgeIsolation(prompts, solo, solo, `partial ${words[0]}`).pass).toBe(false);
  });

  it('no solo answer held its word: vacuous, judged by equality with the solo answers', () => {
    const solo = [c('gibberish one'), c('gibberish two'), c('gibberish three')];
    expect(judgeIsolation(prompts, solo, solo, 'gib')).toMatchObject({ pass: true, vacuous: true, equal: 3 });
    expect(judgeIsolation(prompts, solo, solo, 'gib').requests.slice(0, 3).map((r) => r.judged_by)).toEqual(['equal_to_solo', 'equal_to_solo', 'equal_to_solo']);
  });

  it('vacuous word check and every answer changed under load: not determinable (pass null), never a pass', () => {
    const solo = [c('gibberish one'), c('gibberish two'), c('gibberish three')];
    const conc = [c('other one'), c('other two'), c('other three')];
    const j = judgeIsolation(prompts, solo, conc, 'gib');
    expect(j).toMatchObject({ pass: null, vacuous: true, equal: 0, undetermined: 3 });
    expect(j.reason).toMatch(/^not determinable/);
    // One changed answer is enough to withhold the pass; a lost own word or a foreign word still fails.
    expect(judgeIsolation(prompts, solo, [solo[0]!, solo[1]!, c('changed')], 'gib').pass).toBeNull();
    const mixed = [c(words[0]!), c('gibberish two'), c('gibberish three')];
    expect(judgeIsolation(prompts, mixed, [c(words[0]!), c('changed'), mixed[2]!], 'gib').pass).toBeNull();
    expect(judgeIsolation(prompts, mixed, [c('lost'), c('changed'), mixed[2]!], 'gib').pass).toBe(false);
    expect(judgeIsolation(prompts, solo, [c(`x ${words[2]}`), solo[1]!, solo[2]!], 'gib').pass).toBe(false);
  });

  it('firstDifference: by token ids when both have them, else by text', () => {
    expect(firstDifference(c('a', [1, 2, 3]), c('b', [1, 2, 4]))).toEqual({ compared_by: 'token_ids', index: 2, a: 3, b: 4 });
    expect(firstDifference(c('abc', [1]), c('abd', null))).toEqual({ compared_by: 'text', index: 2, a: 'c', b: 'd' });
    expect(firstDifference(c('same', [1]), c('same', [1]))).toBeNull();
  });
});

/** Checks that `ours` has every field of `seed` with the same JSON type, recursively; returns the mismatches. */
function typeMismatches(seed: unknown, ours: unknown, where: string, out: string[], nullable: ReadonlySet<string>): string[] {
  const t = (x: unknown) => x === null ? 'null' : Array.isArray(x) ? 'array' : typeof x;
  const key = where.replace(/\[\d+\]/g, '[]');
  if (t(seed) !== t(ours) && !(nullable.has(key) && t(ours) === 'null')) {
    out.push(`${where}: seed ${t(seed)}, ours ${t(ours)}`);
    return out;
  }
  if (t(seed) === 'array') {
    const s = seed as unknown[];
    const o = ours as unknown[];
    if (s.length > 0 && o.length === 0) out.push(`${where}: empty`);
    // Every element of ours against the seed's first (the lists are lists of one kind).
    o.forEach((x, i) => typeMismatches(s[Math.min(i, s.length - 1)], x, `${where}[${i}]`, out, nullable));
  } else if (t(seed) === 'object') {
    for (const k of Object.keys(seed as Json)) {
      if (!(k in (ours as Json))) { out.push(`${where}.${k}: missing`); continue; }
      if (k === 'response') continue; // the server's own body, checked apart: its fields are whatever the server sends
      typeMismatches((seed as Json)[k], (ours as Json)[k], `${where}.${k}`, out, nullable);
    }
  }
  return out;
}

/** The OpenAI core of a chat completion, the part of `response` every server shares. */
function expectChatCompletion(r: Json, where: string): void {
  expect(typeof r.id, where).toBe('string');
  expect(r.object, where).toBe('chat.completion');
  expect(typeof r.created, where).toBe('number');
  expect(typeof r.model, where).toBe('string');
  const c = r.choices[0];
  expect(c.index, where).toBe(0);
  expect(c.message.role, where).toBe('assistant');
  expect(c.message.content === null || typeof c.message.content === 'string', where).toBe(true);
  expect(Array.isArray(c.message.tool_calls), where).toBe(true);
  expect(typeof c.finish_reason, where).toBe('string');
  for (const k of ['prompt_tokens', 'completion_tokens', 'total_tokens']) expect(Number.isInteger(r.usage[k]), `${where}.usage.${k}`).toBe(true);
}

describe('bench diagnose against bench serve (embedded random-weight model)', () => {
  let s: RunningServer;
  let report: Json;
  let code: number;
  let stderr = '';
  let dir: string;
  beforeAll(async () => {
    // max_seq 4096 (serve's default) is below 8192: the retrieval check must size itself to it.
    s = await startTestServer({ maxSeq: 4096 });
    dir = mkdtempSync(path.join(os.tmpdir(), 'lumen-diagnose-'));
    process.env.LUMEN_DIAGNOSE_TEST_KEY = API_KEY;
    const spy = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
      stderr += typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString();
      return true;
    });
    try {
      code = await main(['node', 'bench', 'diagnose', '--endpoint', `${s.url}/v1`, '--api-key-env', 'LUMEN_DIAGNOSE_TEST_KEY',
        '--output', path.join(dir, 'report.json'), '--seed', '7', '--concurrency', '4', '--repeats', '3', '--decode-tokens', '24', '--compare-tokens', '12']);
    } finally {
      spy.mockRestore();
    }
    report = JSON.parse(readFileSync(path.join(dir, 'report.json'), 'utf8')) as Json;
  });
  afterAll(async () => {
    await s?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
    delete process.env.LUMEN_DIAGNOSE_TEST_KEY;
  });

  it('is complete (every check ran), exits 0, and prints the summary table on stderr', () => {
    expect(report.incomplete_reasons, stderr).toBeUndefined();
    expect(report.status).toBe('complete');
    expect(code).toBe(0);
    expect(stderr).toMatch(/^check +result +seconds +detail$/m);
    for (const id of [...BEHAVIOR_CHECKS.map((c) => c.id), RETRIEVAL_ID, 'protocol-stop-sequence', 'initial_decode', 'decode_runs\\[2\\]', 'greedy-repeats', 'request-isolation', 'batch-invariance']) {
      expect(stderr).toMatch(new RegExp(`^${id} `, 'm'));
    }
    expect(stderr).toMatch(/^status: complete/m);
    expect(report.base_url).toBe(s.url);
    expect(report.model).toBe('embedded-tiny-v2');
    expect(report.seed).toBe(7);
  });

  it('has every field of the seed report with the seed\'s JSON type (recursively; responses by their OpenAI core)', () => {
    // Decode figures are null only when the client could not time them (documented); the types otherwise match.
    const nullable = new Set(['$.decode_runs[].ttft_ms', '$.decode_runs[].decode_tokens_per_second', '$.decode_runs[].decode_seconds',
      '$.initial_decode.ttft_ms', '$.initial_decode.decode_tokens_per_second', '$.initial_decode.decode_seconds', '$.median_decode_tokens_per_second']);
    expect(typeMismatches(SEED_REPORT, report, '$', [], nullable)).toEqual([]);
    for (const b of [...report.behavior, ...report.long_context] as Json[]) expectChatCompletion(b.response, b.id);
    expect(report.decode_runs).toHaveLength(3);
    for (const d of [report.initial_decode, ...report.decode_runs] as Json[]) {
      expect(d.timing_scope).toBe(TIMING_SCOPE);
      expect(d.usage.completion_tokens).toBeGreaterThan(1);
      expect(d.usage.completion_tokens).toBeLessThanOrEqual(24);
    }
  });

  it('behaviour checks ran and fail honestly on random weights: each scored on the model\'s real answer', () => {
    expect(report.behavior_passes).toBe(0);
    for (const b of report.behavior as Json[]) {
      expect(b.pass, b.id).toBe(false);
      expect(b.error, b.id).toBeUndefined();
      expect(b.reason, b.id).toMatch(/^expected /);
      expect(typeof b.answer, b.id).toBe('string'); // the model's text, read and scored
    }
    const tool = (report.behavior as Json[]).find((b) => b.id === 'behavior-tool')!;
    expect(tool.response.usage.prompt_tokens).toBeGreaterThan((report.behavior as Json[])[0]!.response.usage.prompt_tokens); // the tool's schema is in the prompt
  });

  it('protocol checks all pass on our server', () => {
    const byId = Object.fromEntries((report.protocol as Json[]).map((c) => [c.id, c]));
    expect(Object.keys(byId)).toEqual(['protocol-stop-sequence', 'protocol-max-tokens', 'protocol-stream-equals-non-streamed',
      'protocol-stream-usage', 'protocol-malformed-request', 'protocol-unicode-roundtrip']);
    for (const c of report.protocol as Json[]) expect(c.pass, `${c.id}: ${c.reason ?? c.error}`).toBe(true);
    expect(byId['protocol-stop-sequence']!.text_equals_reference_before_stop).toBe(true);
    expect(byId['protocol-malformed-request']!.statuses).toEqual([400, 400]);
    expect(report.protocol_passes).toBe(6);
  });

  it('the retrieval prompt is sized to max_model_len 4096 with the server\'s own count, and the answer scored', () => {
    const lc = (report.long_context as Json[])[0]!;
    expect(lc.id).toBe(RETRIEVAL_ID);
    expect(lc).toMatchObject({ limited_by: 'max_model_len', token_limit: 4096, max_model_len: 4096, counted_by: '/tokenize', max_tokens: RETRIEVAL_ANSWER_TOKENS });
    expect(lc.usage_prompt_tokens).toBe(lc.prepared_prompt_tokens);
    expect(lc.prepared_prompt_tokens + RETRIEVAL_ANSWER_TOKENS).toBeLessThanOrEqual(4096);
    expect(lc.prepared_prompt_tokens).toBeGreaterThan(4096 - RETRIEVAL_ANSWER_TOKENS - 64);
    expect(lc.expected).toBe(String(retrievalKey(7).key));
    expect(lc.pass).toBe(false);
    expect(report.long_context_passes).toBe(0);
  });

  it('determinism and isolation really ran: k/k identical greedy repeats, N/N concurrent answers equal to their solo answers token for token', () => {
    expect(report.identical_greedy_completions).toBe(true);
    expect(report.greedy_repeats).toMatchObject({ pass: true, repeats: 3, distinct_outputs: 1, identical_repeats: 3, compared_by: 'token_ids' });
    expect(report.greedy_repeats.response).toHaveLength(3);
    const iso = report.request_isolation;
    expect(report.request_isolation_passed).toBe(true);
    expect(iso).toMatchObject({ pass: true, requests_total: 4, compared: 3, concurrent_equal_to_solo: 3, compared_by: 'token_ids', word_check_vacuous: true });
    expect(iso.requests.filter((r: Json) => r.cancelled)).toHaveLength(1);
    expect(iso.requests.filter((r: Json) => r.shared_prefix)).toHaveLength(2);
    expect(iso.reason).toMatch(/vacuous/);
    const bi = report.batch_invariance;
    expect(bi.error).toBeUndefined();
    expect(bi.informational).toBe(true);
    expect(typeof bi.identical).toBe('boolean');
    expect(bi.distractors).toBe(3);
  });

  it('leaves nothing in flight on the server (the cancelled stream was freed)', async () => {
    await until(() => s.ctx.inFlight === 0 && s.ctx.engine!.inFlight() === 0);
    const st = s.engine.stats();
    await until(() => s.engine.stats().stateSlotsFree === st.stateSlotsTotal);
  });
});

/** `bench diagnose ARGS` in-process; the report from --output, stderr captured. */
async function diagnoseInProcess(args: string[]): Promise<{ code: number; report: Json; stderr: string }> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'lumen-diagnose-'));
  let stderr = '';
  const spy = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
    stderr += typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString();
    return true;
  });
  try {
    const code = await main(['node', 'bench', 'diagnose', ...args, '--output', path.join(dir, 'report.json')]);
    return { code, report: JSON.parse(readFileSync(path.join(dir, 'report.json'), 'utf8')) as Json, stderr };
  } finally {
    spy.mockRestore();
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('bench diagnose against a server that knows the answers (test/helpers/oracle-server.ts)', () => {
  const small = ['--concurrency', '4', '--repeats', '2', '--decode-tokens', '16', '--compare-tokens', '8'];

  it('passes every behaviour check, the retrieval (sized by usage.prompt_tokens: no /tokenize) and a non-vacuous isolation check', async () => {
    const o = await startOracleServer();
    try {
      const { code, report, stderr } = await diagnoseInProcess(['--endpoint', o.url, ...small]);
      expect(report.status, stderr).toBe('complete');
      expect(code).toBe(0);
      expect(report.model).toBe('oracle-1');
      expect(report.behavior_passes).toBe(11);
      expect(report.server.request_extras).toMatchObject({ chat_template_kwargs: true, return_token_ids: true });
      const lc = report.long_context[0];
      expect(lc).toMatchObject({ pass: true, counted_by: 'usage.prompt_tokens', limited_by: 'window', token_limit: 8192 });
      expect(lc.prepared_prompt_tokens + RETRIEVAL_ANSWER_TOKENS).toBeLessThan(8192);
      expect(lc.prepared_prompt_tokens).toBeGreaterThan(8192 - RETRIEVAL_ANSWER_TOKENS - 200);
      expect(lc.counts).toBeLessThanOrEqual(5);
      const byId = Object.fromEntries((report.protocol as Json[]).map((c) => [c.id, c]));
      expect(byId['protocol-unicode-roundtrip']).toMatchObject({ pass: null });
      expect(byId['protocol-unicode-roundtrip'].skipped).toMatch(/no \/tokenize \(HTTP 404\)/);
      for (const c of (report.protocol as Json[]).filter((x) => x.pass !== null)) expect(c.pass, `${c.id}: ${c.reason}`).toBe(true);
      expect(report.protocol_passes).toBe(5);
      expect(report.request_isolation).toMatchObject({ pass: true, word_check_vacuous: false, compared_by: 'text', concurrent_equal_to_solo: 3 });
      expect(report.request_isolation_passed).toBe(true);
      expect(report.identical_greedy_completions).toBe(true);
      expect(stderr).toMatch(/^protocol-unicode-roundtrip +skipped/m);
      expect(o.hits.get('/tokenize')).toBeGreaterThan(0);
    } finally {
      await o.close();
    }
  });

  it('an answer carrying another request\'s code word fails the isolation check (the report is still complete)', async () => {
    const o = await startOracleServer({ fault: 'leak' });
    try {
      const { code, report } = await diagnoseInProcess(['--endpoint', o.url, ...small]);
      expect(report.status).toBe('complete');
      expect(code).toBe(0);
      expect(report.request_isolation_passed).toBe(false);
      expect(report.request_isolation.reason).toMatch(/hold another request's word/);
      expect((report.request_isolation.requests as Json[]).some((r) => r.foreign_words.length > 0)).toBe(true);
    } finally {
      await o.close();
    }
  });

  it('a server refusing vLLM\'s extra fields gets requests without them, and the report says so', async () => {
    const o = await startOracleServer({ fault: 'strict' });
    try {
      const { code, report } = await diagnoseInProcess(['--endpoint', o.url, ...small]);
      expect(report.status).toBe('complete');
      expect(code).toBe(0);
      expect(report.server.request_extras).toMatchObject({ chat_template_kwargs: false, return_token_ids: false });
      expect(report.server.request_extras.note).toMatch(/HTTP 400: Unrecognized request argument/);
      expect(report.behavior_passes).toBe(11);
      expect(report.request_isolation).toMatchObject({ pass: true, compared_by: 'text' });
    } finally {
      await o.close();
    }
  });

  it('the unicode round trip through llama.cpp\'s /tokenize and /detokenize shape ({content})', async () => {
    const o = await startOracleServer({ llamaTokenize: true });
    try {
      const { report } = await diagnoseInProcess(['--endpoint', o.url, ...small]);
      const c = (report.protocol as Json[]).find((x) => x.id === 'protocol-unicode-roundtrip')!;
      expect(c.pass, c.reason).toBe(true);
    } finally {
      await o.close();
    }
  });

  it('a server whose chat completions fail with 500: incomplete with the reason, exit 3', async () => {
    const o = await startOracleServer({ fault: 'chat-500' });
    try {
      const { code, report, stderr } = await diagnoseInProcess(['--endpoint', o.url, ...small]);
      expect(code).toBe(3);
      expect(report.status).toBe('incomplete');
      expect(report.incomplete_reasons[0]).toMatch(/HTTP 500: the oracle is broken/);
      expect(stderr).toMatch(/^status: incomplete: .*HTTP 500/m);
      // Checks that could not run are not reported as failed in the summary line.
      expect(stderr).toMatch(/identical greedy repeats not run, request isolation not run/);
    } finally {
      await o.close();
    }
  });
});

describe('bench diagnose: a setup that fails', () => {
  const small = ['--concurrency', '4', '--repeats', '2', '--decode-tokens', '16', '--compare-tokens', '8'];
  it('lists every check as not run, with the setup\'s error first (a URL path that is not the server\'s base)', async () => {
    const o = await startOracleServer({});
    try {
      const { code, report } = await diagnoseInProcess(['--endpoint', `${o.url}/foo`, ...small]);
      expect(code).toBe(3);
      expect(report.status).toBe('incomplete');
      expect(report.incomplete_reasons[0]).toMatch(/^GET \/v1\/models: HTTP 404: .*is --endpoint the server's base URL/);
      expect((report.behavior as Json[]).map((c) => c.id)).toEqual(BEHAVIOR_CHECKS.map((c) => c.id));
      expect((report.protocol as Json[]).map((c) => c.id)).toEqual([...PROTOCOL_CHECK_IDS]);
      expect((report.long_context as Json[]).map((c) => c.id)).toEqual([RETRIEVAL_ID]);
      for (const c of [...report.behavior, ...report.protocol, ...report.long_context] as Json[]) {
        expect(c).toMatchObject({ pass: false, error: 'not run: the setup failed' });
      }
      expect(report.decode_runs).toHaveLength(3);
    } finally {
      await o.close();
    }
  });
});

describe('bench diagnose (process): exit codes', () => {
  async function diagnose(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
    try {
      const r = await run(process.execPath, [BENCH, 'diagnose', ...args], { timeout: 60_000, env: { ...process.env, NO_COLOR: '1' } });
      return { code: 0, stdout: r.stdout, stderr: r.stderr };
    } catch (err) {
      const e = err as { code?: number; stdout?: string; stderr?: string };
      return { code: e.code ?? -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
    }
  }

  /** A port with nothing listening: bound, then closed. */
  async function closedPort(): Promise<number> {
    const srv = net.createServer();
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    const port = (srv.address() as net.AddressInfo).port;
    await new Promise<void>((r) => srv.close(() => r()));
    return port;
  }

  it('an unreachable endpoint: exit 4, one line naming it, no report', async () => {
    const port = await closedPort();
    const r = await diagnose(['--endpoint', `http://127.0.0.1:${port}`]);
    expect(r.code, r.stderr).toBe(4);
    expect(r.stderr.trim().split('\n'), r.stderr).toHaveLength(1);
    expect(r.stderr).toMatch(new RegExp(`cannot reach http://127\\.0\\.0\\.1:${port}/v1/models: ECONNREFUSED`));
    expect(r.stdout).toBe('');
  });

  it('an endpoint that accepts connections but never answers: exit 4 after --timeout-s', async () => {
    const sockets: net.Socket[] = [];
    const srv = net.createServer((sock) => { sockets.push(sock); });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    const port = (srv.address() as net.AddressInfo).port;
    try {
      const r = await diagnose(['--endpoint', `http://127.0.0.1:${port}`, '--timeout-s', '0.5']);
      expect(r.code, r.stderr).toBe(4);
      expect(r.stderr.trim().split('\n'), r.stderr).toHaveLength(1);
      expect(r.stderr).toMatch(/no answer within 0\.5 s/);
    } finally {
      for (const sock of sockets) sock.destroy();
      await new Promise<void>((r) => srv.close(() => r()));
    }
  });

  it('--timeout-s bounds a stream whose body never ends, with garbage collections forced meanwhile; data: [DONE] ends a stream the server keeps open', () => {
    // In a child process run with --expose-gc: a server sends one chunk and keeps the connection open.
    // The limit was AbortSignal.timeout inside AbortSignal.any, which Node 20 can collect: then it
    // never fired and the run waited for ever (a helper's fake server held it over 3 minutes).
    const root = REPO_ROOT.endsWith('/') ? REPO_ROOT : `${REPO_ROOT}/`;
    const script = `const http = await import('node:http');
      const { DiagnoseClient } = await import(${JSON.stringify(`${root}dist/src/diagnose/http-client.js`)});
      const chunk = 'data: ' + JSON.stringify({ choices: [{ index: 0, delta: { content: 'hi' }, finish_reason: null }] }) + '\\n\\n';
      const srv = http.createServer((req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(chunk);
        if (req.url.includes('done')) res.write('data: [DONE]\\n\\n'); // and the connection stays open
      });
      await new Promise((r) => srv.listen(0, '127.0.0.1', r));
      const base = 'http://127.0.0.1:' + srv.address().port;
      const gcs = setInterval(() => globalThis.gc(), 20);
      const done = await new DiagnoseClient({ baseUrl: base, timeoutMs: 60000 }).stream('/done', {});
      console.log('done: ' + done.done + ', ' + done.events.length + ' event');
      try { await new DiagnoseClient({ baseUrl: base, timeoutMs: 500 }).stream('/open', {}); console.log('no timeout'); }
      catch (e) { console.log('timeout: ' + e.message); }
      clearInterval(gcs);
      srv.closeAllConnections(); srv.close();`;
    const r = spawnSync(process.execPath, ['--expose-gc', '--input-type=module', '-e', script], { encoding: 'utf8', timeout: 50_000, killSignal: 'SIGKILL' });
    expect(r.signal, r.stderr).toBeNull(); // not killed at the limit: both streams ended
    expect(r.stdout.trim().split('\n')).toEqual(['done: true, 1 event', expect.stringMatching(/^timeout: .*\/open: no answer within 0\.5 s$/)]);
  });

  it('an --endpoint URL with credentials: exit 2 naming --endpoint and --api-key-env, the password never printed', async () => {
    for (const url of ['http://user:s3cr3t-pw@127.0.0.1:1', 'https://s3cr3t-pw@127.0.0.1:1/v1', 'user:s3cr3t-pw@127.0.0.1:1']) {
      const r = await diagnose(['--endpoint', url]);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toMatch(/--endpoint: the URL carries credentials .*--api-key-env/);
      expect(r.stderr + r.stdout).not.toContain('s3cr3t-pw');
    }
  });

  const fileInTheWay = path.join(mkdtempSync(path.join(os.tmpdir(), 'lumen-diagnose-out-')), 'lumen-diagnose-file');
  writeFileSync(fileInTheWay, 'x');
  it.each([
    [[], /required option '--endpoint <url>' not specified/],
    [['--endpoint', 'ftp://example.org'], /--endpoint: 'ftp:\/\/example\.org' is not an http:\/\/ or https:\/\/ URL/],
    [['--endpoint', 'not a url'], /--endpoint: 'not a url' is not a URL/],
    [['--endpoint', 'http://127.0.0.1:1', '--concurrency', '1'], /--concurrency: 1 is below the minimum of 2/],
    [['--endpoint', 'http://127.0.0.1:1', '--api-key-env', 'LUMEN_SURELY_UNSET_VAR'], /LUMEN_SURELY_UNSET_VAR is not set/],
    // A file in the way of its directory (a missing directory is made when the report is written).
    [['--endpoint', 'http://127.0.0.1:1', '--output', path.join(fileInTheWay, 'r.json')], /--output: .*lumen-diagnose-file is a file, not a directory/],
    // A directory: refused before anything runs (the endpoint here would be exit 4 otherwise).
    [['--endpoint', 'http://127.0.0.1:1', '--output', os.tmpdir()], /--output: .* is a directory; give a file name/],
  ])('usage error %j: exit 2 naming the flag', async (args, message) => {
    const r = await diagnose(args as string[]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(message as RegExp);
  });
});

// ---------------------------------------------------------------------------------------------
// Against a scriptable fake (test/helpers/diagnose-fake-server.ts) that sends exactly the bytes a
// test asks for: each test below forces one situation a real server can produce.

const FAST = ['--concurrency', '3', '--repeats', '2', '--decode-tokens', '6', '--compare-tokens', '4', '--timeout-s', '20'];

/** `bench diagnose` in-process against a fake with `o`; the report, exit code and stderr. */
async function diagnoseFake(o: FakeOptions, extra: string[] = []): Promise<{ code: number; report: Json; stderr: string; fake: FakeServer }> {
  const fake = await startDiagnoseFake(o);
  try {
    const r = await diagnoseInProcess(['--endpoint', fake.url, ...FAST, ...extra]);
    return { ...r, fake };
  } finally {
    await fake.close();
  }
}

const protocolCheck = (report: Json, id: string): Json => (report.protocol as Json[]).find((c) => c.id === id)!;

describe('bench diagnose against a well-behaved fake', () => {
  it('is complete, and every protocol check passes', async () => {
    const { code, report, stderr } = await diagnoseFake({});
    expect(report.status, stderr).toBe('complete');
    expect(code).toBe(0);
    for (const c of report.protocol as Json[]) expect(c.pass, `${c.id}: ${c.reason ?? c.error}`).toBe(true);
    expect(report.identical_greedy_completions).toBe(true);
  });
});

describe('malformed replies never lose the report (each becomes its check\'s finding or error)', () => {
  it('/v1/models {"data": [null]}: the setup fails with a reason, every check listed as not run, exit 3', async () => {
    const { code, report } = await diagnoseFake({ override: (r) => (r.path === '/v1/models' ? { json: { data: [null] } } : undefined) });
    expect(code).toBe(3);
    expect(report.status).toBe('incomplete');
    expect(report.incomplete_reasons[0]).toMatch(/lists no model/);
    expect(report.behavior).toHaveLength(BEHAVIOR_CHECKS.length);
  });

  it('/v1/models with null entries beside a real one: the real one is used', async () => {
    const { report, stderr } = await diagnoseFake({
      override: (r) => (r.path === '/v1/models' ? { json: { data: [null, 7, { id: 'fake-1', max_model_len: 4096 }] } } : undefined),
    });
    expect(report.status, stderr).toBe('complete');
    expect(report.model).toBe('fake-1');
  });

  it('tool_calls: [null]: behavior-tool fails with a reason', async () => {
    const { code, report } = await diagnoseFake({
      override: (r, dflt) => {
        if (r.path !== '/v1/chat/completions' || !r.body?.tools) return undefined;
        const d = dflt() as { json: Json };
        d.json.choices[0].message = { role: 'assistant', content: null, tool_calls: [null] };
        return d;
      },
    });
    expect(code).toBe(0);
    const tool = (report.behavior as Json[]).find((b) => b.id === 'behavior-tool')!;
    expect(tool).toMatchObject({ pass: false });
    expect(tool.error).toBeUndefined();
    expect(tool.reason).toMatch(/tool_calls\[0\] = null/);
    expect(check('behavior-tool').score(reply(null, [null as unknown as Json])).pass).toBe(false);
    expect(check('behavior-tool').score(reply(null, [{ function: null }])).pass).toBe(false);
  });

  it.each(['/tokenize', '/detokenize'])('%s answering 200 with a body that is not JSON: the round trip did not run, with the reason', async (route) => {
    const { code, report } = await diagnoseFake({ override: (r) => (r.path === route ? { text: 'ok' } : undefined) });
    const c = protocolCheck(report, 'protocol-unicode-roundtrip');
    expect(c.pass).toBe(false);
    expect(c.error).toMatch(/HTTP 200 with a body that is not a JSON object/);
    expect(code).toBe(3);
  });

  it('a stream whose last event is data: null: protocol-stream-usage fails, saying so', async () => {
    const { report } = await diagnoseFake({
      override: (r, dflt) => {
        if (!r.body?.stream_options?.include_usage) return undefined;
        const d = dflt() as { sse: unknown[] };
        d.sse.splice(d.sse.length - 1, 0, null); // before [DONE]
        return d as FakeReply;
      },
    });
    const c = protocolCheck(report, 'protocol-stream-usage');
    expect(c.pass).toBe(false);
    expect(c.error).toBeUndefined();
    expect(c.reason).toMatch(/last event is null/);
  });

  it('any unforeseen exception inside a check becomes that check\'s error; the others still run', async () => {
    const r = await runCheck('x', async () => { throw new TypeError('Cannot read properties of null (reading \'id\')'); });
    expect(r).toMatchObject({ id: 'x', pass: false, response: null });
    expect(r.error).toMatch(/^internal error .*TypeError: Cannot read properties of null/);
  });
});

describe('request isolation: never a pass without evidence', () => {
  it('every isolation answer changes under load (the word check vacuous): pass null, request_isolation_passed false, the summary says not determinable', async () => {
    const { code, report, stderr } = await diagnoseFake({
      override: (r, dflt) => {
        if (r.path !== '/v1/chat/completions' || !r.prompt.includes('Your code word is') || r.body?.stream || r.seen === 0) return undefined;
        const d = dflt() as { json: Json };
        d.json.choices[0].message.content = ` changed${d.json.choices[0].message.content}`;
        return d;
      },
    });
    expect(report.status, stderr).toBe('complete');
    expect(code).toBe(0);
    const iso = report.request_isolation;
    expect(iso).toMatchObject({ pass: null, word_check_vacuous: true, concurrent_equal_to_solo: 0, compared: 2 });
    expect(iso.not_determinable).toMatch(/^not determinable/);
    expect(report.request_isolation_passed).toBe(false);
    expect(stderr).toMatch(/^request-isolation +undetermined/m);
    expect(stderr).toMatch(/request isolation not determinable/);
  });

  it('the same answers alone and under load (the word check vacuous): a pass judged by equality', async () => {
    const { report } = await diagnoseFake({});
    expect(report.request_isolation).toMatchObject({ pass: true, word_check_vacuous: true, concurrent_equal_to_solo: 2, compared: 2 });
    expect(report.request_isolation_passed).toBe(true);
  });
});

describe('request isolation: the cancelled request', () => {
  const words = codeWords(0, 3); // seed 0, --concurrency 3 (FAST): the last is the cancelled one's
  const isCancelled = (r: FakeRequest) => r.path === '/v1/chat/completions' && r.body?.stream === true && r.prompt.includes(`code word is ${words[2]}.`);

  it('is cancelled after its first chunk with text, and that text is checked: a foreign word there fails the check', async () => {
    const { report } = await diagnoseFake({
      override: (r) => (isCancelled(r)
        ? { sse: [chunk({ role: 'assistant', content: '' }), chunk({ content: `${words[0]} ` }), chunk({ content: 'more' }), chunk({}, 'stop'), '[DONE]'] }
        : undefined),
    });
    const iso = report.request_isolation;
    const cancelled = (iso.requests as Json[]).find((x) => x.cancelled)!;
    expect(cancelled.concurrent_text).toBe(`${words[0]} `);
    expect(cancelled.foreign_words).toEqual([words[0]]);
    expect(cancelled.pass).toBe(false);
    expect(iso.cancelled_mid_stream).toBe(true);
    expect(iso.pass).toBe(false);
    expect(report.request_isolation_passed).toBe(false);
  });

  it('a well-behaved server: the partial text is not empty, and is checked', async () => {
    const { report } = await diagnoseFake({});
    const cancelled = (report.request_isolation.requests as Json[]).find((x) => x.cancelled)!;
    expect(cancelled.concurrent_text).not.toBe('');
    expect(cancelled).toMatchObject({ pass: true, judged_by: 'foreign_words_only' });
    expect(report.request_isolation.cancelled_mid_stream).toBe(true);
  });

  it('a stream that ends without any text: nothing was checked, so the check is not determinable', async () => {
    const { report } = await diagnoseFake({
      override: (r) => (isCancelled(r) ? { sse: [chunk({ role: 'assistant', content: '' }), chunk({}, 'stop'), '[DONE]'] } : undefined),
    });
    const iso = report.request_isolation;
    expect((iso.requests as Json[]).find((x) => x.cancelled)).toMatchObject({ pass: null, concurrent_text: '' });
    expect(iso.pass).toBeNull();
    expect(iso.not_determinable).toMatch(/cancelled request streamed no text/);
    expect(iso.cancelled_mid_stream).toBe(false);
  });

  it('a model whose answer starts with whitespace: the cancel waits for text to judge (it cancelled at the "\\n\\n" and was never judged)', async () => {
    const { report } = await diagnoseFake({
      override: (r) => (isCancelled(r) ? { sse: [chunk({ role: 'assistant', content: '' }), chunk({ content: '\n\n' }), chunk({ content: 'plain words' }), chunk({ content: ' more' }), chunk({}, 'stop'), '[DONE]'] } : undefined),
    });
    const cancelled = (report.request_isolation.requests as Json[]).find((x) => x.cancelled)!;
    expect(cancelled).toMatchObject({ concurrent_text: '\n\nplain words', pass: true, judged_by: 'foreign_words_only' });
    expect(report.request_isolation.cancelled_mid_stream).toBe(true);
  });
});

describe('one "did it run" rule for every check (docs/diagnose.md, "What ran means")', () => {
  const err = (status: number, message = 'no') => ({ status, json: { error: { message, type: 'invalid_request_error' } } });
  const chat = (r: FakeRequest) => r.path === '/v1/chat/completions';

  it('the rule: 2xx an answer; 400/413/422 a refusal of the request (ran, failed); anything else not run', () => {
    expect([200, 201, 400, 413, 422, 401, 403, 404, 405, 408, 429, 409, 500, 503].map((s) => [s, replyKind(s)])).toEqual([
      [200, 'answer'], [201, 'answer'], [400, 'refused'], [413, 'refused'], [422, 'refused'], [401, 'not-run'], [403, 'not-run'], [404, 'not-run'],
      [405, 'not-run'], [408, 'not-run'], [429, 'not-run'], [409, 'not-run'], [500, 'not-run'], [503, 'not-run']]);
  });

  it('a 400 refusing the stop field: protocol-stop-sequence ran and failed with the server\'s error; the report is complete', async () => {
    const { code, report, stderr } = await diagnoseFake({ override: (r) => (chat(r) && r.body?.stop ? err(400, 'stop is not supported') : undefined) });
    const c = protocolCheck(report, 'protocol-stop-sequence');
    expect(c).toMatchObject({ pass: false, response: { error: { message: 'stop is not supported' } } });
    expect(c.error).toBeUndefined();
    expect(c.reason).toMatch(/refused the request: HTTP 400: stop is not supported/);
    expect(report.status, stderr).toBe('complete');
    expect(code).toBe(0);
  });

  it('400s on the isolation, repeat and decode requests, and a 413 on the retrieval prompt: each ran and failed (complete, exit 0)', async () => {
    const { code, report, stderr } = await diagnoseFake({
      override: (r) => {
        if (!chat(r)) return undefined;
        if (r.prompt.includes('Your code word is')) return err(400, 'code words are not allowed');
        if (r.prompt.startsWith('Write a short paragraph about the sea at night.')) return err(422, 'no');
        if (r.body?.stream_options?.include_usage && r.body?.max_tokens === 6) return err(400, 'stream_options is not supported');
        if (r.prompt.includes('vault code') && r.body?.max_tokens === RETRIEVAL_ANSWER_TOKENS) return err(413, 'too large');
        return undefined;
      },
    });
    expect(report.status, stderr).toBe('complete');
    expect(code).toBe(0);
    expect(report.request_isolation).toMatchObject({ pass: false, response: { error: { message: 'code words are not allowed' } } });
    expect(report.request_isolation.error).toBeUndefined();
    expect(report.greedy_repeats).toMatchObject({ pass: false });
    expect(report.greedy_repeats.reason).toMatch(/HTTP 422/);
    expect(report.long_context[0]).toMatchObject({ pass: false, response: { error: { message: 'too large' } } });
    expect(report.long_context[0].reason).toMatch(/refused the prompt: HTTP 413: too large/);
    for (const d of [report.initial_decode, ...report.decode_runs] as Json[]) {
      expect(d.error).toBeUndefined();
      expect(d.refused).toMatch(/HTTP 400: stream_options is not supported/);
      expect(d.decode_tokens_per_second).toBeNull();
    }
    expect(stderr).toMatch(/^initial_decode +REFUSED/m);
  });

  it('a 400 on the retrieval\'s first sizing probe (no /tokenize): the retrieval did not run (the tool\'s probe, not the check\'s finding)', async () => {
    const { report } = await diagnoseFake({
      override: (r) => (r.path === '/tokenize' ? err(404) : chat(r) && r.prompt.includes('vault code') && r.body?.max_tokens === 1 ? err(400, 'no probes') : undefined),
    });
    expect(report.long_context[0].pass).toBe(false);
    expect(report.long_context[0].error).toMatch(/sizing probe: HTTP 400: no probes/);
    expect(report.incomplete_reasons.join('\n')).toMatch(/sizing probe: HTTP 400: no probes/);
  });

  it('sizing probes past the server\'s context refused (400) once a smaller one was answered: the search goes on and the retrieval runs', async () => {
    let refused = 0;
    const { report } = await diagnoseFake({
      override: (r) => {
        if (r.path === '/tokenize') return err(404);
        if (chat(r) && r.prompt.includes('vault code') && r.body?.max_tokens === 1 && r.prompt.length > 3000) {
          refused++;
          return err(400, 'context length exceeded');
        }
        return undefined;
      },
    });
    expect(refused).toBeGreaterThan(0);
    const lc = report.long_context[0] as Json;
    expect(lc.error, JSON.stringify(lc)).toBeUndefined();
    expect(lc.counted_by).toBe('usage.prompt_tokens');
    expect(lc.prepared_prompt_tokens).toBeGreaterThan(0);
  });

  it.each([401, 404, 429])('a %i on the stream checks: they did not run (the server refused service), incomplete, exit 3', async (status) => {
    const { code, report } = await diagnoseFake({ override: (r) => (chat(r) && r.body?.stream === true ? err(status, 'refused service') : undefined) });
    expect(code).toBe(3);
    for (const id of ['protocol-stream-equals-non-streamed', 'protocol-stream-usage']) {
      const c = protocolCheck(report, id);
      expect(c.pass).toBe(false);
      expect(c.error).toMatch(new RegExp(`stream: HTTP ${status}: refused service`));
    }
    expect(report.incomplete_reasons.join('\n')).toMatch(/protocol-stream-usage: stream: HTTP/);
  });

  it('a 401 on the malformed requests: not run; a 500 there: ran and failed (that is the finding)', async () => {
    const bad = (r: FakeRequest) => chat(r) && (r.body === null || !Array.isArray(r.body.messages));
    const a = await diagnoseFake({ override: (r) => (bad(r) ? err(401, 'key') : undefined) });
    expect(protocolCheck(a.report, 'protocol-malformed-request').error).toMatch(/HTTP 401/);
    const b = await diagnoseFake({ override: (r) => (bad(r) ? err(500, 'parse error') : undefined) });
    const c = protocolCheck(b.report, 'protocol-malformed-request');
    expect(c).toMatchObject({ pass: false, statuses: [500, 500] });
    expect(c.error).toBeUndefined();
  });
});

describe('protocol-stop-sequence: the text must be the reference cut before the stop string', () => {
  const stopped = (content: string) => (r: FakeRequest, dflt: () => FakeReply): FakeReply | undefined => {
    if (r.path !== '/v1/chat/completions' || !r.body?.stop) return undefined;
    const d = dflt() as { json: Json };
    d.json.choices[0].message.content = content;
    d.json.choices[0].finish_reason = 'stop';
    return d;
  };

  it('an empty reply with finish_reason stop fails', async () => {
    const { report } = await diagnoseFake({ override: stopped('') });
    const c = protocolCheck(report, 'protocol-stop-sequence');
    expect(c).toMatchObject({ pass: false, text_equals_reference_before_stop: false });
    expect(c.expected_text).not.toBe('');
  });

  it('a reply cut too early (the stop string absent) fails', async () => {
    const { report } = await diagnoseFake({ override: stopped(' alpha') });
    expect(protocolCheck(report, 'protocol-stop-sequence')).toMatchObject({ pass: false });
  });

  it('a reference answer with no stop string to take (one character repeated): skipped, not failed', async () => {
    const { report } = await diagnoseFake({
      override: (r, dflt) => {
        if (r.path !== '/v1/chat/completions' || r.body?.stop || r.body?.stream || !JSON.stringify(r.body).includes('lowercase English alphabet')) return undefined;
        const d = dflt() as { json: Json };
        d.json.choices[0].message.content = 'a'.repeat(32);
        return d;
      },
    });
    expect(protocolCheck(report, 'protocol-stop-sequence')).toMatchObject({ pass: null, skipped: expect.stringMatching(/has no 3 characters whose first occurrence follows other text: no stop string to test$/) });
  });

  it('the stop string is never one whose first occurrence leaves no text before it', () => {
    // 'abc' from the middle first occurs at 0: the next candidate is taken.
    expect(stopFromReference('abcabcx')).toEqual({ stop: 'bcx', before: 'abca' });
    expect(stopFromReference('abcabc')).toBeNull();
    expect(stopFromReference('aaaaaa')).toBeNull();
  });
});

describe('decode runs: a stream that cannot be timed did not run', () => {
  const decodeStream = (r: FakeRequest) => r.path === '/v1/chat/completions' && r.body?.stream === true && r.body?.max_tokens === 6;

  it('cut off after a few tokens (no finish chunk, no [DONE]): every run not run with the reason, incomplete, exit 3', async () => {
    const { code, report, stderr } = await diagnoseFake({
      override: (r, dflt) => {
        if (!decodeStream(r)) return undefined;
        const d = dflt() as { sse: unknown[] };
        return { sse: d.sse.slice(0, 4) as Json[] }; // role chunk + 3 tokens
      },
    });
    expect(code).toBe(3);
    expect(report.status).toBe('incomplete');
    for (const d of [report.initial_decode, ...report.decode_runs] as Json[]) {
      expect(d.error).toMatch(/ended without a chunk carrying finish_reason and without data: \[DONE\]/);
    }
    expect(stderr).toMatch(/^initial_decode +NOT RUN/m);
  });

  it('a JSON body answering stream: true: not run, "not an event stream"', async () => {
    const { code, report } = await diagnoseFake({
      override: (r) => (decodeStream(r) ? { json: { id: 'x', object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }] } } : undefined),
    });
    expect(code).toBe(3);
    expect(report.initial_decode.error).toMatch(/HTTP 200 \(application\/json\) carried no SSE data events: not an event stream/);
    expect(report.median_decode_tokens_per_second).toBeNull();
  });

  it('a well-behaved stream ran, and ended with [DONE]', async () => {
    const { report } = await diagnoseFake({});
    expect(report.initial_decode.error).toBeUndefined();
    expect(report.initial_decode.stream_done).toBe(true);
    expect(report.initial_decode.finish_reason).toBe('length');
  });
});

describe('--output', () => {
  it.skipIf(!existsSync('/dev/full'))('a write that fails after the run (the disk full): the report goes to stdout, exit 1', async () => {
    const fake = await startDiagnoseFake({});
    let stdout = '';
    let stderr = '';
    const out = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => { stdout += String(chunk); return true; });
    const err = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => { stderr += String(chunk); return true; });
    try {
      const code = await main(['node', 'bench', 'diagnose', '--endpoint', fake.url, ...FAST, '--output', '/dev/full']);
      expect(code).toBe(1);
    } finally {
      out.mockRestore();
      err.mockRestore();
      await fake.close();
    }
    expect(JSON.parse(stdout).status).toBe('complete');
    expect(stderr).toMatch(/cannot write --output \/dev\/full: .*the report went to stdout/);
  });
});

describe('a refused key', () => {
  const unauthorized = { status: 401, json: { error: { message: 'invalid api key' } } };
  it('a 401 on /v1/models says the key was refused and names --api-key-env (not "give --model")', async () => {
    const { code, report } = await diagnoseFake({ override: (r) => (r.path === '/v1/models' ? unauthorized : undefined) });
    expect(code).toBe(3);
    expect(report.incomplete_reasons[0]).toMatch(/^GET \/v1\/models: HTTP 401: invalid api key; the server refused a request without a key: give one with --api-key-env VAR$/);
    process.env.LUMEN_DIAGNOSE_FAKE_KEY = 'k';
    try {
      const b = await diagnoseFake({ override: (r) => (r.path === '/v1/models' ? unauthorized : undefined) }, ['--api-key-env', 'LUMEN_DIAGNOSE_FAKE_KEY']);
      expect(b.report.incomplete_reasons[0]).toMatch(/the server refused the key given with --api-key-env$/);
    } finally {
      delete process.env.LUMEN_DIAGNOSE_FAKE_KEY;
    }
  });

  it('with --model, a 401 on the first chat request says the same', async () => {
    const { report } = await diagnoseFake({ override: () => unauthorized }, ['--model', 'fake-1']);
    expect(report.incomplete_reasons[0]).toMatch(/a minimal chat request failed: HTTP 401: invalid api key; the server refused the key .*--api-key-env/);
  });
});

describe('decode runs: a usage chunk with a bad completion_tokens', () => {
  const withUsage = (value: unknown) => (r: FakeRequest, dflt: () => FakeReply): FakeReply | undefined => {
    if (!(r.body?.stream === true && r.body?.max_tokens === 6)) return undefined;
    const d = dflt() as { sse: Json[] };
    const u = d.sse.find((e) => typeof e === 'object' && e.usage)!;
    if (value === undefined) delete u.usage.completion_tokens;
    else u.usage.completion_tokens = value;
    return d as FakeReply;
  };

  it('a string completion_tokens names the field, not "no usage chunk"', async () => {
    const { report } = await diagnoseFake({ override: withUsage('6') });
    expect(report.initial_decode.decode_rate_note).toBe('usage.completion_tokens is "6", not a whole number');
    expect(report.initial_decode.decode_tokens_per_second).toBeNull();
  });

  it('a usage chunk without completion_tokens says so', async () => {
    const { report } = await diagnoseFake({ override: withUsage(undefined) });
    expect(report.initial_decode.decode_rate_note).toBe('the usage chunk has no completion_tokens');
  });
});

describe('protocol-stream-usage: the count must agree with the streamed tokens', () => {
  const usageSays = (completion: number, prompt?: number) => (r: FakeRequest, dflt: () => FakeReply): FakeReply | undefined => {
    if (!(r.body?.stream === true && r.body?.max_tokens === 8)) return undefined;
    const d = dflt() as { sse: Json[] };
    const u = d.sse.find((e) => typeof e === 'object' && e.usage)!.usage;
    u.completion_tokens = completion;
    if (prompt !== undefined) u.prompt_tokens = prompt;
    u.total_tokens = u.prompt_tokens + completion;
    return d as FakeReply;
  };

  it('completion_tokens 0 after 8 streamed tokens (stopped for length) fails, naming both', async () => {
    const { report } = await diagnoseFake({ override: usageSays(0) });
    const c = protocolCheck(report, 'protocol-stream-usage');
    expect(c.pass).toBe(false);
    expect(c.reason).toMatch(/usage disagrees with the stream: usage.completion_tokens 0, but the stream stopped for length at max_tokens 8/);
  });

  it('prompt_tokens 0 fails; the well-behaved count passes', async () => {
    expect(protocolCheck((await diagnoseFake({ override: usageSays(8, 0) })).report, 'protocol-stream-usage').pass).toBe(false);
    const ok = protocolCheck((await diagnoseFake({})).report, 'protocol-stream-usage');
    expect(ok).toMatchObject({ pass: true, streamed_text_chunks: 8, finish_reason: 'length' });
  });

  it('the rule: ids counted exactly; length means max_tokens; otherwise between the text chunks and max_tokens', () => {
    expect(usageDisagreement(3, { tokenIds: [1, 2, 3], finishReason: 'stop', textChunks: 3 }, 8)).toBeNull();
    expect(usageDisagreement(4, { tokenIds: [1, 2, 3], finishReason: 'stop', textChunks: 3 }, 8)).toMatch(/3 token ids were streamed/);
    expect(usageDisagreement(7, { tokenIds: null, finishReason: 'length', textChunks: 7 }, 8)).toMatch(/stopped for length/);
    expect(usageDisagreement(5, { tokenIds: null, finishReason: 'stop', textChunks: 3 }, 8)).toBeNull();
    expect(usageDisagreement(2, { tokenIds: null, finishReason: 'stop', textChunks: 3 }, 8)).toMatch(/3 chunks carried text/);
    expect(usageDisagreement(9, { tokenIds: null, finishReason: 'stop', textChunks: 3 }, 8)).toMatch(/exceeds max_tokens 8/);
  });
});

describe('replies are size-capped', () => {
  const opts = (endpoint: string) => ({
    ...DIAGNOSE_DEFAULTS, endpoint, timeoutMs: 20_000, decodeRuns: 1, repeats: 2, concurrency: 2, decodeTokens: 6, compareTokens: 4,
    maxReplyBytes: 256 * 1024, maxStreamBytes: 256 * 1024,
  });

  it.each([true, false])('a /v1/models body over the cap (Content-Length declared: %s): the setup fails with a clear reason, the report kept', async (declare) => {
    const fake = await startDiagnoseFake({ override: (r) => (r.path === '/v1/models' ? { big: 2 * 1024 * 1024, declare } : undefined) });
    try {
      const report = await runDiagnose(opts(fake.url));
      expect(report.status).toBe('incomplete');
      expect((report.incomplete_reasons as string[])[0]).toBe('GET /v1/models: the reply is larger than 256.0 KiB (the cap on one reply); not read further');
    } finally {
      await fake.close();
    }
  });

  it('a chat reply and a stream over the cap: those checks did not run, with the reason; the others ran', async () => {
    const huge = 'x'.repeat(300 * 1024);
    const fake = await startDiagnoseFake({
      override: (r) => {
        if (r.path !== '/v1/chat/completions') return undefined;
        if (r.body?.stream === true && r.body?.max_tokens === 6) return { sse: [chunk({ role: 'assistant', content: '' }), chunk({ content: huge }), chunk({}, 'length'), '[DONE]'] };
        if (r.prompt.startsWith('What is 17')) return { big: 2 * 1024 * 1024 };
        return undefined;
      },
    });
    try {
      const report = await runDiagnose(opts(fake.url));
      const arith = (report.behavior as Json[]).find((b) => b.id === 'behavior-arithmetic')!;
      expect(arith.error).toBe('POST /v1/chat/completions: the reply is larger than 256.0 KiB (the cap on one reply); not read further');
      expect((report.initial_decode as Json).error).toBe('POST /v1/chat/completions: the stream is larger than 256.0 KiB (the cap on one stream); not read further');
      expect((report.behavior as Json[]).find((b) => b.id === 'behavior-french')!.error).toBeUndefined();
    } finally {
      await fake.close();
    }
  });
});

describe('non-stream answers to stream: true, and non-object stream events', () => {
  it('the isolation check\'s cancelled stream answered with JSON: not run, "not an event stream"', async () => {
    const { code, report } = await diagnoseFake({
      override: (r) => (r.body?.stream === true && r.prompt.includes('Your code word is') ? { json: { id: 'x', choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }] } } : undefined),
    });
    expect(code).toBe(3);
    expect(report.request_isolation.error).toMatch(/the cancelled stream: HTTP 200 \(application\/json\) carried no SSE data events: not an event stream/);
  });

  it('a decode stream with a data: null event: not run, naming a non-object event', async () => {
    const { report } = await diagnoseFake({
      override: (r, dflt) => {
        if (!(r.body?.stream === true && r.body?.max_tokens === 6)) return undefined;
        const d = dflt() as { sse: unknown[] };
        d.sse.splice(d.sse.length - 1, 0, null);
        return d as FakeReply;
      },
    });
    expect(report.initial_decode.error).toBe('decode stream carried an event that is not a JSON object: null');
  });
});
