// Seeded synthetic prompts. Every prompt is a pure function of (seed, cell, concurrency, pass, session), so a
// run is reproducible whatever order requests complete in.
import type { PromptMode } from './options.js';

/** First id of Qwen3.5's added special tokens; ids below it are ordinary BPE tokens. */
export const FIRST_SPECIAL_TOKEN = 248044;

/** 32-bit mixing (splitmix32-style finaliser) used to derive independent stream seeds. */
export function mix32(h: number, v: number): number {
  let x = (h ^ Math.imul(v >>> 0, 0x9e3779b1)) >>> 0;
  x = Math.imul(x ^ (x >>> 16), 0x85ebca6b) >>> 0;
  x = Math.imul(x ^ (x >>> 13), 0xc2b2ae35) >>> 0;
  return (x ^ (x >>> 16)) >>> 0;
}

export function hashSeed(...parts: number[]): number {
  let h = 0x243f6a88;
  for (const p of parts) h = mix32(h, p);
  return h;
}

/** xoshiro128** seeded through splitmix32; uniform 32-bit outputs. */
export class Prng {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;

  constructor(seed: number) {
    let z = seed >>> 0;
    const next = () => {
      z = (z + 0x9e3779b9) >>> 0;
      let t = z;
      t = Math.imul(t ^ (t >>> 16), 0x21f0aaad) >>> 0;
      t = Math.imul(t ^ (t >>> 15), 0x735a2d97) >>> 0;
      return (t ^ (t >>> 15)) >>> 0;
    };
    this.s0 = next();
    this.s1 = next();
    this.s2 = next();
    this.s3 = next();
    if ((this.s0 | this.s1 | this.s2 | this.s3) === 0) this.s0 = 1;
  }

  nextU32(): number {
    const result = Math.imul(rotl(Math.imul(this.s1, 5) >>> 0, 7), 9) >>> 0;
    const t = (this.s1 << 9) >>> 0;
    this.s2 = (this.s2 ^ this.s0) >>> 0;
    this.s3 = (this.s3 ^ this.s1) >>> 0;
    this.s1 = (this.s1 ^ this.s2) >>> 0;
    this.s0 = (this.s0 ^ this.s3) >>> 0;
    this.s2 = (this.s2 ^ t) >>> 0;
    this.s3 = rotl(this.s3, 11);
    return result;
  }

  /** Uniform integer in [0, n), n <= 2^32, without modulo bias. */
  below(n: number): number {
    if (n <= 0) throw new RangeError('below(n) needs n > 0');
    const limit = Math.floor(0x100000000 / n) * n;
    for (;;) {
      const v = this.nextU32();
      if (v < limit) return v % n;
    }
  }
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}

export function randomTokens(seed: number, count: number, vocab: number): Int32Array {
  const rng = new Prng(seed);
  const out = new Int32Array(count);
  for (let i = 0; i < count; i++) out[i] = rng.below(vocab);
  return out;
}

export interface PromptPlan {
  seed: number;
  isl: number;
  osl: number;
  concurrency: number;
  mode: PromptMode;
  /** Leading tokens shared by every prompt of the run (already clamped to isl). */
  sharedPrefix: number;
  /** Exclusive upper bound of drawn token ids. */
  vocab: number;
}

/** The token-id range prompts draw from: ordinary tokens, and never past the model's embedding rows. */
export function promptVocab(modelVocab: number): number {
  return Math.max(1, Math.min(FIRST_SPECIAL_TOKEN, modelVocab));
}

/**
 * Prompt of one request. `pass` counts warm-up passes then timed passes from 0. Unique mode: a fresh draw
 * per (pass, session). Repeat mode: the same draw for a session on every pass. The shared prefix is one draw
 * per run (seed only), identical for every cell, session and pass.
 */
export function makePrompt(plan: PromptPlan, pass: number, session: number): Int32Array {
  const out = new Int32Array(plan.isl);
  const shared = Math.min(plan.sharedPrefix, plan.isl);
  if (shared > 0) out.set(randomTokens(hashSeed(plan.seed, 0x5eed), shared, plan.vocab));
  const rest = plan.isl - shared;
  if (rest > 0) {
    const p = plan.mode === 'repeat' ? 0xffffffff : pass;
    const seed = hashSeed(plan.seed, plan.isl, plan.osl, plan.concurrency, p, session);
    out.set(randomTokens(seed, rest, plan.vocab), shared);
  }
  return out;
}
