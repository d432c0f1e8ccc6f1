// The engine as TypeScript sees it: wraps the native engine (a worker thread running the batched
// loop) behind the EngineHandle contract. All times come from the native monotonic clock.
import type { ModelCheckpoint, TextConfig } from '../model/types.js';
import { loadAddon, type NativeEngine, type NativeEvent } from './native.js';
import type {
  EngineHandle, EngineInfo, EngineOptions, EngineStats, FinishReason, ProfileReport, RequestHandle,
  RequestOptions, RequestResult, TokenEvent, TokenLogprobs,
} from './types.js';

export interface LoadHooks {
  onLoadProgress?: (layersDone: number, layersTotal: number) => void;
}

/** Extra knobs for tests and verification (not CLI flags). */
export interface EngineInternals {
  /** Convert weights at load: keep as stored (default), or force f32 / bf16. */
  weightDtype?: 'auto' | 'f32' | 'bf16';
  /** Segments of at least this many tokens use the chunked DeltaNet kernel (default 16). */
  gdnChunkMin?: number;
  /** Token spacing of recurrent-state snapshots for the prefix cache (default 256). */
  snapshotInterval?: number;
  maxSnapshots?: number;
  /** For in-memory synthetic models. */
  syntheticDtype?: 'bf16' | 'f32';
  syntheticSeed?: number;
  /** The worker runs a step only when allowSteps() permits one (tests that must not race the worker). */
  manualSteps?: boolean;
  /** Another build of the native addon (side-by-side A/B benchmarks of two builds in one process). */
  addonPath?: string;
}

/**
 * A model source: a checkpoint on disk (or one whose `syntheticWeights` the engine generates), or a
 * config to fill with random weights in memory (dtype and seed from EngineInternals).
 */
export type ModelSource = ModelCheckpoint | { synthetic: TextConfig };

interface Pending {
  resolve: (r: RequestResult) => void;
  onToken?: (ev: TokenEvent) => void;
  /** What the request's onToken threw: the request was cancelled and ends with this error. */
  callbackError?: string;
  /** Collected from the token events when the request asked for logprobs. */
  logprobs?: TokenLogprobs[];
}

class Engine implements EngineHandle {
  readonly info: EngineInfo;
  private pending = new Map<number, Pending>();
  private early = new Map<number, NativeEvent[]>();
  private closed = false;
  private flushScheduled = false;
  private stepListeners = new Set<(tokens: number) => void>();

  constructor(private readonly native: NativeEngine, private readonly profile: boolean, private readonly manualSteps: boolean) {
    const i = native.info();
    this.info = {
      backend: i.backend as EngineInfo['backend'],
      isa: String(i.isa),
      threads: Number(i.threads),
      weightBytes: Number(i.weightBytes),
      dtype: String(i.dtype),
      kvBlocksTotal: Number(i.kvBlocksTotal),
      blockSize: Number(i.blockSize),
      snapshotInterval: Number(i.snapshotInterval ?? 0),
      kvBlockBytes: Number(i.kvBlockBytes),
      kvCacheDtype: String(i.kvCacheDtype) as EngineInfo['kvCacheDtype'],
      stateBytes: Number(i.stateBytes),
      ...(i.kvPoolSource !== undefined ? { kvPoolBytes: Number(i.kvPoolBytes), kvPool: String(i.kvPoolSource) as EngineInfo['kvPool'] } : {}),
      ...(i.kvMemoryFraction !== undefined
        ? { kvMemoryFraction: Number(i.kvMemoryFraction), kvFreeBytes: Number(i.kvFreeBytes), kvBudgetBytes: Number(i.kvBudgetBytes) }
        : {}),
      ...(i.hostWeightsReleased !== undefined ? { hostWeightsReleased: Boolean(i.hostWeightsReleased) } : {}),
      ...(i.rssBeforeReleaseBytes !== undefined
        ? { rssBeforeReleaseBytes: Number(i.rssBeforeReleaseBytes), rssAfterReleaseBytes: Number(i.rssAfterReleaseBytes) }
        : {}),
      ...(i.gpuName !== undefined ? { gpuName: String(i.gpuName), gpuMemoryBytes: Number(i.gpuMemoryBytes) } : {}),
    };
  }

  /**
   * One engine batch of events. Whatever a caller's function throws stays with it: a request's
   * onToken that throws ends that request (cancelled, its result an error naming what was thrown),
   * and a step listener's error is thrown again once every event of the batch is delivered, so no
   * other request loses an event (an exception here used to end the loop: the rest of the batch was
   * dropped, and a request finishing in it never resolved).
   */
  handle(events: NativeEvent[]): void {
    let listenerError: unknown;
    let listenerThrew = false;
    for (const ev of events) {
      if (ev.type === 'step') {
        for (const l of this.stepListeners) {
          try {
            l(ev.count ?? 0);
          } catch (err) {
            if (!listenerThrew) listenerError = err;
            listenerThrew = true;
          }
        }
        continue;
      }
      if (ev.type !== 'token' && ev.type !== 'done') continue;
      const id = ev.id as number;
      const p = this.pending.get(id);
      if (!p) {
        // An event can beat submit()'s return to JS only in theory; keep it for the handle.
        const list = this.early.get(id) ?? [];
        list.push(ev);
        this.early.set(id, list);
        continue;
      }
      this.dispatch(id, p, ev);
    }
    if (listenerThrew) queueMicrotask(() => { throw listenerError; });
  }

  private dispatch(id: number, p: Pending, ev: NativeEvent): void {
    if (ev.type === 'token') {
      const tok: TokenEvent = { token: ev.token as number, index: ev.index as number, tMs: ev.tMs as number };
      if (ev.logprob !== undefined) {
        const ids = ev.topIds ?? [];
        const lps = ev.topLogprobs ?? [];
        tok.logprobs = { logprob: ev.logprob, top: ids.map((t, k) => ({ token: t, logprob: lps[k]! })) };
        p.logprobs?.push(tok.logprobs);
      }
      if (p.onToken === undefined || p.callbackError !== undefined) return;
      try {
        p.onToken(tok);
      } catch (err) {
        p.callbackError = `the request's onToken threw at token ${tok.index}: ${err instanceof Error ? err.message : String(err)}`;
        this.native.cancel(id);
      }
      return;
    }
    this.pending.delete(id);
    const result: RequestResult = {
      id,
      tokens: ev.tokens ?? [],
      promptTokens: ev.promptTokens ?? 0,
      enqueueMs: ev.enqueueMs ?? 0,
      tokenMs: ev.tokenMs ?? [],
      prefillChunkMs: ev.prefillChunkMs ?? [],
      ...(ev.prefillChunksToFirst !== undefined ? { prefillChunksToFirst: ev.prefillChunksToFirst } : {}),
      cachedPromptTokens: ev.cachedPromptTokens ?? 0,
      ...(ev.preemptedAfter && ev.preemptedAfter.length > 0 ? { preemptedAfter: ev.preemptedAfter, readmitMs: ev.readmitMs ?? [] } : {}),
      finishReason: (p.callbackError !== undefined ? 'error' : ev.finish ?? 'error') as FinishReason,
      ...(p.callbackError !== undefined ? { error: p.callbackError } : ev.error ? { error: ev.error } : {}),
      ...(ev.errorCode === 'non_finite_logits' && p.callbackError === undefined ? { errorCode: ev.errorCode } : {}),
      ...(ev.logits ? { logits: ev.logits, logitRows: ev.logitRows } : {}),
      ...(p.logprobs ? { logprobs: p.logprobs } : {}),
    };
    p.resolve(result);
  }

  submit(req: RequestOptions, onToken?: (ev: TokenEvent) => void): RequestHandle {
    if (this.closed) throw new Error('the engine is closed');
    const prompt = req.prompt instanceof Int32Array ? req.prompt : tokenIds(req.prompt);
    let resolve!: (r: RequestResult) => void;
    const done = new Promise<RequestResult>((r) => { resolve = r; });
    // Staged natively (timestamped now) and released to the worker once this JS turn ends, so a
    // burst of submits (c sessions starting together) is admitted in one engine step.
    // Token events cross to JS for a request that streams, or whose logprobs are per-token data.
    const stream = onToken !== undefined || (req.logprobs !== undefined && req.logprobs >= 0);
    const id = this.native.submit({ ...req, prompt, stream }, true);
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      setImmediate(() => {
        this.flushScheduled = false;
        if (!this.closed) this.native.flush();
      });
    }
    const p: Pending = { resolve, onToken, ...(req.logprobs !== undefined && req.logprobs >= 0 ? { logprobs: [] } : {}) };
    this.pending.set(id, p);
    const early = this.early.get(id);
    if (early) {
      this.early.delete(id);
      for (const ev of early) if (this.pending.has(id)) this.dispatch(id, p, ev);
    }
    return { id, done, cancel: () => this.native.cancel(id) };
  }

  onStep(listener: (tokens: number) => void): () => void {
    this.stepListeners.add(listener);
    return () => { this.stepListeners.delete(listener); };
  }

  stats(): EngineStats {
    const s = this.native.stats();
    return {
      peakActiveBytes: s.peakActiveBytes, activeBytes: s.activeBytes, numAllocs: s.numAllocs,
      parkWaits: s.parkWaits, prefixAdmittedTokens: s.prefixAdmittedTokens, prefixHitTokens: s.prefixHitTokens,
      retires: s.retires, evictions: s.evictions, preemptions: s.preemptions, kvBlocksUsed: s.kvBlocksUsed,
      kvBlocksFree: s.kvBlocksFree, kvBlocksTotal: s.kvBlocksTotal, stateSlotsFree: s.stateSlotsFree,
      stateSlotsTotal: s.stateSlotsTotal, prefixCachedBlocks: s.prefixCachedBlocks, snapshotsUsed: s.snapshotsUsed,
      snapshotsTotal: s.snapshotsTotal, steps: s.steps, weightBytes: s.weightBytes,
      graphHits: s.graphHits, graphMisses: s.graphMisses, graphCaptureMs: s.graphCaptureMs,
      deviceBytes: s.deviceBytes, devicePeakBytes: s.devicePeakBytes, deviceAllocs: s.deviceAllocs,
    };
  }

  resetCounters(): void { this.native.resetCounters(); }

  allowSteps(n: number): void {
    if (!this.manualSteps) throw new Error('allowSteps: this engine was not loaded with manualSteps');
    this.native.allowSteps(n);
  }

  nowMs(): number { return this.native.nowMs(); }

  takeProfile(): ProfileReport | null {
    if (!this.profile) return null;
    const rows = this.native.takeProfile();
    const ops = rows.filter((r) => r.group !== 'pipeline')
      .map((r) => ({ name: r.name, group: r.group, calls: r.calls, totalUs: r.totalUs, selfUs: r.totalUs }));
    const pipeline = rows.filter((r) => r.group === 'pipeline')
      .map((r) => ({ name: r.name, calls: r.calls, totalUs: r.totalUs }));
    return { ops, pipeline };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // What the engine finished before it stopped is delivered as it ended; only the rest is cancelled.
    const left = this.native.close();
    if (Array.isArray(left)) this.handle(left);  // (a stand-in native engine in tests returns nothing)
    for (const [id, p] of this.pending) {
      p.resolve({
        id, tokens: [], promptTokens: 0, enqueueMs: 0, tokenMs: [], prefillChunkMs: [], cachedPromptTokens: 0,
        finishReason: 'cancelled', error: 'engine closed',
      });
    }
    this.pending.clear();
  }
}

function nativeConfig(c: TextConfig): object {
  return { ...c };
}

/** Loads a model into a new engine; resolves once the weights are bound and caches allocated. */
export function loadEngine(
  source: ModelSource, opts: EngineOptions, hooks: LoadHooks = {}, internals: EngineInternals = {},
): Promise<EngineHandle> {
  const { addonPath, ...nativeInternals } = internals;
  const addon = loadAddon(addonPath);
  const config = 'synthetic' in source ? source.synthetic : source.config;
  // A model of synthetic weights (`--model-path synthetic:<preset>`) has no tensors: the engine
  // generates them with the dtype and seed the model names (what its reports say).
  const generated = 'synthetic' in source ? undefined : source.syntheticWeights;
  const tensors = 'synthetic' in source || generated ? [] : [...source.tensors.values()].filter((t) => !t.name.startsWith('mtp.'));
  const options = {
    device: opts.device, threads: opts.threads, blockSize: opts.blockSize, kvcache: opts.kvcache,
    kvMemoryBytes: opts.kvMemoryBytes ?? 0, kvMemoryFraction: opts.kvMemoryFraction ?? 0, maxSeq: opts.maxSeq, maxSeqs: opts.maxSeqs,
    prefillChunk: opts.prefillChunk, stepTokenBudget: opts.stepTokenBudget, prefixCache: opts.prefixCache,
    cudaGraphs: opts.cudaGraphs ?? true, kvCacheDtype: opts.kvCacheDtype ?? 'f32', profile: opts.profile ?? false, ...nativeInternals,
    ...(generated ? { syntheticDtype: generated.dtype, syntheticSeed: generated.seed } : {}),
  };
  // The commands refuse this with the flag's name first (engine/options.ts, fitMaxSeq); a caller of
  // the API gets it here: a sequence past the model's positions would run where it never trained.
  if (opts.maxSeq > config.maxPositionEmbeddings) {
    return Promise.reject(new Error(`options.maxSeq ${opts.maxSeq} is more than the model's maximum of ${config.maxPositionEmbeddings} positions (max_position_embeddings)`));
  }
  return new Promise<EngineHandle>((resolve, reject) => {
    let engine: Engine | undefined;
    let native: NativeEngine | undefined;
    let settled = false;
    const onEvents = (events: NativeEvent[]) => {
      for (const ev of events) {
        if (ev.type === 'load') {
          try {
            hooks.onLoadProgress?.(ev.done ?? 0, ev.total ?? 0);
          } catch (err) {
            // The caller's hook failed: the load fails with its error (it used to end this loop, and a
            // 'loaded' event in the same batch was lost: the load never settled).
            if (!settled) {
              settled = true;
              native?.close();
              reject(err instanceof Error ? err : new Error(String(err)));
            }
          }
        } else if (ev.type === 'loaded' && !settled && native) {
          settled = true;
          engine = new Engine(native, opts.profile ?? false, internals.manualSteps ?? false);
          resolve(engine);
        } else if (ev.type === 'loadError' && !settled) {
          settled = true;
          native?.close();
          reject(ev.code === 'kv_memory' ? new KvMemoryError(ev.error) : new Error(ev.error));
        }
      }
      if (engine) engine.handle(events);  // the step, token and done events (handle passes over the others)
    };
    try {
      native = new addon.Engine({ config: nativeConfig(config), tensors }, options, onEvents);
    } catch (err) {
      reject(err instanceof Error ? err : new Error(String(err)));
    }
  });
}

/**
 * A load failure because the KV cache the options ask for cannot be had: a pool too small for one
 * max-seq sequence, or more than the memory there is (the engine's KvMemoryError, event code
 * 'kv_memory'). Callers name the flag that sized it (options.ts, kvMemoryFlags).
 */
export class KvMemoryError extends Error {
  readonly code = 'kv_memory';
}

/** True when this build has the CUDA backend and a GPU is visible. */
export function cudaAvailable(): boolean {
  const addon = loadAddon();
  if (!addon.cpuInfo().cudaBuilt) return false;
  const probe = addon as unknown as { cudaDeviceCount?: () => number };
  return typeof probe.cudaDeviceCount === 'function' && probe.cudaDeviceCount() > 0;
}

/**
 * A prompt's ids as the engine takes them; a value that is not a token id is refused (Int32Array.from
 * would wrap it). The addon's to_ids (native/addon/engine_wrap.cpp) checks a plain array by the same
 * rule, with the same words, for callers of the addon itself; an Int32Array crosses without a copy and
 * without N-API's per-element calls, which is why this loop exists.
 */
function tokenIds(ids: readonly number[]): Int32Array {
  const out = new Int32Array(ids.length);
  for (let i = 0; i < ids.length; i++) {
    const t = ids[i]!;
    if (!Number.isInteger(t) || t < 0 || t > 0x7fffffff) throw new Error(`request.prompt[${i}] is not a token id (got ${String(t)})`);
    out[i] = t;
  }
  return out;
}
