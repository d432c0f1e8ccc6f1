// The engine's TypeScript-facing contract. The native addon implements it (native/addon).

export type Device = 'cpu' | 'cuda';
export type KvLayout = 'paged' | 'continuous';
/** The KV cache's element types (EngineOptions.kvCacheDtype, --kv-cache-dtype). */
export const KV_CACHE_DTYPES = ['f32', 'f16'] as const;
export type KvCacheDtype = (typeof KV_CACHE_DTYPES)[number];

export interface EngineOptions {
  device: Device;
  /** CPU worker threads (0 = all cores). */
  threads: number;
  /** Tokens per KV block. */
  blockSize: number;
  kvcache: KvLayout;
  /** Byte budget for the KV block pool; when absent (and no fraction) the pool holds maxSeq x maxSeqs tokens. */
  kvMemoryBytes?: number;
  /**
   * 0 < f <= 1 (without kvMemoryBytes): the pool and the recurrent states take this share of the
   * memory free once the weights are bound (CUDA: the device's free memory; CPU: MemAvailable).
   */
  kvMemoryFraction?: number;
  /** Longest sequence (prompt + generated) the engine accepts. */
  maxSeq: number;
  /** Most sequences running at once (recurrent-state slots). */
  maxSeqs: number;
  /** Largest prefill chunk per sequence per step. */
  prefillChunk: number;
  /** Most tokens in one forward step (decode tokens + prefill chunks). */
  stepTokenBudget: number;
  prefixCache: boolean;
  cudaGraphs?: boolean;
  /**
   * Element type of the paged KV cache; f16 halves its bytes (K and V rounded to nearest-even f16
   * when written; the attention arithmetic stays f32). The CPU backend only: CUDA refuses f16.
   * Absent: f32.
   */
  kvCacheDtype?: KvCacheDtype;
  profile?: boolean;
}

export interface SamplingOptions {
  /** 0 = greedy. */
  temperature?: number;
  topK?: number;
  topP?: number;
  seed?: number;
}

export interface RequestOptions extends SamplingOptions {
  prompt: Int32Array | number[];
  /** Tokens to generate at most. 0 = evaluate the prompt only. */
  maxTokens: number;
  stopTokens?: number[];
  /** Keep generating through stop tokens (benchmarks). */
  ignoreEos?: boolean;
  /** Return logits: none, or every evaluated position (prompt positions + each generated token's source). */
  logits?: 'none' | 'all';
  /** The stop tokens cannot be sampled before this many tokens are generated (default 0). */
  minTokens?: number;
  /**
   * Per-token logprobs, computed natively from each step's logits row (raw logits, before temperature):
   * absent = none; n >= 0 = the sampled token's logprob plus the n most likely alternatives (n <= 20).
   */
  logprobs?: number;
}

/** The sampled token's logprob and the most likely alternatives (most likely first). */
export interface TokenLogprobs {
  logprob: number;
  top: { token: number; logprob: number }[];
}

/** A token event. Times are milliseconds on the native monotonic clock (same clock as enqueueMs). */
export interface TokenEvent {
  token: number;
  /** 0-based index among generated tokens. */
  index: number;
  tMs: number;
  /** Requests with `logprobs` only. */
  logprobs?: TokenLogprobs;
}

export type FinishReason = 'length' | 'stop' | 'cancelled' | 'error';

export interface RequestResult {
  id: number;
  tokens: number[];
  promptTokens: number;
  /** Native monotonic times: when submitted, when each token was emitted. */
  enqueueMs: number;
  tokenMs: number[];
  /** Wall time of each prefill step this request took part in (ms), recomputes after a preemption included. */
  prefillChunkMs: number[];
  /** How many of prefillChunkMs ran up to its first token (the rest: recomputes after a preemption that
   * came after it). Absent: no token, or not known (a server). */
  prefillChunksToFirst?: number;
  /** Prompt tokens served from the prefix cache. */
  cachedPromptTokens: number;
  /**
   * The engine preempted it (KV pool full) this many times, each after it had generated
   * preemptedAfter[i] tokens: its recompute prefill ran before token preemptedAfter[i], inside the gap
   * from the token before (inside its TTFT when 0). Absent: never preempted (or not known: a server).
   */
  preemptedAfter?: number[];
  /** When it was admitted again after each preemption (ms, the engine's clock): its recompute's start. */
  readmitMs?: number[];
  finishReason: FinishReason;
  error?: string;
  /**
   * With finishReason 'error': 'non_finite_logits' when the engine failed the request because a logits
   * row it had to pick from held NaN or infinite values (broken weights or an overflow).
   */
  errorCode?: 'non_finite_logits';
  /** Per generated token, when the request asked for logprobs. */
  logprobs?: TokenLogprobs[];
  /** Row-major float32 [rows, vocab] when logits: 'all'. */
  logits?: Float32Array;
  logitRows?: number;
}

export interface EngineStats {
  peakActiveBytes: number;
  activeBytes: number;
  numAllocs: number;
  parkWaits: number;
  prefixAdmittedTokens: number;
  prefixHitTokens: number;
  retires: number;
  evictions: number;
  preemptions: number;
  kvBlocksUsed: number;
  kvBlocksFree: number;
  kvBlocksTotal: number;
  /** Recurrent-state slots (one per running sequence). */
  stateSlotsFree: number;
  stateSlotsTotal: number;
  /** KV blocks the prefix cache holds; with no request in flight these are all of kvBlocksUsed. */
  prefixCachedBlocks: number;
  /** Recurrent-state snapshots holding a cached prefix. */
  snapshotsUsed: number;
  snapshotsTotal: number;
  steps: number;
  weightBytes: number;
  /** CUDA graphs (0 on the CPU): decode steps replayed, steps that captured their bucket, capture time. */
  graphHits?: number;
  graphMisses?: number;
  graphCaptureMs?: number;
  /**
   * The device allocator (CUDA; 0 on the CPU), since the engine loaded (not reset by resetCounters):
   * bytes allocated now, their high-water mark, cudaMalloc calls. On CUDA peakActiveBytes is
   * devicePeakBytes and numAllocs the cudaMalloc calls since the last resetCounters().
   */
  deviceBytes?: number;
  devicePeakBytes?: number;
  deviceAllocs?: number;
}

/** Per-op profile row (native timers; self time excludes nested spans). */
export interface ProfileOp {
  name: string;
  group: string;
  calls: number;
  totalUs: number;
  selfUs: number;
}

/** Per-stage wall times of the engine loop (scheduling, forward, sampling, JS callbacks). */
export interface PipelineStage {
  name: string;
  calls: number;
  totalUs: number;
}

export interface ProfileReport {
  ops: ProfileOp[];
  pipeline: PipelineStage[];
}

export interface EngineInfo {
  backend: Device;
  /** CPU kernel path (avx2 | avx512-bf16 | avx512-bf16+amx) or GPU name. */
  isa: string;
  threads: number;
  weightBytes: number;
  /** The element types the weight matrices run in, the one holding the most bytes first, joined by "+" (bf16, q8_0; q6_k+q4_k for the 0.8B's Q4_K_M, q4_k+q6_k for larger models'). */
  dtype: string;
  kvBlocksTotal: number;
  blockSize: number;
  /** The prefix cache's snapshot spacing in tokens: a cached prefix is reused up to a multiple of it (0: no prefix cache). */
  snapshotInterval: number;
  /** Bytes of one KV block (every full-attention layer) and of one recurrent state. */
  kvBlockBytes: number;
  /** Element type of the KV cache, which kvBlockBytes counts in (f32 from an addon that does not say). */
  kvCacheDtype: KvCacheDtype;
  stateBytes: number;
  /** The KV pool as sized at load: kvBlocksTotal x kvBlockBytes, and what sized it. */
  kvPoolBytes?: number;
  kvPool?: KvPoolSource;
  /** Fraction-sized pools: the fraction, the free memory it was taken of, the pool's share (bytes). */
  kvMemoryFraction?: number;
  kvFreeBytes?: number;
  kvBudgetBytes?: number;
  /** A device backend frees the host copy of the weights once uploaded; the process RSS just before and after. */
  hostWeightsReleased?: boolean;
  rssBeforeReleaseBytes?: number;
  rssAfterReleaseBytes?: number;
  gpuName?: string;
  gpuMemoryBytes?: number;
}

/** What sized the KV pool (the native engine's words, EngineInfo::kv_pool_source). */
export type KvPoolSource = 'max_seq x max_seqs' | 'kv_memory_bytes' | 'fraction of free device memory' | 'fraction of available host memory';

export interface RequestHandle {
  id: number;
  done: Promise<RequestResult>;
  cancel(): void;
}

/**
 * What the sweep's rows drive: the in-process engine (EngineHandle) or a server over HTTP
 * (src/endpoint/endpoint-engine.ts), which has no counters or load facts of its own to report.
 */
export interface RequestEngine {
  /**
   * Queues a request. With `onToken` the request streams: one event per generated token crosses to
   * JS (prompt, serve). Without it, only the result does; progress comes from onStep. An onToken
   * that throws ends its own request (finishReason 'error', the error naming what was thrown) and
   * no other.
   */
  submit(req: RequestOptions, onToken?: (ev: TokenEvent) => void): RequestHandle;
  /** Calls `listener` once per engine step that generated tokens, with their count; returns the unsubscribe. */
  onStep(listener: (tokens: number) => void): () => void;
  /** Monotonic clock, ms (the clock of every event time): the engine's native one, or the client's. */
  nowMs(): number;
  /** Profile since the last call (null unless EngineOptions.profile, and always for a server). */
  takeProfile(): ProfileReport | null;
  close(): Promise<void>;
}

/** The engine as the CLI sees it. Created by loadEngine() in src/engine/engine.ts. */
export interface EngineHandle extends RequestEngine {
  readonly info: EngineInfo;
  /** Current counters (cumulative since load or the last resetCounters()). */
  stats(): EngineStats;
  /** Reset cumulative counters and the peak to the current level (between sweep cells). */
  resetCounters(): void;
  /**
   * Engines loaded with internals.manualSteps only (tests): lets the worker run n more steps from
   * now, so a test places a cancel or a submit exactly between two steps instead of racing the
   * worker. Permits are topped up to n, not added: polling with allowSteps(1) never banks steps.
   */
  allowSteps?(n: number): void;
}
