// What a sweep runs: the cells, the concurrency ladder, the passes, the engine's serving options and
// the outputs, resolved from the command line by src/cli/sweep-options.ts.
import type { DeviceChoice, KvMemory } from '../engine/options.js';
import type { KvCacheDtype, KvLayout } from '../engine/types.js';
import type { GoodputBounds } from './load-figures.js';

export interface Cell {
  isl: number;
  osl: number;
}

export type PromptMode = 'unique' | 'repeat';
export type OutputFormat = 'csv' | 'json' | 'md';

/** `--endpoint URL`: the sweep drives an OpenAI-compatible server instead of loading a model. */
export interface EndpointConfig {
  /** The server's base URL (a trailing /v1 removed). */
  url: string;
  api: 'chat' | 'completions';
  /** null: the first id of GET /v1/models. */
  model: string | null;
  /** The environment variable holding the API key (its value is read at connect time, never recorded). */
  apiKeyEnv: string | null;
  /** A tokenizer directory; null: the server's /tokenize. */
  tokenizer: string | null;
  /** Per-request limit (s). */
  timeoutS: number;
}

/** Open-loop load of the timed passes (--request-rate), and --goodput. */
export interface LoadConfig {
  /** Requests/s (Infinity: all at once); null = the closed loop. */
  requestRate: number | null;
  burstiness: number;
  numRequests: number | null;
  goodput: GoodputBounds | null;
}

export interface SweepConfig {
  endpoint: EndpointConfig | null;
  load: LoadConfig;
  /** Checkpoint directory; null = the embedded synthetic model. */
  modelPath: string | null;
  /** `--quant`: the GGUF quantization to choose in a directory of GGUF files. */
  quant?: string;
  device: DeviceChoice;
  threads: number;
  cells: Cell[];
  /** The flag the cells came from, for messages: `--cells`, `--isl`, `--isl/--osl`, ...; absent: the default cells. */
  cellsFlag?: string;
  /** Ascending, without duplicates. */
  concurrency: number[];
  sharedPrefix: number;
  prompts: PromptMode;
  warmup: number;
  iters: number;
  kvcache: KvLayout;
  blockSize: number;
  prefillChunk: number;
  stepTokenBudget: number;
  maxSeq: number;
  /** Whether --max-seq was given (else maxSeq is the default, lowered to a smaller model's maximum at load). */
  maxSeqGiven?: boolean;
  /** --cuda-graphs on|off (CUDA only). */
  cudaGraphs: boolean;
  /** --kv-memory; null: the default (a fraction of free device memory on CUDA, max-seq x max-seqs on the CPU). */
  kvMemory: KvMemory | null;
  /** --kv-cache-dtype: the KV cache's element type. */
  kvCacheDtype: KvCacheDtype;
  memoryStages: string | null;
  output: string | null;
  format: OutputFormat;
  profile: boolean;
  profilePipeline: boolean;
  seed: number;
  /** -1 quiet, 0 default, 1 info JSON logs, 2 debug JSON logs. */
  verbosity: number;
  latencyOnly: boolean;
  skipTraining: boolean;
  /** What the flags' resolver changed of what was asked (repeats dropped): said once on stderr as the
   * sweep starts and kept in the report's notes. */
  warnings?: string[];
}
