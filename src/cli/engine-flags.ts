// The engine flags, defined once for every command that loads the serving engine (the sweep and
// `serve`): the commander options, their defaults, the resolver (raw strings -> validated values,
// each bad value a UsageError naming its flag) and the mapping to EngineOptions. A flag means the
// same thing in both commands because it is this code in both.
import { existsSync, statSync } from 'node:fs';
import path from 'node:path';
import { Option } from 'commander';
import { CPU_KV_MEMORY_FRACTION_MAX, CUDA_KV_MEMORY_FRACTION, type DeviceChoice, type KvMemory, type ServingFlags } from '../engine/options.js';
import { KV_CACHE_DTYPES, type KvCacheDtype, type KvLayout } from '../engine/types.js';
import { PRESET_NAMES } from '../model/presets.js';
import { isSyntheticModelPath, syntheticName, syntheticWeightsOf } from '../model/synthetic-model.js';
import { CheckpointError } from '../model/types.js';
import { UsageError } from '../util/usage-error.js';
import { oneOf, parseCount } from './flag-values.js';

export type { DeviceChoice };

export const ENGINE_DEFAULTS = {
  device: 'auto' as DeviceChoice,
  threads: 0,
  kvcache: 'paged' as KvLayout,
  blockSize: 16,
  prefillChunk: 512,
  stepTokenBudget: 2048,
  maxSeq: 4096,
  cudaGraphs: 'on' as 'on' | 'off',
  kvCacheDtype: 'f32' as KvCacheDtype,
  /**
   * --kv-memory when not given: on CUDA (paged) this share of the device memory free once the
   * weights are bound; on the CPU the pool holds max-seq x max-seqs tokens (no default size).
   */
  kvMemoryCudaFraction: CUDA_KV_MEMORY_FRACTION,
};

/**
 * The largest value each numeric engine flag takes; a larger one is a usage error naming the flag.
 * The engine reads them as 32-bit integers (a value past 2^31 - 1 would wrap: --max-seq 4294967312 ran
 * as 16), and sums them with each other in 32-bit arithmetic (max-seq + block size, a sequence's
 * computed tokens + a chunk), so the token counts stop at 2^30, leaving that headroom; no model's
 * context comes near it. Threads, sequences and the block size have smaller physical bounds.
 * --kv-memory bytes: 1 PiB, beyond any host or device (the engine sizes it in 64 bits).
 */
export const ENGINE_FLAG_MAX = {
  /** --max-seq, --prefill-chunk, --step-token-budget (and the sweep's isl, osl, shared prefix): tokens. */
  tokens: 2 ** 30,
  threads: 4096,
  maxSeqs: 4096,
  blockSize: 65536,
  kvMemoryBytes: 2 ** 50,
} as const;

/** Raw values as commander hands them over (strings and booleans; no commander defaults). */
export interface RawEngineFlags {
  device?: string;
  threads?: string;
  kvcache?: string;
  paged?: boolean;
  blockSize?: string;
  prefillChunk?: string;
  stepTokenBudget?: string;
  maxSeq?: string;
  maxSeqs?: string;
  cudaGraphs?: string;
  kvMemory?: string;
  kvCacheDtype?: string;
  modelPath?: string;
  quant?: string;
}

export interface EngineFlags extends ServingFlags {
  device: DeviceChoice;
  /** Only where the command takes --max-seqs (the sweep sizes it from --concurrency). */
  maxSeqs?: number;
}

/** The options, by name; each command adds the ones it takes where its help lists them. */
export const ENGINE_FLAGS = {
  device: () => new Option('--device <device>', `cpu | cuda | auto (default ${ENGINE_DEFAULTS.device}: cuda when the engine has a GPU backend)`),
  threads: () => new Option('--threads <n>', `CPU worker threads, 0 = all cores (default ${ENGINE_DEFAULTS.threads})`),
  kvcache: () => new Option('--kvcache <layout>', `paged | continuous (default ${ENGINE_DEFAULTS.kvcache})`),
  paged: () => new Option('--paged', 'same as --kvcache paged'),
  blockSize: () => new Option('--block-size <n>', `tokens per KV block (default ${ENGINE_DEFAULTS.blockSize})`),
  prefillChunk: () => new Option('--prefill-chunk <n>', `largest prefill chunk per sequence per step (default ${ENGINE_DEFAULTS.prefillChunk})`),
  stepTokenBudget: () => new Option('--step-token-budget <n>', `most tokens in one forward step (default ${ENGINE_DEFAULTS.stepTokenBudget})`),
  maxSeq: () => new Option('--max-seq <n>', `longest sequence (prompt + output) the engine accepts, at most the positions the model was built for (max_position_embeddings) ` +
    `(default ${ENGINE_DEFAULTS.maxSeq}, or that maximum when smaller)`),
  modelPath: () => new Option('--model-path <path>', `checkpoint directory, GGUF file (split: its -00001-of-0000N part), a directory of GGUF files with --quant, or synthetic:<preset> (${PRESET_NAMES.join(' | ')}: random weights generated in memory) (default: the embedded synthetic model)`),
  quant: () => new Option('--quant <type>', 'with --model-path DIR: the GGUF file whose name carries this quantization (e.g. Q4_K_M, Q8_0; any case)'),
  cudaGraphs: () => new Option('--cuda-graphs <on|off>', `with --device cuda: capture and replay decode steps as CUDA graphs (default ${ENGINE_DEFAULTS.cudaGraphs}; no effect on the CPU)`),
  kvMemory: () => new Option('--kv-memory <bytes|fraction>', 'size of the paged KV pool: bytes (4294967296, 512MiB, 8GiB, 8GB; KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB of 1000), ' +
    `or a fraction 0 < f <= 1 (0.9, 90%) of the memory free once the weights are bound (CUDA: device memory; CPU: MemAvailable, at most ${CPU_KV_MEMORY_FRACTION_MAX}), ` +
    `which the pool shares with the recurrent states (default: ${ENGINE_DEFAULTS.kvMemoryCudaFraction} on CUDA, max-seq x max-seqs tokens on the CPU)`),
  kvCacheDtype: () => new Option('--kv-cache-dtype <f32|f16>', 'element type of the KV cache: f16 halves its bytes, K and V rounded to f16 when written, ' +
    `the attention arithmetic f32 (default ${ENGINE_DEFAULTS.kvCacheDtype})`),
  maxSeqs: (dflt: number) => new Option('--max-seqs <n>', `most sequences running at once (recurrent-state slots); more wait (default ${dflt})`),
} as const;

/**
 * `--model-path` / `--quant` checked (the path exists, or `synthetic:<preset>` names a preset; a
 * quant name is a word), before anything loads. A synthetic path comes back as `synthetic:<preset>`.
 */
export function resolveModelPathFlags(raw: RawEngineFlags): { modelPath: string | null; quant?: string } {
  if (raw.quant !== undefined) {
    if (raw.modelPath === undefined) throw new UsageError('--quant needs --model-path (a directory of GGUF files, or one GGUF file)');
    if (!/^[A-Za-z0-9_]+$/.test(raw.quant)) throw new UsageError(`--quant: '${raw.quant}' is not a quantization name (e.g. Q4_K_M)`);
  }
  if (raw.modelPath === undefined) return { modelPath: null };
  // An empty path resolves to the working directory: a model nobody named.
  if (raw.modelPath.trim() === '') throw new UsageError('--model-path: empty (give a checkpoint directory, a .gguf file or synthetic:<preset>)');
  if (isSyntheticModelPath(raw.modelPath)) {
    let weights;
    try {
      weights = syntheticWeightsOf(raw.modelPath)!;
    } catch (err) {
      if (err instanceof CheckpointError) throw new UsageError(`--model-path ${err.message}`);
      throw err;
    }
    if (raw.quant !== undefined) {
      throw new UsageError(`--quant ${raw.quant}: does not apply to --model-path ${raw.modelPath} (synthetic weights are ${weights.dtype}, generated in memory)`);
    }
    return { modelPath: syntheticName(weights) };
  }
  const abs = path.resolve(raw.modelPath);
  if (!existsSync(abs)) throw new UsageError(`--model-path: ${raw.modelPath} does not exist`);
  const st = statSync(abs);
  if (!st.isDirectory() && !(st.isFile() && /\.gguf$/i.test(abs))) {
    throw new UsageError(`--model-path: ${raw.modelPath} is neither a directory nor a .gguf file`);
  }
  return { modelPath: abs, ...(raw.quant !== undefined ? { quant: raw.quant } : {}) };
}

const KV_UNITS: Record<string, number> = {
  b: 1, kb: 1e3, mb: 1e6, gb: 1e9, tb: 1e12, kib: 2 ** 10, mib: 2 ** 20, gib: 2 ** 30, tib: 2 ** 40,
};

/**
 * `--kv-memory`: bytes (a whole number, or a number with a unit: B, KB/MB/GB/TB = 1000^n,
 * KiB/MiB/GiB/TiB = 1024^n, any case; rounded down to a whole byte), or a fraction in (0, 1] of the
 * memory free after the weights are bound: a decimal with a point (0.9, 1.0, .5) or a percentage (90%).
 */
export function parseKvMemory(flag: string, value: string): KvMemory {
  const v = value.trim();
  const pct = /^(\d+(?:\.\d*)?|\.\d+)%$/.exec(v);
  if (pct || /^(\d*\.\d*)$/.test(v)) {
    const f = pct ? Number(pct[1]) / 100 : Number(v);
    if (v === '.' || !Number.isFinite(f)) throw new UsageError(`${flag}: '${value}' is not a size or a fraction (e.g. 8GiB, 0.9)`);
    if (!(f > 0 && f <= 1)) throw new UsageError(`${flag}: the fraction ${value} is not in (0, 1]`);
    return { fraction: f };
  }
  const m = /^(\d+(?:\.\d+)?)\s*([a-zA-Z]*)$/.exec(v);
  if (!m) throw new UsageError(`${flag}: '${value}' is not a size or a fraction (e.g. 8GiB, 512MiB, 4294967296, 0.9)`);
  const unit = m[2]!.toLowerCase();
  if (unit === '' && m[1]!.includes('.')) throw new UsageError(`${flag}: '${value}' is not a size or a fraction (e.g. 8GiB, 0.9)`);
  const mult = unit === '' ? 1 : KV_UNITS[unit];
  if (mult === undefined) throw new UsageError(`${flag}: '${m[2]}' is not a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)`);
  const bytes = Math.floor(Number(m[1]) * mult);
  if (!Number.isSafeInteger(bytes) || bytes > ENGINE_FLAG_MAX.kvMemoryBytes) throw new UsageError(`${flag}: ${value} is too large (at most 1PiB)`);
  if (bytes < 1) throw new UsageError(`${flag}: ${value} is below the minimum of 1 byte`);
  return { bytes };
}

/**
 * Raw engine flags -> validated values. `maxSeqsDefault` is given by commands that take --max-seqs
 * (its default); without it --max-seqs is not resolved.
 */
export function resolveEngineFlags(raw: RawEngineFlags, maxSeqsDefault?: number): EngineFlags {
  const device = oneOf('--device', raw.device ?? ENGINE_DEFAULTS.device, ['cpu', 'cuda', 'auto'] as const);
  let kvcache = ENGINE_DEFAULTS.kvcache;
  if (raw.kvcache !== undefined) kvcache = oneOf('--kvcache', raw.kvcache, ['paged', 'continuous'] as const);
  if (raw.paged && kvcache !== 'paged') {
    throw new UsageError(`--paged contradicts --kvcache ${raw.kvcache}; give one`);
  }
  const num = (flag: string, v: string | undefined, dflt: number, min: number, max?: number) =>
    v === undefined ? dflt : parseCount(flag, v, min, max);
  const flags: EngineFlags = {
    device,
    threads: num('--threads', raw.threads, ENGINE_DEFAULTS.threads, 0, ENGINE_FLAG_MAX.threads),
    kvcache,
    blockSize: num('--block-size', raw.blockSize, ENGINE_DEFAULTS.blockSize, 1, ENGINE_FLAG_MAX.blockSize),
    prefillChunk: num('--prefill-chunk', raw.prefillChunk, ENGINE_DEFAULTS.prefillChunk, 1, ENGINE_FLAG_MAX.tokens),
    stepTokenBudget: num('--step-token-budget', raw.stepTokenBudget, ENGINE_DEFAULTS.stepTokenBudget, 1, ENGINE_FLAG_MAX.tokens),
    maxSeq: num('--max-seq', raw.maxSeq, ENGINE_DEFAULTS.maxSeq, 2, ENGINE_FLAG_MAX.tokens),
    maxSeqGiven: raw.maxSeq !== undefined,
    cudaGraphs: oneOf('--cuda-graphs', raw.cudaGraphs ?? ENGINE_DEFAULTS.cudaGraphs, ['on', 'off'] as const) === 'on',
    kvMemory: raw.kvMemory === undefined ? null : parseKvMemory('--kv-memory', raw.kvMemory),
    kvCacheDtype: oneOf('--kv-cache-dtype', raw.kvCacheDtype ?? ENGINE_DEFAULTS.kvCacheDtype, KV_CACHE_DTYPES),
  };
  if (flags.kvMemory !== null && kvcache !== 'paged') {
    throw new UsageError('--kv-memory sizes the paged KV pool; --kvcache continuous holds max-seq x max-seqs tokens');
  }
  if (maxSeqsDefault !== undefined) {
    flags.maxSeqs = num('--max-seqs', raw.maxSeqs, maxSeqsDefault, 1, ENGINE_FLAG_MAX.maxSeqs);
    if (flags.stepTokenBudget < flags.maxSeqs) {
      throw new UsageError(`--step-token-budget ${flags.stepTokenBudget} must be at least --max-seqs ${flags.maxSeqs} (one decode token per sequence)`);
    }
  }
  return flags;
}
