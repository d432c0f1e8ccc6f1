// The serving options a command resolved from its flags (src/cli/engine-flags.ts), and how they
// become the engine's options: written once for the sweep and `serve`.
import { UsageError } from '../util/usage-error.js';
import type { Device, EngineOptions, KvCacheDtype, KvLayout } from './types.js';

/** --device: a device, or auto (cuda when the build has a usable GPU backend; see device.ts). */
export type DeviceChoice = 'cpu' | 'cuda' | 'auto';

/** --kv-memory: a byte size, or a fraction of the memory free once the weights are bound. */
export type KvMemory = { bytes: number } | { fraction: number };

/** The share of free device memory a CUDA engine's KV pool gets when --kv-memory is not given. */
export const CUDA_KV_MEMORY_FRACTION = 0.9;

/**
 * The largest --kv-memory fraction on the CPU. There it is a share of the host's MemAvailable, which
 * counts reclaimable page cache (a GGUF's mapped weights among it) and is shared with Node's heap, the
 * results and every other process: 1.0 took all of it for the KV pool. On CUDA the fraction is of the
 * device memory left once the engine's weights and work buffers are allocated, the engine's own: up to 1.
 */
export const CPU_KV_MEMORY_FRACTION_MAX = 0.95;

/** --kv-memory checked against the device it will size a pool on (a usage error, before any load). */
export function checkKvMemoryForDevice(kv: KvMemory | null, device: Device): void {
  if (kv !== null && 'fraction' in kv && device === 'cpu' && kv.fraction > CPU_KV_MEMORY_FRACTION_MAX) {
    throw new UsageError(`--kv-memory: a fraction of ${kv.fraction} of the host's available memory would leave too little for the rest of the process and the host; ` +
      `on the CPU it is at most ${CPU_KV_MEMORY_FRACTION_MAX} (or give a size in bytes)`);
  }
}

/**
 * --max-seq for a model built for `model.max` positions (src/model/model-path.ts, modelMaxPositions):
 * a sequence needs one position per token, and past the model's positions the rotary embedding runs
 * where the model never trained, so the engine would answer with numbers nobody asked for. Given: at
 * most the model's maximum, else a usage error naming the flag and the maximum (vLLM refuses a
 * max_model_len above max_position_embeddings the same way). Not given: the default, or the model's
 * maximum when that is smaller, with a note saying so.
 */
export function fitMaxSeq(flags: { maxSeq: number; maxSeqGiven?: boolean }, model: { max: number; source: string }): { maxSeq: number; note: string | null } {
  if (flags.maxSeq <= model.max) return { maxSeq: flags.maxSeq, note: null };
  if (flags.maxSeqGiven) {
    throw new UsageError(`--max-seq ${flags.maxSeq} is more than the model's maximum of ${model.max} positions (${model.source}); give --max-seq ${model.max} or less`);
  }
  return { maxSeq: model.max, note: `--max-seq ${model.max}: the model's maximum (${model.source}), below the default ${flags.maxSeq}` };
}

export interface ServingFlags {
  threads: number;
  kvcache: KvLayout;
  blockSize: number;
  prefillChunk: number;
  stepTokenBudget: number;
  maxSeq: number;
  /** Whether --max-seq was given (else maxSeq is the default, which fitMaxSeq lowers to a smaller model's maximum). */
  maxSeqGiven?: boolean;
  /** --cuda-graphs: capture and replay decode steps as CUDA graphs (CUDA only; no effect on the CPU). */
  cudaGraphs: boolean;
  /** --kv-memory; null: the default (CUDA_KV_MEMORY_FRACTION on CUDA, max-seq x max-seqs on the CPU). */
  kvMemory: KvMemory | null;
  /** --kv-cache-dtype: the KV cache's element type. */
  kvCacheDtype: KvCacheDtype;
}

/**
 * The flags that sized a KV cache the engine could not have (a KvMemoryError at load): --kv-memory
 * when given; else --max-seq and the command's flag for the sequences at once (`seqsFlag`: serve's
 * --max-seqs, the sweep's --concurrency): the CPU's pool holds max-seq x max-seqs tokens, the CUDA
 * default share must hold one max-seq sequence.
 */
export function kvMemoryFlags(kv: KvMemory | null, seqsFlag: string): string {
  return kv !== null ? '--kv-memory' : `--max-seq / ${seqsFlag}`;
}

/** The KV pool options of the engine: --kv-memory, or the device's default (paged pools only). */
export function kvMemoryOptions(kv: KvMemory | null, device: Device, layout: KvLayout): Pick<EngineOptions, 'kvMemoryBytes' | 'kvMemoryFraction'> {
  if (layout !== 'paged') return {};
  checkKvMemoryForDevice(kv, device);
  if (kv !== null) return 'bytes' in kv ? { kvMemoryBytes: kv.bytes } : { kvMemoryFraction: kv.fraction };
  return device === 'cuda' ? { kvMemoryFraction: CUDA_KV_MEMORY_FRACTION } : {};
}

/** The prefix cache is on with the paged KV cache; the continuous cache has none (the engine turns it
 * off), so the options, the header, the reports and the rows' notes say off. */
export function prefixCacheWith(kvcache: KvLayout): boolean {
  return kvcache === 'paged';
}

/** Resolved flags -> the engine's options. */
export function engineOptionsFrom(flags: ServingFlags, device: Device, maxSeqs: number, profile = false): EngineOptions {
  return {
    device,
    threads: flags.threads,
    blockSize: flags.blockSize,
    kvcache: flags.kvcache,
    maxSeq: flags.maxSeq,
    maxSeqs,
    prefillChunk: flags.prefillChunk,
    stepTokenBudget: flags.stepTokenBudget,
    prefixCache: prefixCacheWith(flags.kvcache),
    cudaGraphs: device === 'cuda' && flags.cudaGraphs,
    kvCacheDtype: flags.kvCacheDtype,
    ...kvMemoryOptions(flags.kvMemory, device, flags.kvcache),
    profile,
  };
}
