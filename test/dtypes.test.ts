// Checkpoint dtypes through the real loader and engine: an F16 copy of an F32 checkpoint gives the
// same logits within f16 rounding (F16 matrices are widened to f32 at load).
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadEngine } from '../src/engine/engine.js';
import { loadCheckpoint } from '../src/model/checkpoint.js';
import { cleanupAllFixtures, rewriteSafetensors, smallFixture, type RawTensor } from './helpers/synth-fixture.js';
import { baseOptions, promptIds } from './helpers/engine-fixture.js';

afterAll(() => cleanupAllFixtures());

function f32ToF16(x: number): number {
  // Round-to-nearest-even float32 -> IEEE half (normal and subnormal range; weights here are small).
  const f = new Float32Array([x]);
  const u = new Uint32Array(f.buffer)[0]!;
  const sign = (u >>> 16) & 0x8000;
  const exp = ((u >>> 23) & 0xff) - 127 + 15;
  let man = u & 0x7fffff;
  if (exp >= 31) return sign | 0x7c00;
  if (exp <= 0) {
    if (exp < -10) return sign;
    man |= 0x800000;
    const shift = 14 - exp;
    const half = 1 << (shift - 1);
    let m = man >>> shift;
    const rem = man & ((1 << shift) - 1);
    if (rem > half || (rem === half && (m & 1))) m++;
    return sign | m;
  }
  let h = sign | (exp << 10) | (man >>> 13);
  const rem = man & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (h & 1))) h++;
  return h;
}

function toF16(t: RawTensor): RawTensor {
  if (t.dtype !== 'F32') return t;
  const src = new Float32Array(t.data.buffer.slice(t.data.byteOffset, t.data.byteOffset + t.data.byteLength));
  const out = new Uint16Array(src.length);
  for (let i = 0; i < src.length; i++) out[i] = f32ToF16(src[i]!);
  return { ...t, dtype: 'F16', data: new Uint8Array(out.buffer) };
}

async function logitsOf(dir: string, prompt: number[]): Promise<Float32Array> {
  const e = await loadEngine(loadCheckpoint(dir), { ...baseOptions, maxSeq: 128, maxSeqs: 1 });
  try {
    const r = await e.submit({ prompt, maxTokens: 0, logits: 'all' }).done;
    if (!r.logits) throw new Error(r.error ?? 'no logits');
    return r.logits;
  } finally {
    await e.close();
  }
}

describe('checkpoint dtypes', () => {
  it('an F16 checkpoint matches its F32 original within f16 rounding', async () => {
    const f = await smallFixture({ dtype: 'f32' });
    const prompt = promptIds(20, 77).map((t) => t % 1000);
    const ref = await logitsOf(f.dir, prompt);
    rewriteSafetensors(path.join(f.dir, 'model.safetensors'), (ts) => ts.map(toF16));
    const ck = loadCheckpoint(f.dir);
    expect(ck.tensors.get('layers.0.mlp.up_proj.weight')!.dtype).toBe('F16');
    const half = await logitsOf(f.dir, prompt);
    let worst = 0;
    let scale = 0;
    for (let i = 0; i < ref.length; i++) {
      worst = Math.max(worst, Math.abs(ref[i]! - half[i]!));
      scale = Math.max(scale, Math.abs(ref[i]!));
    }
    expect(worst).toBeGreaterThan(0);
    expect(worst / scale).toBeLessThan(1e-2);
  });
});
