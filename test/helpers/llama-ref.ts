// Reference runner over llama.cpp (npm node-llama-cpp 3.21.1, CPU build, fixed thread count).
//
// What node-llama-cpp exposes: no raw logits. For a position whose next token is requested,
// `sampleToken(..., probabilities = true)` runs the sampler chain and returns the candidates
// as [token, probability] pairs, the probabilities being softmax(logits) computed in float32 by
// the addon. At temperature 0 the chain is only the greedy sampler, which keeps all `n_vocab`
// candidates, so we get the full next-token distribution at every position. We turn it back
// into log-softmax (in float64: log p, renormalised), i.e. the logits up to a per-position
// constant. Entries whose probability fell below FLT_MIN (log-softmax < about -87) lose
// precision or underflow to 0 (-Infinity here); compare those loosely (see compareLogSoftmax).
//
// Speed: the public `controlledEvaluate(..., {generateNext: {probabilities: true}})` builds a
// JS Map of the whole vocabulary per position (~165 ms for 248k tokens on a slow core). When
// the package internals are present we call the same addon method directly and fill a typed
// array instead (~70 ms per position, most of it the addon's sort and array building); the
// public path is the fallback and both give identical numbers (test/gguf.test.ts checks it).
import { getLlama, LlamaLogLevel } from 'node-llama-cpp';
import type { Llama, LlamaContext, LlamaContextSequence, LlamaModel, Token } from 'node-llama-cpp';

export interface LlamaRefOptions {
  /** CPU threads for evaluation (fixed, default 1: spinning ggml workers on a busy 2-core box cost more than they give for tiny models). */
  threads?: number;
  /** Context size in tokens (default 1024): prompt + generated tokens must fit. */
  contextSize?: number;
  /** Batch size (default 256). Logit rows of one batch are held by llama.cpp at once. */
  batchSize?: number;
  /** Force the public-API path (slower) instead of the direct addon call. */
  publicApiOnly?: boolean;
  /**
   * Type of llama.cpp's attention KV cache (default F32). llama.cpp's own default is F16, which
   * rounds K and V of the full-attention layers and moves log-softmax by ~1e-3 on its own.
   */
  kvCacheType?: 'F32' | 'F16';
  /** llama.cpp flash attention (default off: the plain f32 softmax path). */
  flashAttention?: boolean;
}

export interface RefEvalOptions {
  /** Greedy continuation length (default 0). */
  newTokens?: number;
  /** Which prompt positions get a log-softmax row: all (default), the last, or none. */
  logSoftmax?: 'all' | 'last' | 'none';
  /** Also return log-softmax rows for the generated tokens' positions (appended after the prompt rows). */
  continuationLogSoftmax?: boolean;
}

export interface RefEvalResult {
  /** Row-major float32 [rows, vocabSize]: log-softmax of the next-token distribution. */
  logSoftmax: Float32Array;
  /** Position (index in prompt + generated sequence) each row belongs to. */
  rowPositions: number[];
  /** Greedy continuation (argmax at the last prompt position, then fed back). */
  greedy: number[];
  vocabSize: number;
  /** What the rows hold: always log-softmax recovered from llama.cpp's probabilities. */
  kind: 'log_softmax_from_probabilities';
  /** Wall time of the evaluation (ms). */
  ms: number;
}

/** log(FLT_MIN): below this, llama.cpp's float32 probabilities are subnormal or zero. */
export const PROB_FLOOR_LOG = Math.log(1.1754943508222875e-38);

let llamaPromise: Promise<Llama> | null = null;

/** The process-wide llama.cpp instance (CPU only, never builds from source). */
export function refLlama(): Promise<Llama> {
  llamaPromise ??= getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error, maxThreads: 0 });
  return llamaPromise;
}

/** Convert the addon's flat [token, prob, token, prob, ...] list into a log-softmax row (float64 math). */
export function logSoftmaxFromPairs(pairs: ArrayLike<number>, vocabSize: number, out: Float32Array): void {
  const logp = new Float64Array(vocabSize).fill(-Infinity);
  let max = -Infinity;
  for (let i = 0; i + 1 < pairs.length; i += 2) {
    const tok = pairs[i]!;
    const p = pairs[i + 1]!;
    if (tok < 0 || tok >= vocabSize) continue;
    const lp = p > 0 ? Math.log(p) : -Infinity;
    logp[tok] = lp;
    if (lp > max) max = lp;
  }
  // Renormalise in float64: the addon's float32 sum over the vocabulary is slightly off.
  let sum = 0;
  for (let i = 0; i < vocabSize; i++) sum += Math.exp(logp[i]! - max);
  const lse = max + Math.log(sum);
  for (let i = 0; i < vocabSize; i++) out[i] = logp[i]! - lse;
}

/** Log-softmax of raw logits (float64 math), e.g. our engine's logits rows. */
export function logSoftmax(logits: Float32Array, out = new Float32Array(logits.length)): Float32Array {
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) if (logits[i]! > max) max = logits[i]!;
  let sum = 0;
  for (let i = 0; i < logits.length; i++) sum += Math.exp(logits[i]! - max);
  const lse = max + Math.log(sum);
  for (let i = 0; i < logits.length; i++) out[i] = logits[i]! - lse;
  return out;
}

export interface RowComparison {
  /** Max |ours - ref| over entries where ref >= PROB_FLOOR_LOG. */
  maxAbs: number;
  /** Where maxAbs was found. */
  row: number;
  token: number;
  /** Entries where ref is below the float32 probability floor and ours is above `floorSlack`. */
  floorViolations: number;
  /** Max |Δ(logit - max logit)|: the raw-logit difference with each row's offset removed. */
  maxAbsCentered: number;
  /** Rows whose argmax differs. */
  argmaxMismatches: number;
}

/**
 * Compare our log-softmax rows against llama.cpp's, row by row ([rows, vocab] each). Entries
 * below the float32 probability floor in the reference only need ours to be small too
 * (< `floorSlack`, default -80).
 */
export function compareLogSoftmax(ours: Float32Array, ref: Float32Array, vocabSize: number, floorSlack = -80): RowComparison {
  if (ours.length !== ref.length) throw new Error(`row data differ in size: ${ours.length} vs ${ref.length}`);
  const rows = ref.length / vocabSize;
  const res: RowComparison = { maxAbs: 0, row: -1, token: -1, floorViolations: 0, maxAbsCentered: 0, argmaxMismatches: 0 };
  for (let r = 0; r < rows; r++) {
    const o = r * vocabSize;
    let am = 0;
    let ar = 0;
    for (let i = 1; i < vocabSize; i++) {
      if (ours[o + i]! > ours[o + am]!) am = i;
      if (ref[o + i]! > ref[o + ar]!) ar = i;
    }
    if (am !== ar) res.argmaxMismatches++;
    const om = ours[o + am]!;
    const rm = ref[o + ar]!;
    for (let i = 0; i < vocabSize; i++) {
      const a = ours[o + i]!;
      const b = ref[o + i]!;
      if (b >= PROB_FLOOR_LOG) {
        const d = Math.abs(a - b);
        if (!(d <= res.maxAbs)) {
          res.maxAbs = Number.isNaN(d) ? Infinity : d;
          res.row = r;
          res.token = i;
        }
        const dc = Math.abs(a - om - (b - rm));
        if (!(dc <= res.maxAbsCentered)) res.maxAbsCentered = Number.isNaN(dc) ? Infinity : dc;
      } else if (!(a < floorSlack)) {
        res.floorViolations++;
      }
    }
  }
  return res;
}

interface Internals {
  seq: {
    _decodeTokens(
      tokens: Token[], logits: boolean[], priority: number, meter: unknown,
      shift: { size: unknown; strategy: unknown },
      mapper: (batchLogitIndex: number, tokenIndex: number) => Promise<unknown>,
      afterBatch: unknown,
    ): Promise<unknown[]>;
    _resolveSamplerConfig(o: { temperature: number }): unknown;
    _tokenMeter: unknown;
    _contextShift: { size: unknown; strategy: unknown };
    _takeIntervalCheckpointIfNeededAfterBatch: unknown;
    _context: { _ctx: { sampleToken(i: number, s: unknown, probs: boolean, conf: boolean): Promise<[number, number[] | undefined, number | undefined]> } };
  };
  makeSampler(): { applyConfig(c: unknown): void; dispose(): void };
}

/** One loaded GGUF with one context and one sequence, reused across evaluations. */
export class LlamaRef {
  private constructor(
    readonly path: string,
    readonly model: LlamaModel,
    private readonly context: LlamaContext,
    private readonly seq: LlamaContextSequence,
    readonly vocabSize: number,
    private readonly internals: Internals | null,
    readonly threads: number,
  ) {}

  static async load(ggufPath: string, opts: LlamaRefOptions = {}): Promise<LlamaRef> {
    const llama = await refLlama();
    const threads = opts.threads ?? 1;
    const model = await llama.loadModel({ modelPath: ggufPath, gpuLayers: 0 });
    const context = await model.createContext({
      contextSize: opts.contextSize ?? 1024,
      batchSize: opts.batchSize ?? 256,
      sequences: 1,
      threads: { ideal: threads, min: threads },
      flashAttention: opts.flashAttention ?? false,
      experimentalKvCacheKeyType: opts.kvCacheType ?? 'F32',
      experimentalKvCacheValueType: opts.kvCacheType ?? 'F32',
    });
    const seq = context.getSequence();
    const vocabSize = modelVocabSize(model);
    return new LlamaRef(ggufPath, model, context, seq, vocabSize, opts.publicApiOnly ? null : findInternals(model, seq), threads);
  }

  /** Whether the direct addon path is in use (else the public controlledEvaluate). */
  get fastPath(): boolean {
    return this.internals !== null;
  }

  /** llama.cpp's tokenization of `text` (no BOS). `special`: parse special-token text as specials. */
  tokenize(text: string, special = false): number[] {
    return [...this.model.tokenize(text, special)];
  }

  detokenize(ids: number[], special = false): string {
    return this.model.detokenize(ids as Token[], special);
  }

  /** Evaluate `prompt` from an empty state; log-softmax rows and a greedy continuation. */
  async evaluate(prompt: readonly number[], opts: RefEvalOptions = {}): Promise<RefEvalResult> {
    if (prompt.length === 0) throw new Error('empty prompt');
    const V = this.vocabSize;
    for (const t of prompt) {
      if (!Number.isInteger(t) || t < 0 || t >= V) throw new Error(`prompt token ${t} outside [0, ${V})`);
    }
    const newTokens = opts.newTokens ?? 0;
    if (!Number.isInteger(newTokens) || newTokens < 0) throw new Error(`newTokens ${newTokens}: expected an integer >= 0`);
    if (prompt.length + newTokens >= this.context.contextSize) {
      // llama.cpp would have to shift the context, which a recurrent (GDN) state cannot do.
      throw new Error(`prompt (${prompt.length}) + new tokens (${newTokens}) exceed the reference context (${this.context.contextSize}); pass a larger contextSize`);
    }
    const mode = opts.logSoftmax ?? 'all';
    const t0 = performance.now();
    await this.seq.clearHistory();

    const rowOf = (i: number) => mode === 'all' || (mode === 'last' && i === prompt.length - 1);
    const promptRows = prompt.reduce((n, _, i) => n + (rowOf(i) ? 1 : 0), 0);
    const contRows = opts.continuationLogSoftmax ? Math.max(0, newTokens - 1) : 0;
    const out = new Float32Array((promptRows + contRows) * V);
    const rowPositions: number[] = [];
    const greedy: number[] = [];

    // Prompt: a row wherever asked, and the next token at the last position.
    const wants = prompt.map((_, i) => rowOf(i) || (i === prompt.length - 1 && newTokens > 0));
    const rowIndex = new Map<number, number>();
    prompt.forEach((_, i) => { if (rowOf(i)) { rowIndex.set(i, rowPositions.length); rowPositions.push(i); } });
    const nextTokens = await this.run([...prompt], wants, (i) => {
      const r = rowIndex.get(i);
      return r === undefined ? null : out.subarray(r * V, (r + 1) * V);
    });
    if (newTokens > 0) {
      let tok = nextTokens[prompt.length - 1]!;
      greedy.push(tok);
      for (let k = 1; k < newTokens; k++) {
        const pos = prompt.length + k - 1;
        const r = rowPositions.length;
        if (opts.continuationLogSoftmax) rowPositions.push(pos);
        const res = await this.run([tok], [true], () => (opts.continuationLogSoftmax ? out.subarray(r * V, (r + 1) * V) : null));
        tok = res[0]!;
        greedy.push(tok);
      }
    }
    return { logSoftmax: out, rowPositions, greedy, vocabSize: V, kind: 'log_softmax_from_probabilities', ms: performance.now() - t0 };
  }

  /**
   * Decode `tokens` (appended to the sequence); for each index with wants[i], sample greedily and,
   * when rowFor(i) returns a row, fill it with the log-softmax. Returns the greedy token per index.
   */
  private async run(tokens: number[], wants: boolean[], rowFor: (i: number) => Float32Array | null): Promise<number[]> {
    const V = this.vocabSize;
    const next: number[] = new Array(tokens.length).fill(-1);
    if (this.internals) {
      const { seq } = this.internals;
      const sampler = this.internals.makeSampler();
      try {
        sampler.applyConfig(seq._resolveSamplerConfig({ temperature: 0 }));
        await seq._decodeTokens(
          tokens as Token[], wants, 5, seq._tokenMeter,
          { size: seq._contextShift.size, strategy: seq._contextShift.strategy },
          async (batchLogitIndex, tokenIndex) => {
            const row = rowFor(tokenIndex);
            const [tok, pairs] = await seq._context._ctx.sampleToken(batchLogitIndex, sampler, row !== null, false);
            if (row) {
              if (!pairs) throw new Error('llama.cpp returned no probabilities');
              logSoftmaxFromPairs(pairs, V, row);
            }
            next[tokenIndex] = tok;
            return tok;
          },
          seq._takeIntervalCheckpointIfNeededAfterBatch,
        );
      } finally {
        sampler.dispose();
      }
      return next;
    }
    const input = tokens.map((t, i) =>
      wants[i]
        ? ([t as Token, { generateNext: { token: true, probabilities: rowFor(i) !== null, options: { temperature: 0 } } }] as const)
        : (t as Token),
    );
    const res = await this.seq.controlledEvaluate(input as Parameters<LlamaContextSequence['controlledEvaluate']>[0]);
    res.forEach((r, i) => {
      if (!r) return;
      next[i] = r.next.token ?? -1;
      const row = rowFor(i);
      if (row) {
        const probs = r.next.probabilities;
        if (!probs) throw new Error('llama.cpp returned no probabilities');
        const pairs: number[] = [];
        for (const [tok, p] of probs) pairs.push(tok, p);
        logSoftmaxFromPairs(pairs, V, row);
      }
    });
    return next;
  }

  async close(): Promise<void> {
    await this.context.dispose();
    await this.model.dispose();
  }
}

function modelVocabSize(model: LlamaModel): number {
  // n_vocab of the GGUF token list (padded to vocab_size by our converter).
  const info = model.fileInfo.metadata as unknown as { tokenizer?: { ggml?: { tokens?: readonly unknown[] } } };
  const n = info.tokenizer?.ggml?.tokens?.length;
  if (typeof n === 'number' && n > 0) return n;
  throw new Error(`${model.filename ?? 'model'}: cannot tell the vocabulary size`);
}

/** Locate the package internals the fast path needs; null when any is missing. */
function findInternals(model: LlamaModel, seq: LlamaContextSequence): Internals | null {
  const s = seq as unknown as Internals['seq'];
  const m = model as unknown as { _llama?: { _bindings?: { AddonSampler?: new (m: unknown) => { applyConfig(c: unknown): void; dispose(): void } } }; _model?: unknown };
  const Sampler = m._llama?._bindings?.AddonSampler;
  if (
    typeof s._decodeTokens !== 'function' || typeof s._resolveSamplerConfig !== 'function' || !s._contextShift ||
    typeof s._context?._ctx?.sampleToken !== 'function' || typeof Sampler !== 'function' || m._model === undefined
  ) {
    return null;
  }
  return { seq: s, makeSampler: () => new Sampler(m._model) };
}

const cache = new Map<string, Promise<LlamaRef>>();

/** Load (once per process) a reference model for `ggufPath`. */
export function openRef(ggufPath: string, opts: LlamaRefOptions = {}): Promise<LlamaRef> {
  const key = JSON.stringify([ggufPath, opts.threads ?? 1, opts.contextSize ?? 1024, opts.batchSize ?? 256, !!opts.publicApiOnly,
    opts.kvCacheType ?? 'F32', !!opts.flashAttention]);
  let p = cache.get(key);
  if (!p) {
    p = LlamaRef.load(ggufPath, opts);
    cache.set(key, p);
    p.catch(() => cache.delete(key));
  }
  return p;
}

/** Dispose every model opened with openRef (call in afterAll). */
export async function closeAllRefs(): Promise<void> {
  const refs = [...cache.values()];
  cache.clear();
  for (const p of refs) {
    try {
      await (await p).close();
    } catch {
      // already failed to load
    }
  }
}

/** Deterministic pseudo-random token ids in [lo, hi) (xorshift32), for prompts. */
export function pseudoRandomIds(n: number, seed: number, lo = 0, hi = 248044): number[] {
  let s = (seed ^ 0x9e3779b9) >>> 0 || 1;
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    s ^= s << 13; s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5; s >>>= 0;
    out.push(lo + (s % (hi - lo)));
  }
  return out;
}
