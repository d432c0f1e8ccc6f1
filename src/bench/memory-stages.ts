// --memory-stages FILE: the engine's memory counters at each stage of the model's life, appended as JSON lines.
import { appendFileSync } from 'node:fs';
import type { EngineHandle } from '../engine/types.js';
import type { ModelCheckpoint } from '../model/types.js';

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
  /** Host resident set of this process (bytes), for comparison with the engine's own accounting. */
  process_rss_bytes: number;
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
    model_path: ckpt.dir,
    checkpoint_bytes: ckpt.bytesOnDisk,
    weight_bytes: s.weightBytes,
    active_bytes: s.activeBytes,
    peak_active_bytes: s.peakActiveBytes,
    num_allocs: s.numAllocs,
    kv_blocks_total: s.kvBlocksTotal,
    kv_blocks_used: s.kvBlocksUsed,
    kv_block_size: info.blockSize,
    process_rss_bytes: process.memoryUsage.rss(),
    engine_ms: engine.nowMs(),
    time: new Date().toISOString(),
    tool_version: toolVersion,
  }];
}

export function appendMemoryStage(file: string, rows: readonly MemoryStageRow[]): void {
  appendFileSync(file, rows.map((r) => JSON.stringify(r) + '\n').join(''));
}
