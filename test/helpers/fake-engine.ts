// A simulated engine for unit tests of the sweep machinery (never shipped, never used by the CLI).
// Continuous batching on a timer: each step takes up to stepTokenBudget tokens (decode tokens first, then
// prefill chunks), lasts baseMs + perTokenMs * tokens of real time, and stamps every token with the step's end.
import { performance } from 'node:perf_hooks';
import type {
  EngineHandle, EngineInfo, EngineOptions, EngineStats, ProfileReport, RequestHandle, RequestOptions,
  RequestResult, TokenEvent,
} from '../../src/engine/types.js';
import type { Checkpoint } from '../../src/model/types.js';
import type { SweepBackend } from '../../src/bench/sweep.js';
import { UsageError } from '../../src/util/usage-error.js';

export interface FakeTuning {
  baseMs?: number;
  perTokenMs?: number;
  /** Return an error message to fail a request (checked at submit), e.g. to simulate running out of KV. */
  failRequest?: (req: RequestOptions) => string | null;
  /** Stop generating early (as if EOS were honoured) after this many tokens. */
  shortBy?: number;
  /** Omit the profile even when asked. */
  noProfile?: boolean;
  /** Report every request as preempted once after this many tokens (counted in the engine's counters);
   * the recompute's stall itself is not simulated. */
  preemptAfter?: number;
}

interface Seq {
  id: number;
  req: RequestOptions;
  prompt: number[];
  done: number; // prompt tokens evaluated
  tokens: number[];
  tokenMs: number[];
  chunkMs: number[];
  enqueueMs: number;
  cached: number;
  cancelled: boolean;
  onToken?: (ev: TokenEvent) => void;
  resolve: (r: RequestResult) => void;
  blocks: number;
  parked: boolean;
}

const WEIGHT_BYTES = 4 * 1024 * 1024;
const BLOCK_BYTES = 64 * 1024;
/** Free memory after the weights, as the fake engine's fraction-sized pools see it. */
export const FAKE_FREE_BYTES = 256 * 1024 * 1024;
/** A CUDA fake engine's device allocator: its high-water mark and allocation count since load. */
export const FAKE_DEVICE_PEAK = 300 * 1024 * 1024;
export const FAKE_DEVICE_ALLOCS = 42;

function zeroStats(): EngineStats {
  return {
    peakActiveBytes: 0, activeBytes: 0, numAllocs: 0, parkWaits: 0, prefixAdmittedTokens: 0, prefixHitTokens: 0,
    retires: 0, evictions: 0, preemptions: 0, kvBlocksUsed: 0, kvBlocksFree: 0, kvBlocksTotal: 0, stateSlotsFree: 0,
    stateSlotsTotal: 0, prefixCachedBlocks: 0, snapshotsUsed: 0, snapshotsTotal: 0, steps: 0, weightBytes: 0,
  };
}

export function createFakeEngine(opts: EngineOptions, tune: FakeTuning = {}): EngineHandle {
  const baseMs = tune.baseMs ?? 1;
  const perTokenMs = tune.perTokenMs ?? 0.01;
  // The KV pool as the native engine sizes it: bytes, a fraction of FAKE_FREE_BYTES, or max-seq x max-seqs;
  // an f16 cache has blocks of half the bytes.
  const kvCacheDtype = opts.kvCacheDtype ?? 'f32';
  const blockBytes = kvCacheDtype === 'f16' ? BLOCK_BYTES / 2 : BLOCK_BYTES;
  const fraction = opts.kvMemoryBytes === undefined ? opts.kvMemoryFraction : undefined;
  const blocksTotal = opts.kvMemoryBytes !== undefined
    ? Math.floor(opts.kvMemoryBytes / blockBytes)
    : fraction !== undefined ? Math.floor((fraction * FAKE_FREE_BYTES) / blockBytes) : Math.ceil(opts.maxSeq / opts.blockSize) * opts.maxSeqs;
  const cuda = opts.device === 'cuda';
  let nextId = 1;
  const waiting: Seq[] = [];
  const running: Seq[] = [];
  const prefixBlocks = new Set<string>();
  let blocksUsed = 0;
  let stats = zeroStats();
  let profOps = new Map<string, { group: string; calls: number; totalUs: number; selfUs: number }>();
  let profStages = new Map<string, { calls: number; totalUs: number }>();
  let stepping = false;
  const stepListeners = new Set<(tokens: number) => void>();
  let closed = false;

  const activeBytes = () => WEIGHT_BYTES + blocksUsed * blockBytes;
  const now = () => performance.now();

  const info: EngineInfo = {
    backend: cuda ? 'cuda' : 'cpu', isa: 'fake', threads: cuda ? 0 : opts.threads || 2, weightBytes: WEIGHT_BYTES, dtype: 'f32',
    kvBlocksTotal: blocksTotal, blockSize: opts.blockSize, snapshotInterval: opts.prefixCache ? 256 : 0, kvBlockBytes: blockBytes, kvCacheDtype, stateBytes: 0,
    kvPoolBytes: blocksTotal * blockBytes,
    kvPool: opts.kvMemoryBytes !== undefined ? 'kv_memory_bytes'
      : fraction !== undefined ? (cuda ? 'fraction of free device memory' : 'fraction of available host memory') : 'max_seq x max_seqs',
    ...(fraction !== undefined ? { kvMemoryFraction: fraction, kvFreeBytes: FAKE_FREE_BYTES, kvBudgetBytes: Math.floor(fraction * FAKE_FREE_BYTES) } : {}),
    hostWeightsReleased: cuda,
    ...(cuda ? { rssBeforeReleaseBytes: 200e6, rssAfterReleaseBytes: 150e6, gpuName: 'Fake GPU', gpuMemoryBytes: 2 ** 30 } : {}),
  };

  function blockKey(prompt: number[], upto: number): string {
    return prompt.slice(0, upto).join(',');
  }

  function admit(): void {
    while (waiting.length && running.length < opts.maxSeqs) {
      const s = waiting[0]!;
      const need = Math.ceil((s.prompt.length + s.req.maxTokens) / opts.blockSize);
      if (blocksUsed + need > blocksTotal) {
        if (!s.parked) { s.parked = true; stats.parkWaits++; }
        return;
      }
      waiting.shift();
      s.blocks = need;
      blocksUsed += need;
      stats.numAllocs += need;
      if (opts.prefixCache) {
        let hit = 0;
        for (let b = opts.blockSize; b <= s.prompt.length - 1; b += opts.blockSize) {
          if (prefixBlocks.has(blockKey(s.prompt, b))) hit = b; else break;
        }
        s.cached = hit;
        s.done = hit;
        stats.prefixHitTokens += hit;
      }
      running.push(s);
    }
    stats.activeBytes = activeBytes();
    stats.peakActiveBytes = Math.max(stats.peakActiveBytes, stats.activeBytes);
  }

  function finish(s: Seq, reason: RequestResult['finishReason'], error?: string): void {
    const i = running.indexOf(s);
    if (i >= 0) running.splice(i, 1);
    const w = waiting.indexOf(s);
    if (w >= 0) waiting.splice(w, 1);
    if (i >= 0) {
      blocksUsed -= s.blocks;
      stats.retires++;
      if (opts.prefixCache && reason === 'length') {
        const full = Math.floor(s.prompt.length / opts.blockSize) * opts.blockSize;
        for (let b = opts.blockSize; b <= full; b += opts.blockSize) prefixBlocks.add(blockKey(s.prompt, b));
        stats.prefixAdmittedTokens += full;
      }
    }
    stats.activeBytes = activeBytes();
    const preempted = tune.preemptAfter !== undefined && reason === 'length';
    if (preempted) stats.preemptions++;
    s.resolve({
      id: s.id, tokens: s.tokens, promptTokens: s.prompt.length, enqueueMs: s.enqueueMs, tokenMs: s.tokenMs,
      prefillChunkMs: s.chunkMs, cachedPromptTokens: s.cached, finishReason: reason, ...(error ? { error } : {}),
      ...(preempted ? { preemptedAfter: [tune.preemptAfter!] } : {}),
    });
  }

  function addOp(name: string, group: string, us: number): void {
    const o = profOps.get(name) ?? { group, calls: 0, totalUs: 0, selfUs: 0 };
    o.calls++; o.totalUs += us; o.selfUs += us;
    profOps.set(name, o);
  }
  function addStage(name: string, us: number): void {
    const s = profStages.get(name) ?? { calls: 0, totalUs: 0 };
    s.calls++; s.totalUs += us;
    profStages.set(name, s);
  }

  function step(): void {
    if (stepping || closed) return;
    for (const s of [...running, ...waiting]) if (s.cancelled) finish(s, 'cancelled');
    admit();
    if (running.length === 0) return;
    stepping = true;
    const t0 = now();
    let budget = opts.stepTokenBudget;
    const decode: Seq[] = [];
    const prefill: Array<[Seq, number]> = [];
    for (const s of running) {
      if (s.done >= s.prompt.length && budget > 0) { decode.push(s); budget--; }
    }
    for (const s of running) {
      if (s.done < s.prompt.length && budget > 0) {
        const n = Math.min(opts.prefillChunk, s.prompt.length - s.done, budget);
        prefill.push([s, n]);
        budget -= n;
      }
    }
    const tokens = opts.stepTokenBudget - budget;
    const dur = baseMs + perTokenMs * tokens;
    setTimeout(() => {
      stepping = false;
      if (closed) return;
      const t1 = now();
      stats.steps++;
      if (opts.profile) {
        addOp('matmul_qkv', 'matmul', (t1 - t0) * 600);
        addOp('attention', 'attention', (t1 - t0) * 300);
        addOp('rmsnorm', 'norm', (t1 - t0) * 100);
        addStage('scheduling', 5);
        addStage('forward', (t1 - t0) * 1000);
        addStage('sampling', 3);
        addStage('js_callbacks', 2);
      }
      let stepTokens = 0;
      const emit = (s: Seq) => {
        stepTokens++;
        const tok = s.tokens.length % 1000;
        s.tokens.push(tok);
        s.tokenMs.push(t1);
        s.onToken?.({ token: tok, index: s.tokens.length - 1, tMs: t1 });
        const want = s.req.maxTokens - (tune.shortBy ?? 0);
        if (s.tokens.length >= want) finish(s, 'length');
      };
      for (const [s, n] of prefill) {
        s.done += n;
        s.chunkMs.push(t1 - t0);
        if (s.done >= s.prompt.length && !s.cancelled) emit(s);
      }
      for (const s of decode) if (!s.cancelled && running.includes(s)) emit(s);
      if (stepTokens > 0) for (const l of stepListeners) l(stepTokens);
      setImmediate(step);
    }, dur);
  }

  return {
    info,
    onStep(listener: (tokens: number) => void): () => void {
      stepListeners.add(listener);
      return () => { stepListeners.delete(listener); };
    },
    submit(req: RequestOptions, onToken?: (ev: TokenEvent) => void): RequestHandle {
      if (closed) throw new Error('engine closed');
      const id = nextId++;
      let resolve!: (r: RequestResult) => void;
      const done = new Promise<RequestResult>((r) => { resolve = r; });
      const prompt = Array.from(req.prompt);
      const s: Seq = {
        id, req, prompt, done: 0, tokens: [], tokenMs: [], chunkMs: [], enqueueMs: now(), cached: 0, cancelled: false,
        onToken, resolve, blocks: 0, parked: false,
      };
      const failure = prompt.length + req.maxTokens > opts.maxSeq
        ? `sequence of ${prompt.length + req.maxTokens} tokens exceeds maxSeq ${opts.maxSeq}`
        : tune.failRequest?.(req) ?? null;
      if (failure) {
        queueMicrotask(() => s.resolve({
          id, tokens: [], promptTokens: prompt.length, enqueueMs: s.enqueueMs, tokenMs: [], prefillChunkMs: [],
          cachedPromptTokens: 0, finishReason: 'error', error: failure,
        }));
      } else {
        waiting.push(s);
        setImmediate(step);
      }
      return { id, done, cancel: () => { s.cancelled = true; setImmediate(step); if (!stepping) step(); } };
    },
    stats: () => ({
      ...stats, kvBlocksUsed: blocksUsed, kvBlocksFree: blocksTotal - blocksUsed, kvBlocksTotal: blocksTotal, weightBytes: WEIGHT_BYTES,
      stateSlotsFree: opts.maxSeqs - running.length, stateSlotsTotal: opts.maxSeqs,
      // On CUDA the peak is the device allocator's mark since load, and nothing allocates after load.
      ...(cuda ? { peakActiveBytes: FAKE_DEVICE_PEAK, numAllocs: 0, deviceBytes: FAKE_DEVICE_PEAK, devicePeakBytes: FAKE_DEVICE_PEAK, deviceAllocs: FAKE_DEVICE_ALLOCS, graphHits: stats.steps, graphMisses: 1, graphCaptureMs: 2.5 } : {}),
    }),
    resetCounters: () => {
      stats = { ...zeroStats(), activeBytes: activeBytes(), peakActiveBytes: activeBytes() };
    },
    nowMs: now,
    takeProfile: (): ProfileReport | null => {
      if (!opts.profile || tune.noProfile) return null;
      const r: ProfileReport = {
        ops: [...profOps.entries()].map(([name, o]) => ({ name, ...o })),
        pipeline: [...profStages.entries()].map(([name, s]) => ({ name, ...s })),
      };
      profOps = new Map();
      profStages = new Map();
      return r;
    },
    close: async () => {
      closed = true;
      for (const s of [...running, ...waiting]) finish(s, 'cancelled');
    },
  };
}

export function fakeCheckpoint(dir = '/fake/tiny'): Checkpoint {
  return {
    dir,
    config: {
      hiddenSize: 128, numLayers: 4, intermediateSize: 512, numHeads: 2, numKvHeads: 1, headDim: 256,
      linearNumKeyHeads: 2, linearNumValueHeads: 2, linearKeyHeadDim: 128, linearValueHeadDim: 128,
      linearConvKernelDim: 4, vocabSize: 248320, rmsNormEps: 1e-6, ropeTheta: 1e7, partialRotaryFactor: 0.25,
      mropeSection: [11, 11, 10], layerTypes: ['linear_attention', 'linear_attention', 'linear_attention', 'full_attention'],
      tieWordEmbeddings: true, eosTokenId: 248044, maxPositionEmbeddings: 262144, mtpNumHiddenLayers: 0,
    },
    configHash: 'f'.repeat(64),
    prefix: 'model.',
    tensors: new Map(),
    shards: [`${dir}/model.safetensors`],
    bytesOnDisk: 4 * 1024 * 1024,
    paramCount: 1_000_000,
    dtype: 'F32',
    hasMtp: false,
  };
}

export function fakeBackend(tune: FakeTuning & { loadError?: string; cuda?: boolean } = {}): SweepBackend & { engines: EngineHandle[] } {
  const engines: EngineHandle[] = [];
  return {
    engines,
    ensureEmbeddedModel: async () => '/fake/tiny',
    loadCheckpoint: (dir: string) => fakeCheckpoint(dir),
    loadEngine: async (_ckpt, opts, hooks) => {
      for (let i = 1; i <= 4; i++) hooks?.onLoadProgress?.(i, 4);
      if (tune.loadError) throw new Error(tune.loadError);
      const e = createFakeEngine(opts, tune);
      engines.push(e);
      return e;
    },
    usableCpus: () => 2,
    resolveDevice: (choice) => {
      if (choice === 'cuda' && !tune.cuda) throw new UsageError('--device cuda: this build has no CUDA backend');
      return choice === 'auto' ? (tune.cuda ? 'cuda' : 'cpu') : choice;
    },
  };
}
