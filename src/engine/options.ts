// The serving options a command resolved from its flags (src/cli/engine-flags.ts), and how they
// become the engine's options: written once for the sweep and `serve`.
import type { Device, EngineOptions, KvLayout } from './types.js';

/** --device: a device, or auto (cuda when the build has a usable GPU backend; see device.ts). */
export type DeviceChoice = 'cpu' | 'cuda' | 'auto';

export interface ServingFlags {
  threads: number;
  kvcache: KvLayout;
  blockSize: number;
  prefillChunk: number;
  stepTokenBudget: number;
  maxSeq: number;
  /** --cuda-graphs: capture and replay decode steps as CUDA graphs (CUDA only; no effect on the CPU). */
  cudaGraphs: boolean;
}

/** Resolved flags -> the engine's options (the prefix cache is always on, as in the sweep). */
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
    prefixCache: true,
    cudaGraphs: device === 'cuda' && flags.cudaGraphs,
    profile,
  };
}
