// The sweep's model load: the checkpoint (a bad --model-path is a usage error), then the engine,
// each stage rendered and recorded in the report; the engine is null when it failed to load.
import { performance } from 'node:perf_hooks';
import { KvMemoryError } from '../engine/engine.js';
import { fitMaxSeq, kvMemoryFlags } from '../engine/options.js';
import type { Device, EngineHandle, EngineOptions } from '../engine/types.js';
import { modelMaxPositions } from '../model/model-path.js';
import { embeddedModelError } from '../model/embedded.js';
import { describeSynthetic, syntheticWeightsOf } from '../model/synthetic-model.js';
import { CheckpointError, loadedModelNotes, type ModelCheckpoint, type SyntheticWeights } from '../model/types.js';
import { weightFormatLine } from '../model/weight-format.js';
import type { GpuInfo } from '../util/machine.js';
import { UsageError } from '../util/usage-error.js';
import { modelSection, type Report } from './report.js';
import { engineLine, kvPoolFacts, type SweepRenderer } from './render.js';
import { errMessage } from './runner.js';
import type { SweepConfig } from './sweep-config.js';
import type { SweepBackend } from './sweep.js';

export interface LoadedModel {
  ckpt: ModelCheckpoint;
  /** The options the engine was loaded with: the caller's, with --max-seq fitted to the model (fitMaxSeq). */
  opts: EngineOptions;
  engine: EngineHandle | null;
  /** Why the engine did not load (engine null). */
  loadError: string | null;
}

export async function loadModel(
  cfg: SweepConfig, backend: SweepBackend, device: Device, flagOpts: EngineOptions, gpus: readonly GpuInfo[],
  renderer: SweepRenderer, report: Report,
): Promise<LoadedModel> {
  const embedded = cfg.modelPath === null;
  const modelDir = cfg.modelPath ?? (await backend.ensureEmbeddedModel());
  const badPath = (err: unknown): unknown =>
    !(err instanceof CheckpointError) ? err : embedded ? embeddedModelError(modelDir, err) : new UsageError(`--model-path: ${err.message}`);
  let synthetic: SyntheticWeights | null;
  try {
    synthetic = syntheticWeightsOf(modelDir);
  } catch (err) {
    throw badPath(err);
  }
  renderer.modelPath(modelDir, embedded, synthetic ?? undefined);

  const tc0 = performance.now();
  let ckpt: ModelCheckpoint;
  try {
    ckpt = await backend.loadCheckpoint(modelDir, cfg.quant);
  } catch (err) {
    throw badPath(err);
  }
  const checkpointMs = performance.now() - tc0;
  report.model = modelSection(ckpt, embedded);
  const weights = weightFormatLine(ckpt);
  renderer.weights(weights);
  if (ckpt.syntheticWeights) report.notes.push(`model: ${describeSynthetic(ckpt.syntheticWeights)}`);
  report.notes.push(`weights: ${weights}`);
  for (const n of loadedModelNotes(ckpt)) {
    renderer.note(n);
    report.notes.push(n);
  }
  renderer.loadStage('checkpoint', {
    path: ckpt.dir, shards: ckpt.shards.length, bytes_on_disk: ckpt.bytesOnDisk, param_count: ckpt.paramCount,
    dtype: ckpt.dtype, layers: ckpt.config.numLayers, ms: checkpointMs,
    ...(ckpt.syntheticWeights ? { synthetic: { ...ckpt.syntheticWeights } } : {}),
  });

  // The positions the model was built for bound --max-seq and every cell: usage errors, before the engine loads.
  const positions = modelMaxPositions(ckpt);
  const fit = fitMaxSeq(cfg, positions);
  if (fit.note !== null) {
    renderer.note(fit.note);
    report.notes.push(fit.note);
  }
  const over = cfg.cells.find((c) => c.isl + c.osl > positions.max);
  if (over !== undefined) {
    throw new UsageError(`${cfg.cellsFlag ?? 'the default --cells'}: the cell ${over.isl}:${over.osl} needs ${over.isl + over.osl} positions (isl + osl), ` +
      `more than the model's maximum of ${positions.max} (${positions.source})`);
  }
  const opts: EngineOptions = { ...flagOpts, maxSeq: fit.maxSeq };

  renderer.loadStage('engine_load_start', { device, options: opts });
  const te0 = performance.now();
  let engine: EngineHandle | null = null;
  let loadError: string | null = null;
  try {
    engine = await backend.loadEngine(ckpt, opts, { onLoadProgress: (d, t) => renderer.loadProgress(d, t) });
  } catch (err) {
    // A KV cache the flags ask for that cannot be had: the flags named, as a usage error would.
    loadError = err instanceof KvMemoryError ? `${kvMemoryFlags(cfg.kvMemory, '--concurrency')}: ${err.message}` : errMessage(err);
  }
  const loadMs = performance.now() - te0;
  if (engine === null) return { ckpt, opts, engine, loadError };

  const info = engine.info;
  report.engine = { ...info, options: opts };
  report.modelLoad = { checkpoint_ms: checkpointMs, engine_ms: loadMs, weight_bytes: info.weightBytes };
  const kvPool = kvPoolFacts(info);
  renderer.loadStage('engine', {
    backend: info.backend, isa: info.isa, threads: info.threads, weight_bytes: info.weightBytes, dtype: info.dtype, kv_blocks_total: info.kvBlocksTotal,
    kv_pool: kvPool, host_weights_released: info.hostWeightsReleased ?? false,
    rss_before_release_bytes: info.rssBeforeReleaseBytes ?? null, rss_after_release_bytes: info.rssAfterReleaseBytes ?? null, ms: loadMs,
  });
  const gpu = info.backend === 'cuda'
    ? {
      name: info.gpuName ?? gpus[0]?.name ?? 'unnamed GPU',
      memoryMb: info.gpuMemoryBytes !== undefined ? Math.round(info.gpuMemoryBytes / (1024 * 1024)) : (gpus[0]?.memoryMb ?? 0),
    }
    : null;
  renderer.loaded({
    seconds: (checkpointMs + loadMs) / 1000,
    backend: info.backend,
    isa: info.isa,
    weightBytes: info.weightBytes,
    threads: info.threads,
    gpu,
    engineLine: engineLine(opts, info),
    kvPool,
    sweepLine: sweepLine(cfg),
  });
  return { ckpt, opts, engine, loadError };
}

/** The header's plan of the sweep: cells, ladder, passes, prompts, load. */
export function sweepLine(cfg: SweepConfig): string {
  const l = cfg.load;
  const timed = l.requestRate !== null
    ? `${l.numRequests ?? `${cfg.iters} x concurrency`} timed requests at ${Number.isFinite(l.requestRate) ? `${l.requestRate} req/s (burstiness ${l.burstiness})` : 'once'}`
    : `${cfg.iters} timed pass${cfg.iters === 1 ? '' : 'es'}`;
  return `${cfg.cells.map((c) => `${c.isl}:${c.osl}`).join(', ')} x concurrency ${cfg.concurrency.join(',')}; ` +
    `${cfg.warmup} warm-up + ${timed}; ${cfg.prompts} prompts` +
    `${cfg.sharedPrefix ? `, shared prefix ${cfg.sharedPrefix}` : ''}; seed ${cfg.seed}`;
}
