// Seeded synthetic prompts. Every prompt is a pure function of (seed, cell, concurrency, pass, session), so a
// run is reproducible whatever order requests complete in.
import { BPE_VOCAB_SIZE } from '../model/synth-tokenizer.js';
import { Rng } from '../util/rng.js';
import type { PromptMode } from './sweep-config.js';

/** `count` uniform ids in [0, vocab) from the stream (seed, stream); rejection sampling keeps them unbiased. */
export function randomTokens(seed: number, stream: string, count: number, vocab: number): Int32Array {
  const rng = new Rng(seed, stream);
  const limit = Math.floor(0x100000000 / vocab) * vocab;
  const out = new Int32Array(count);
  for (let i = 0; i < count; i++) {
    let v = rng.nextU32();
    while (v >= limit) v = rng.nextU32();
    out[i] = v % vocab;
  }
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
  return Math.max(1, Math.min(BPE_VOCAB_SIZE, modelVocab)); // Qwen3.5: ids >= 248044 are special tokens
}

/**
 * Prompt of one request. `pass` counts warm-up passes then timed passes from 0. Unique mode: a fresh draw
 * per (pass, session). Repeat mode: the same draw for a session on every pass. The shared prefix is one draw
 * per run (seed only), identical for every cell, session and pass.
 */
export function makePrompt(plan: PromptPlan, pass: number, session: number): Int32Array {
  const out = new Int32Array(plan.isl);
  const shared = Math.min(plan.sharedPrefix, plan.isl);
  if (shared > 0) out.set(randomTokens(plan.seed, 'shared-prefix', shared, plan.vocab));
  const rest = plan.isl - shared;
  if (rest > 0) {
    const p = plan.mode === 'repeat' ? 'repeat' : String(pass);
    const stream = `prompt:${plan.isl}:${plan.osl}:${plan.concurrency}:${p}:${session}`;
    out.set(randomTokens(plan.seed, stream, rest, plan.vocab), shared);
  }
  return out;
}
