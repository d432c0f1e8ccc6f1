// Prompts of an exact token count, sent as text. The sweep's prompts are token ids (src/bench/prompts.ts);
// ids decoded to text do not always encode back to the same ids (merges at the joins), so the ids are
// decoded, the text re-encoded, and its own tokens cut to the target (or extended with fresh seeded ids)
// until the text encodes to the target count. The shared prefix sits at the front, so it survives.
import { randomTokens } from '../bench/prompts.js';
import type { TextTokenizer } from './text-tokenizer.js';

export interface FittedPrompt {
  text: string;
  /** Tokens the text encodes to (the target when `exact`). */
  tokens: number;
  exact: boolean;
}

/** Rounds of decode/encode before the closest text is taken (and the row says so). */
export const FIT_ROUNDS = 24;

/**
 * Text of `ids` adjusted to encode to exactly `target` tokens. `streamKey` names the seeded stream
 * that supplies extra ids when the text comes out short.
 */
export async function fitPrompt(
  tok: TextTokenizer, ids: Int32Array, target: number, seed: number, streamKey: string,
): Promise<FittedPrompt> {
  let cand = Array.from(ids);
  let extra: Int32Array = new Int32Array(0);
  let used = 0;
  const more = (n: number): number[] => {
    if (used + n > extra.length) extra = randomTokens(seed, `fit:${streamKey}`, Math.max(2 * (used + n), 64), tok.vocab);
    const out = Array.from(extra.subarray(used, used + n));
    used += n;
    return out;
  };
  let best: FittedPrompt | null = null;
  for (let round = 0; round < FIT_ROUNDS; round++) {
    // A cut inside a multi-byte character decodes to U+FFFD, which encodes to more tokens: drop it.
    const text = (await tok.decode(cand)).replace(/\uFFFD+$/u, '');
    const enc = await tok.encode(text);
    const n = enc.length;
    if (best === null || Math.abs(n - target) < Math.abs(best.tokens - target)) best = { text, tokens: n, exact: n === target };
    if (n === target) return best;
    // Continue from the text's own (canonical) tokens: cut to the target, or extended by fresh seeded ids
    // (different ones every round, so a merge at the join that undoes one extension is not repeated).
    cand = n > target ? enc.slice(0, target) : enc.concat(more(target - n));
  }
  return best!;
}
