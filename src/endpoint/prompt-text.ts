// Prompts of an exact token count, sent as text. The sweep's prompts are token ids (src/bench/prompts.ts);
// ids decoded to text do not always encode back to the same ids (merges at the joins), so the ids are
// decoded, the text re-encoded, and the id list trimmed or extended at its end until the text encodes
// to the target count. The shared prefix sits at the front, so it survives the fitting.
import { randomTokens } from '../bench/prompts.js';
import type { TextTokenizer } from './text-tokenizer.js';

export interface FittedPrompt {
  text: string;
  /** Tokens the text encodes to (the target when `exact`). */
  tokens: number;
  exact: boolean;
}

/** Rounds of decode/encode before the closest text is taken (and the row says so). */
export const FIT_ROUNDS = 12;

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
    const text = await tok.decode(cand);
    const n = (await tok.encode(text)).length;
    if (best === null || Math.abs(n - target) < Math.abs(best.tokens - target)) best = { text, tokens: n, exact: n === target };
    if (n === target) return best;
    if (n > target) cand = cand.slice(0, Math.max(1, cand.length - (n - target)));
    else cand = cand.concat(more(target - n));
  }
  return best!;
}
