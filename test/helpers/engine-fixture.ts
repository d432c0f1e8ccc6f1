// In-memory synthetic models for engine tests (no files): the tiny shape, optionally with the 4B
// head layout (value heads = 2 x key heads).
import { loadEngine, type EngineInternals } from '../../src/engine/engine.js';
import type { EngineHandle, EngineOptions, RequestResult } from '../../src/engine/types.js';
import type { TextConfig } from '../../src/model/types.js';

export function tinyConfig(over: Partial<TextConfig> = {}): TextConfig {
  const numLayers = over.numLayers ?? 4;
  return {
    hiddenSize: 128, numLayers, intermediateSize: 384, numHeads: 2, numKvHeads: 1, headDim: 256,
    linearNumKeyHeads: 2, linearNumValueHeads: 4, linearKeyHeadDim: 128, linearValueHeadDim: 128,
    linearConvKernelDim: 4, vocabSize: 248320, rmsNormEps: 1e-6, ropeTheta: 1e7, partialRotaryFactor: 0.25,
    mropeSection: [11, 11, 10],
    layerTypes: Array.from({ length: numLayers }, (_, i) => ((i + 1) % 4 === 0 ? 'full_attention' : 'linear_attention')),
    tieWordEmbeddings: true, eosTokenId: 248044, maxPositionEmbeddings: 262144, mtpNumHiddenLayers: 0,
    ...over,
  };
}

export const baseOptions: EngineOptions = {
  device: 'cpu', threads: 2, blockSize: 16, kvcache: 'paged', maxSeq: 1024, maxSeqs: 8,
  prefillChunk: 512, stepTokenBudget: 2048, prefixCache: false,
};

export function tinyEngine(opts: Partial<EngineOptions> = {}, internals: EngineInternals = {}, cfg?: Partial<TextConfig>): Promise<EngineHandle> {
  return loadEngine({ synthetic: tinyConfig(cfg) }, { ...baseOptions, ...opts }, {}, { syntheticDtype: 'f32', syntheticSeed: 7, ...internals });
}

/** Deterministic pseudo-random prompt of normal (non-special) token ids. */
export function promptIds(n: number, seed: number): number[] {
  let s = (seed * 2654435761) >>> 0 || 1;
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    out.push(s % 248000);
  }
  return out;
}

export async function greedy(e: EngineHandle, prompt: number[], maxTokens: number, logits = false): Promise<RequestResult> {
  const r = await e.submit({ prompt, maxTokens, ignoreEos: true, logits: logits ? 'all' : 'none' }).done;
  if (r.finishReason === 'error') throw new Error(r.error);
  return r;
}

export function logSoftmaxRow(logits: Float32Array, row: number, vocab: number): Float64Array {
  const out = new Float64Array(vocab);
  let mx = -Infinity;
  for (let i = 0; i < vocab; i++) mx = Math.max(mx, logits[row * vocab + i]);
  let sum = 0;
  for (let i = 0; i < vocab; i++) sum += Math.exp(logits[row * vocab + i] - mx);
  const lse = mx + Math.log(sum);
  for (let i = 0; i < vocab; i++) out[i] = logits[row * vocab + i] - lse;
  return out;
}

export function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  if (a.length !== b.length) throw new Error(`length ${a.length} != ${b.length}`);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}
