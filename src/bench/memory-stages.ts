// --memory-stages FILE: the engine's memory counters at each stage of the model's life, appended as JSON lines.
import { appendFileSync } from 'node:fs';
import type { EngineHandle } from '../engine/types.js';
import type { ModelCheckpoint } from '../model/types.js';
import { weightsPath } from '../model/weight-format.js';
import { makeParentDirs } from '../util/output-dir.js';

export type MemoryStage = 'weights_bound' | 'warmup_forward' | 'first_generation';

export interface MemoryStageRow {
  stage: MemoryStage;
  /** The device whose pool the counters describe: `cpu`, or `cuda:0` on the GPU backend. */
  device: string;
  backend: string;
  model_path: string;
  checkpoint_bytes: number;
  weight_bytes: number;
  active_bytes: number;
  peak_active_bytes: number;
  num_allocs: number;
  kv_blocks_total: number;
  kv_blocks_used: number;
  kv_block_size: number;
  /** The KV pool as sized at load (bytes) and what sized it (EngineInfo.kvPool). */
  kv_pool_bytes: number;
  kv_pool_source: string;
  /** The KV cache's element type (EngineInfo.kvCacheDtype), which kv_pool_bytes counts in. */
  kv_cache_dtype: string;
  /** The device allocator (CUDA; 0 on the CPU): bytes now, high-water mark since load. */
  device_bytes: number;
  device_peak_bytes: number;
  /** Host resident set of this process (bytes), for comparison with the engine's own accounting. */
  process_rss_bytes: number;
  /**
   * A device backend frees the host copy of the weights once it has uploaded them (the CPU keeps
   * it): whether it did, and the process's resident set the engine measured (/proc/self/statm) just
   * before (weights uploaded, host copy still held) and just after the release; null when not released.
   */
  host_weights_released: boolean;
  rss_at_upload_bytes: number | null;
  rss_after_release_bytes: number | null;
  /** Native clock at the snapshot (ms). */
  engine_ms: number;
  time: string;
  tool_version: string;
}

/**
 * One row per device the engine runs on. EngineStats is a single pool, so the row names the backend's
 * device (the CPU build has one device; a CUDA engine's pool lives on GPU 0).
 */
export function memoryStageRows(stage: MemoryStage, engine: EngineHandle, ckpt: ModelCheckpoint, toolVersion: string): MemoryStageRow[] {
  const s = engine.stats();
  const info = engine.info;
  return [{
    stage,
    device: info.backend === 'cuda' ? 'cuda:0' : 'cpu',
    backend: info.backend,
    model_path: weightsPath(ckpt),
    checkpoint_bytes: ckpt.bytesOnDisk,
    weight_bytes: s.weightBytes,
    active_bytes: s.activeBytes,
    peak_active_bytes: s.peakActiveBytes,
    num_allocs: s.numAllocs,
    kv_blocks_total: s.kvBlocksTotal,
    kv_blocks_used: s.kvBlocksUsed,
    kv_block_size: info.blockSize,
    kv_pool_bytes: info.kvPoolBytes ?? s.kvBlocksTotal * info.kvBlockBytes,
    kv_pool_source: info.kvPool ?? 'max_seq x max_seqs',
    kv_cache_dtype: info.kvCacheDtype,
    device_bytes: s.deviceBytes ?? 0,
    device_peak_bytes: s.devicePeakBytes ?? 0,
    process_rss_bytes: process.memoryUsage.rss(),
    host_weights_released: info.hostWeightsReleased ?? false,
    rss_at_upload_bytes: info.hostWeightsReleased ? (info.rssBeforeReleaseBytes ?? null) : null,
    rss_after_release_bytes: info.hostWeightsReleased ? (info.rssAfterReleaseBytes ?? null) : null,
    engine_ms: engine.nowMs(),
    time: new Date().toISOString(),
    tool_version: toolVersion,
  }];
}

/**
 * Appends to --memory-stages FILE, making its missing directories (checked at the start:
 * checkOutputFile). Returns null, or why it could not (the caller warns; the sweep goes on).
 */
export function appendMemoryStage(file: string, rows: readonly MemoryStageRow[]): string | null {
  try {
    makeParentDirs(file);
    appendFileSync(file, rows.map((r) => JSON.stringify(r) + '\n').join(''));
    return null;
  } catch (err) {
    return `cannot write ${file} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`;
  }
}
