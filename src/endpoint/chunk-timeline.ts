// A streamed response's chunks -> one time per output token. A chunk that carries k tokens adds k
// inter-token gaps, the gap since the previous token-bearing chunk split evenly among its k tokens;
// the first content chunk's tokens all arrive at its time (TTFT; its extra tokens have 0 ms gaps).
// Tokens per chunk come from `continuous_usage_stats` (the running completion_tokens of each chunk)
// when the server sends them, else from the tokenizer, reconciled with the final usage count (the
// difference spread over the chunks in proportion, and reported in the row's notes).

/** One SSE chunk that had a `choices` entry. */
export interface WireChunk {
  atMs: number;
  /** The chunk's generated text (content, reasoning and tool-call arguments together). */
  text: string;
  /** The chunk's running usage.completion_tokens (continuous_usage_stats), or null. */
  runningCompletion: number | null;
}

export interface Timeline {
  /** Time of each output token (ms, client clock). */
  tokenMs: number[];
  /** Tokens of each token-bearing chunk, in order. */
  tokensPerChunk: number[];
}

/**
 * Tokens of each chunk from continuous usage (the running count's increments); null unless every chunk
 * with text has one (a chunk without text or usage, such as a role-only first chunk, carries none).
 */
export function countsFromRunningUsage(chunks: readonly WireChunk[]): number[] | null {
  if (!chunks.some((c) => c.runningCompletion !== null) || chunks.some((c) => c.runningCompletion === null && c.text !== '')) return null;
  let prev = 0;
  return chunks.map((c) => {
    if (c.runningCompletion === null) return 0;
    const k = Math.max(0, c.runningCompletion - prev);
    prev = Math.max(prev, c.runningCompletion);
    return k;
  });
}

/** Splits `total` over `weights` in proportion (cumulative rounding: the sum is exact, the rounding spread evenly). */
function spread(weights: readonly number[], total: number): number[] {
  const sum = weights.reduce((a, b) => a + b, 0);
  let cum = 0;
  let given = 0;
  return weights.map((w) => {
    cum += w;
    const upTo = Math.round((total * cum) / sum);
    const k = upTo - given;
    given = upTo;
    return k;
  });
}

/**
 * Adjusts per-chunk counts (from the tokenizer) so they sum to `total` (the server's usage count),
 * spreading the difference over the chunks in proportion to their counts: a tokenizer that counts one
 * token too many per call (a BOS) or a few too few over the whole text moves every chunk a little, never
 * the last chunks wholesale (which would end the timeline early or late). A shortfall keeps at least one
 * token on every chunk that had one while the total allows (a chunk with text carried a token); below
 * that, the counts are scaled down as a whole. Chunks with no count stay at 0 unless no chunk has one
 * (then the last chunk takes the total: nothing says where the tokens were).
 */
export function reconcileCounts(counts: readonly number[], total: number): number[] {
  const sum = counts.reduce((a, b) => a + b, 0);
  if (counts.length === 0 || sum === total) return counts.slice();
  if (sum === 0) {
    const out = counts.map(() => 0);
    out[out.length - 1] = total;
    return out;
  }
  if (total > sum) return spread(counts, total);
  const bearing = counts.filter((c) => c > 0).length;
  if (total < bearing) return spread(counts, total);
  // One each, and the rest in proportion to what each chunk had beyond its one.
  const rest = spread(counts.map((c) => Math.max(0, c - 1)), total - bearing);
  return counts.map((c, i) => (c > 0 ? 1 + rest[i]! : 0));
}

/**
 * Token times from the chunks and their token counts. Chunks before the first one with text give
 * their tokens to it (TTFT is the first chunk with non-empty content); chunks with no tokens add none.
 */
export function tokenTimeline(chunks: readonly WireChunk[], counts: readonly number[]): Timeline {
  // Without any text (a server that streams token ids only) the first chunk with tokens starts the timeline.
  let firstText = chunks.findIndex((c) => c.text !== '');
  if (firstText < 0) firstText = chunks.findIndex((_c, i) => (counts[i] ?? 0) > 0);
  const tokenMs: number[] = [];
  const tokensPerChunk: number[] = [];
  if (firstText < 0) return { tokenMs, tokensPerChunk };
  let carried = 0;
  for (let i = 0; i < firstText; i++) carried += counts[i] ?? 0;
  let prev = -1;
  for (let i = firstText; i < chunks.length; i++) {
    const k = (counts[i] ?? 0) + (i === firstText ? carried : 0);
    if (k <= 0) continue;
    const at = chunks[i]!.atMs;
    tokensPerChunk.push(k);
    if (prev < 0) {
      for (let m = 0; m < k; m++) tokenMs.push(at);
    } else {
      for (let m = 1; m <= k; m++) tokenMs.push(prev + ((at - prev) * m) / k);
    }
    prev = at;
  }
  return { tokenMs, tokensPerChunk };
}
