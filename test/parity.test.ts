// Parity with llama.cpp: f32 synthetic checkpoints are converted to f32 GGUF (bench convert's
// code path) and evaluated by llama.cpp (node-llama-cpp, CPU) and by our engine through the CLI
// (`node bin/bench.js prompt`, so dist/ must be built). Checked per shape:
//  - log-softmax of every prompt position within 1e-3 (prompts of 1, 63, 64, 65 and 150 tokens:
//    around the 64-token GDN chunk and across several chunks);
//  - greedy continuation of 32 tokens identical;
//  - our tokenizer's ids equal llama.cpp's for a few strings.
// llama.cpp gives probabilities, not raw logits (see test/helpers/llama-ref.ts), so the
// comparison is on log-softmax. The prompts are prefixes of one pseudo-random sequence; the
// reference rows come from one llama.cpp pass over the longest prompt (a causal model's rows of
// a prefix are the prefix's rows; a test below checks llama.cpp agrees with itself on that).
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { convertCheckpoint } from '../src/convert/convert.js';
import { writeSynthCheckpoint } from '../src/model/synth.js';
import type { TextConfig } from '../src/model/types.js';
import {
  closeAllRefs, compareLogSoftmax, logSoftmax, openRef, pseudoRandomIds, type LlamaRef,
} from './helpers/llama-ref.js';

const execFileP = promisify(execFile);
const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const BENCH = join(ROOT, 'bin', 'bench.js');
const V = 248320;
const NORMAL_TOKENS = 248044; // ids below this are plain BPE tokens
const PROMPT_LENS = [1, 63, 64, 65, 150];
const MAX_LEN = Math.max(...PROMPT_LENS);
const NEW_TOKENS = 32;
const TOL = 1e-3;
const ENGINE_THREADS = 2;
/** One `bench prompt` run on these tiny models takes seconds; a hung run is killed before the test times out. */
const ENGINE_TIMEOUT_MS = 100_000;

interface Shape {
  name: string;
  overrides: Partial<TextConfig>;
  seed: number;
}

// Small shapes (the tiny preset: hidden 128, 4 layers, head dim 256, linear heads of 128).
const SHAPES: Shape[] = [
  { name: 'nk = nv = 2, tied (0.8B/2B layout)', overrides: {}, seed: 101 },
  { name: 'nv = 2 nk, tied (4B layout)', overrides: { linearNumValueHeads: 4 }, seed: 102 },
  {
    name: 'nv = 2 nk, untied, hidden 256, 8 layers (9B layout)',
    overrides: {
      hiddenSize: 256, numLayers: 8, intermediateSize: 512, numHeads: 4, numKvHeads: 2,
      linearNumValueHeads: 4, tieWordEmbeddings: false,
    },
    seed: 103,
  },
];

async function bench(args: string[]): Promise<string> {
  try {
    const { stdout } = await execFileP(process.execPath, [BENCH, ...args], { cwd: ROOT, maxBuffer: 64 << 20, timeout: ENGINE_TIMEOUT_MS, killSignal: 'SIGKILL' });
    return stdout;
  } catch (err) {
    const e = err as { stderr?: string; message: string; killed?: boolean };
    const why = e.killed ? `killed after ${ENGINE_TIMEOUT_MS / 1000} s` : (e.stderr ?? '').trim() || e.message;
    const shown = args.map((a) => (a.length > 40 ? `${a.slice(0, 37)}...` : a)).join(' ');
    throw new Error(`bench ${shown} failed: ${why}`);
  }
}

/** Our engine's log-softmax rows for `prompt` (bench prompt --max-new-tokens 0 --logits-out). */
async function engineLogSoftmax(modelDir: string, prompt: number[], work: string): Promise<Float32Array> {
  const file = join(work, `logits-${prompt.length}.f32`);
  await bench([
    'prompt', '--model-path', modelDir, '--prompt-ids', prompt.join(','), '--max-new-tokens', '0',
    '--logits-out', file, '--device', 'cpu', '--threads', String(ENGINE_THREADS),
  ]);
  const buf = readFileSync(file);
  rmSync(file, { force: true });
  expect(buf.length, 'logits file size').toBe(prompt.length * V * 4);
  const logits = new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4);
  const out = new Float32Array(logits.length);
  for (let r = 0; r < prompt.length; r++) logSoftmax(logits.subarray(r * V, (r + 1) * V), out.subarray(r * V, (r + 1) * V));
  return out;
}

/** Our engine's greedy continuation (bench prompt --prompt-ids ... --max-new-tokens N). */
async function engineGreedy(modelDir: string, prompt: number[], n: number): Promise<number[]> {
  const stdout = await bench([
    'prompt', '--model-path', modelDir, '--prompt-ids', prompt.join(','), '--max-new-tokens', String(n),
    '--ignore-eos', '--device', 'cpu', '--threads', String(ENGINE_THREADS),
  ]);
  const line = stdout.trim().split('\n').pop() ?? '';
  return line.split(/\s+/).filter(Boolean).map(Number);
}

function describeRows(cmp: ReturnType<typeof compareLogSoftmax>): string {
  return `max |Δ log-softmax| ${cmp.maxAbs.toExponential(3)} at position ${cmp.row} token ${cmp.token}; ` +
    `max |Δ(logit - max)| ${cmp.maxAbsCentered.toExponential(3)}; argmax mismatches ${cmp.argmaxMismatches}; ` +
    `below-float-floor violations ${cmp.floorViolations}`;
}

const prompt = pseudoRandomIds(MAX_LEN, 2024, 0, NORMAL_TOKENS);

let work: string;
const models = new Map<string, { dir: string; gguf: string }>();

beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), 'lumen-parity-'));
});

afterAll(async () => {
  await closeAllRefs();
  if (work) rmSync(work, { recursive: true, force: true });
});

/** Synthesize (f32) and convert (f32 GGUF) a shape once per test file. */
async function model(shape: Shape): Promise<{ dir: string; gguf: string }> {
  let m = models.get(shape.name);
  if (!m) {
    const dir = join(work, `m${shape.seed}`);
    await writeSynthCheckpoint({ preset: 'tiny', out: dir, dtype: 'f32', seed: shape.seed, overrides: shape.overrides, vision: false });
    const gguf = join(work, `m${shape.seed}.gguf`);
    await convertCheckpoint(dir, gguf, { dtype: 'f32' });
    m = { dir, gguf };
    models.set(shape.name, m);
  }
  return m;
}

describe.each(SHAPES)('parity with llama.cpp: $name', (shape) => {
  let dir: string;
  let ref: LlamaRef;
  /** llama.cpp log-softmax rows for the longest prompt, [MAX_LEN, V]. */
  let refRows: Float32Array;
  const refGreedy = new Map<number, number[]>();

  beforeAll(async () => {
    const m = await model(shape);
    dir = m.dir;
    ref = await openRef(m.gguf, { contextSize: 512 });
    refRows = (await ref.evaluate(prompt, { logSoftmax: 'all' })).logSoftmax;
    for (const n of PROMPT_LENS) {
      refGreedy.set(n, (await ref.evaluate(prompt.slice(0, n), { newTokens: NEW_TOKENS, logSoftmax: 'none' })).greedy);
    }
  }, 600_000);

  afterAll(() => {
    refRows = new Float32Array(0); // ~150 MB per shape
  });

  it('reference: llama.cpp rows are finite and spread out', () => {
    let nonFinite = 0;
    let spread = Infinity;
    for (let r = 0; r < MAX_LEN; r++) {
      const row = refRows.subarray(r * V, (r + 1) * V);
      let max = -Infinity;
      let min = Infinity;
      for (const v of row) {
        if (!Number.isFinite(v)) nonFinite++;
        else { max = Math.max(max, v); min = Math.min(min, v); }
      }
      spread = Math.min(spread, max - min);
    }
    expect(nonFinite).toBe(0);
    expect(spread).toBeGreaterThan(5);
    for (const n of PROMPT_LENS) expect(refGreedy.get(n)).toHaveLength(NEW_TOKENS);
  });

  // Once, on the 4B layout: justifies slicing the reference rows of the longest prompt.
  if (shape === SHAPES[1]) it("reference: llama.cpp's rows of a 65-token prompt equal the first 65 rows of the long run", async () => {
    const short = (await ref.evaluate(prompt.slice(0, 65), { logSoftmax: 'all' })).logSoftmax;
    const cmp = compareLogSoftmax(short, refRows.subarray(0, 65 * V), V);
    expect(cmp.maxAbs, describeRows(cmp)).toBeLessThan(TOL / 20);
    expect(cmp.argmaxMismatches).toBe(0);
  });

  it.each(PROMPT_LENS)(`log-softmax within ${TOL} of llama.cpp at every position, prompt of %i`, async (n) => {
    const ours = await engineLogSoftmax(dir, prompt.slice(0, n), work);
    const cmp = compareLogSoftmax(ours, refRows.subarray(0, n * V), V);
    expect(cmp.maxAbs, describeRows(cmp)).toBeLessThanOrEqual(TOL);
    expect(cmp.floorViolations, describeRows(cmp)).toBe(0);
  });

  it.each(PROMPT_LENS)(`greedy continuation of ${NEW_TOKENS} tokens identical, prompt of %i`, async (n) => {
    const ours = await engineGreedy(dir, prompt.slice(0, n), NEW_TOKENS);
    expect(ours).toEqual(refGreedy.get(n));
  });
});

describe('tokenizer parity with llama.cpp', () => {
  const TEXTS = [
    'Hello world',
    'The quick brown fox jumps over the lazy dog.',
    '  leading spaces,\ttabs\n\nand blank lines\n',
    'numbers 1234567 and 3.14159, dates 2024-06-01',
    "don't, you'll, I'M, they've",
    'café naïve résumé Ωmega',
    'नमस्ते दुनिया', // combining vowel signs (\p{M})
    '日本語のテキストと中文',
    'emoji 🙂👍🏽 and symbols <>{}[]()=>',
    '<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n',
  ];

  it('our tokenizer gives the ids llama.cpp gives', async () => {
    const m = await model(SHAPES[0]!);
    const ref = await openRef(m.gguf, { contextSize: 512 });
    // Loaded lazily so the llama.cpp half above runs even before src/model/tokenizer.ts exists.
    const { loadTokenizer } = await import('../src/model/tokenizer.js');
    const tok = await loadTokenizer(m.dir);
    for (const text of TEXTS) {
      const theirs = ref.tokenize(text, true);
      expect(theirs.length, text).toBeGreaterThan(0);
      expect(tok.encode(text), JSON.stringify(text)).toEqual(theirs);
    }
  });

  it('llama.cpp tokenizes the converted vocabulary sanely', async () => {
    const m = await model(SHAPES[0]!);
    const ref = await openRef(m.gguf, { contextSize: 512 });
    expect(ref.tokenize('<|im_end|>', true)).toEqual([248046]);
    expect(ref.tokenize('<|endoftext|>', true)).toEqual([248044]);
    for (const text of TEXTS) {
      const ids = ref.tokenize(text, true);
      expect(ids.every((i) => i >= 0 && i < 248077), text).toBe(true);
      expect(ref.detokenize(ids, true), text).toBe(text);
    }
  });
});

it('bin/bench.js and dist/ exist (the engine half runs the built CLI)', () => {
  expect(existsSync(BENCH)).toBe(true);
  expect(existsSync(join(ROOT, 'dist', 'src', 'cli', 'main.js')), 'dist/ missing: run `npm run build`').toBe(true);
});
