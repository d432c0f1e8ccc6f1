// The f16 KV cache against llama.cpp's: an f32 synthetic checkpoint (9B layout cut down: hidden
// 256, 8 layers, 4 query heads over 2 KV heads, so every KV head serves a group) converted to an
// f32 GGUF, evaluated over a 150-token prompt (ten KV blocks) by llama.cpp with an F32 and an F16
// KV cache (no flash attention) and by our engine through the CLI with --kv-cache-dtype f32 and f16.
//
// Both engines round K and V to f16 the same way (nearest-even). llama.cpp's F16 path also rounds
// the query to f16 for the scores and the softmax probabilities to f16 for the values (its matmul
// converts the f32 operand to the cache's type), which ours does not (its attention stays f32 after
// widening K and V). So ours with f16 must sit closer to llama.cpp's F16 run than llama.cpp's F16
// run sits to its own F32 run (the f16 cache's whole effect), and our f32 and f16 runs must differ.
// Measured figures and the reasoning: docs/parity.md, "The f16 KV cache".
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { convertCheckpoint } from '../src/convert/convert.js';
import { writeSynthCheckpoint } from '../src/model/synth.js';
import { closeAllRefs, compareLogSoftmax, openRef, pseudoRandomIds } from './helpers/llama-ref.js';

const execFileP = promisify(execFile);
const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const BENCH = join(ROOT, 'bin', 'bench.js');
const V = 248320;
const LEN = 150;
const prompt = pseudoRandomIds(LEN, 4242, 0, 248044);

let work: string;
let dir: string;
const rows: Record<'llama32' | 'llama16' | 'ours32' | 'ours16', Float32Array> = {
  llama32: new Float32Array(0), llama16: new Float32Array(0), ours32: new Float32Array(0), ours16: new Float32Array(0),
};

async function ours(kv: 'f32' | 'f16'): Promise<Float32Array> {
  const file = join(work, `logits-${kv}.f32`);
  await execFileP(process.execPath, [BENCH, 'prompt', '--model-path', dir, '--prompt-ids', prompt.join(','),
    '--max-new-tokens', '0', '--logits-out', file, '--device', 'cpu', '--threads', '2', '--kv-cache-dtype', kv],
  { cwd: ROOT, maxBuffer: 64 << 20, timeout: 100_000, killSignal: 'SIGKILL' });
  const buf = readFileSync(file);
  expect(buf.length, 'logits file size').toBe(LEN * V * 4);
  // Raw logits -> log-softmax per row (llama.cpp's rows are log-softmax).
  const logits = new Float32Array(buf.buffer, buf.byteOffset, LEN * V);
  const out = new Float32Array(LEN * V);
  for (let r = 0; r < LEN; r++) {
    const row = logits.subarray(r * V, (r + 1) * V);
    let mx = -Infinity;
    for (const v of row) mx = Math.max(mx, v);
    let sum = 0;
    for (const v of row) sum += Math.exp(v - mx);
    const lse = mx + Math.log(sum);
    for (let i = 0; i < V; i++) out[r * V + i] = row[i]! - lse;
  }
  return out;
}

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'lumen-kv16-'));
  dir = join(work, 'model');
  await writeSynthCheckpoint({
    preset: 'tiny', out: dir, dtype: 'f32', seed: 211, vision: false,
    overrides: { hiddenSize: 256, numLayers: 8, intermediateSize: 512, numHeads: 4, numKvHeads: 2, linearNumValueHeads: 4, tieWordEmbeddings: false },
  });
  const gguf = join(work, 'model.gguf');
  await convertCheckpoint(dir, gguf, { dtype: 'f32' });
  rows.llama32 = (await (await openRef(gguf, { contextSize: 512, kvCacheType: 'F32' })).evaluate(prompt, { logSoftmax: 'all' })).logSoftmax;
  rows.llama16 = (await (await openRef(gguf, { contextSize: 512, kvCacheType: 'F16' })).evaluate(prompt, { logSoftmax: 'all' })).logSoftmax;
  rows.ours32 = await ours('f32');
  rows.ours16 = await ours('f16');
}, 600_000);

afterAll(async () => {
  await closeAllRefs();
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('f16 KV cache against llama.cpp', () => {
  it("ours with f16 moves as llama.cpp's F16 cache does, and sits closer to it than llama.cpp's own F32 run", () => {
    const effect = compareLogSoftmax(rows.llama16, rows.llama32, V);
    const cmp = compareLogSoftmax(rows.ours16, rows.llama16, V);
    const own = compareLogSoftmax(rows.ours16, rows.ours32, V);
    const base = compareLogSoftmax(rows.ours32, rows.llama32, V);
    // The two caches' effects (each engine's f16 rows minus its f32 rows) point the same way: the
    // shared rounding of K and V is most of llama.cpp's effect (measured cosine 0.71; the rest is its
    // f16 query and probabilities). A cache rounded otherwise (truncated, or only K) or not at all
    // would not correlate so.
    let dot = 0, na = 0, nb = 0;
    for (let i = 0; i < rows.ours16.length; i++) {
      if (rows.llama32[i]! < -30) continue;
      const a = rows.ours16[i]! - rows.ours32[i]!, b = rows.llama16[i]! - rows.llama32[i]!;
      dot += a * b; na += a * a; nb += b * b;
    }
    const cosine = dot / Math.sqrt(na * nb);
    const msg = `llama F16 vs F32 ${effect.maxAbs.toExponential(3)}; ours f16 vs llama F16 ${cmp.maxAbs.toExponential(3)}; ` +
      `ours f16 vs f32 ${own.maxAbs.toExponential(3)}; ours f32 vs llama F32 ${base.maxAbs.toExponential(3)}; cosine of the effects ${cosine.toFixed(3)}`;
    expect(effect.maxAbs, msg).toBeGreaterThan(1e-4); // the F16 cache really moves llama.cpp's rows
    expect(own.maxAbs, msg).toBeGreaterThan(0); // and ours
    expect(base.maxAbs, msg).toBeLessThanOrEqual(1e-3); // the f32 engines agree (as test/parity.test.ts)
    expect(cmp.maxAbs, msg).toBeLessThan(effect.maxAbs);
    expect(cmp.floorViolations, msg).toBe(0);
    expect(cmp.argmaxMismatches, msg).toBe(0);
    expect(cosine, msg).toBeGreaterThan(0.5);
  });
});
