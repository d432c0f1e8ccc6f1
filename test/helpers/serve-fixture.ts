// `bench serve` in-process for tests: the real server on a random port (127.0.0.1:0) over the embedded
// model, plus a scripted engine (plays back given token ids, one per step) for output paths a
// random-weight model never takes (tool calls, thinking), and a strict Prometheus text parser.
import { Writable } from 'node:stream';
import { resolveEngineFlags } from '../../src/cli/engine-flags.js';
import type { EngineInternals } from '../../src/engine/engine.js';
import type {
  EngineHandle, EngineInfo, EngineOptions, EngineStats, RequestHandle, RequestOptions, RequestResult, TokenEvent,
} from '../../src/engine/types.js';
import { ensureEmbeddedModel } from '../../src/model/embedded.js';
import { startServer, type RunningServer, type ServeOptions } from '../../src/serve/server.js';

export const API_KEY = 'test-key-123';

export interface TestServerOptions {
  /** Default: the embedded model. */
  modelDir?: string;
  /** --max-seq (default 1024); null: not given. */
  maxSeq?: number | null;
  maxSeqs?: number;
  apiKey?: string | null;
  internals?: EngineInternals;
  loadEngine?: (opts: EngineOptions) => Promise<EngineHandle>;
  servedModelName?: string;
  onListening?: (url: string) => void;
  tokenizerWorkers?: number;
  tokenizeHold?: ServeOptions['tokenizeHold'];
}

export async function startTestServer(o: TestServerOptions = {}): Promise<RunningServer> {
  const dir = o.modelDir ?? (await ensureEmbeddedModel());
  const maxSeq = o.maxSeq === null ? {} : { maxSeq: String(o.maxSeq ?? 1024) };
  const engine = resolveEngineFlags({ device: 'cpu', threads: '2', ...maxSeq, maxSeqs: String(o.maxSeqs ?? 8) }, 8) as
    ReturnType<typeof resolveEngineFlags> & { maxSeqs: number };
  const sink = new Writable({ write(_c, _e, cb) { cb(); } });
  return startServer({
    modelDir: dir, embedded: o.modelDir === undefined, host: '127.0.0.1', port: 0, engine, device: 'cpu', verbosity: -1, stderr: sink, stderrIsTTY: false,
    ...(o.apiKey === null ? {} : { apiKey: o.apiKey ?? API_KEY }),
    ...(o.internals ? { internals: o.internals } : {}),
    ...(o.loadEngine ? { loadEngine: (_ckpt, opts) => o.loadEngine!(opts) } : {}),
    ...(o.servedModelName ? { servedModelName: o.servedModelName } : {}),
    ...(o.onListening ? { onListening: o.onListening } : {}),
    ...(o.tokenizerWorkers !== undefined ? { tokenizerWorkers: o.tokenizerWorkers } : {}),
    ...(o.tokenizeHold ? { tokenizeHold: o.tokenizeHold } : {}),
  });
}

/** Polls `cond` (each round first running `tick`, e.g. permitting an engine step) until it holds. Bounded by the test timeout. */
export async function until(cond: () => boolean, tick: () => void = () => {}): Promise<void> {
  while (!cond()) {
    tick();
    await new Promise((r) => setTimeout(r, 2));
  }
}

/**
 * An engine that plays back a script: each request's output is the next script in the queue (or
 * `fallback`), one token per step (a step = one setImmediate turn), honouring maxTokens, stop tokens
 * and cancel. Times are performance.now().
 */
export class ScriptedEngine implements EngineHandle {
  readonly info: EngineInfo = {
    backend: 'cpu', isa: 'scripted', threads: 1, weightBytes: 0, dtype: 'f32', kvBlocksTotal: 64, blockSize: 16, snapshotInterval: 0, kvBlockBytes: 0, kvCacheDtype: 'f32', stateBytes: 0,
  };
  readonly scripts: number[][] = [];
  /** The next request plays its script, then fails with this engine error (instead of running on). */
  failNext: string | null = null;
  private nextId = 1;
  private live = 0;

  constructor(private readonly fallback: number[] = [248046]) {}

  submit(req: RequestOptions, onToken?: (ev: TokenEvent) => void): RequestHandle {
    const id = this.nextId++;
    const script = this.scripts.shift() ?? this.fallback;
    const failure = this.failNext;
    this.failNext = null;
    const prompt = Array.from(req.prompt);
    const enqueueMs = performance.now();
    const tokens: number[] = [];
    const tokenMs: number[] = [];
    let cancelled = false;
    this.live++;
    const done = new Promise<RequestResult>((resolve) => {
      const finish = (finishReason: RequestResult['finishReason']) => {
        this.live--;
        resolve({
          id, tokens, promptTokens: prompt.length, enqueueMs, tokenMs, prefillChunkMs: [], cachedPromptTokens: 0, finishReason,
          ...(finishReason === 'error' ? { error: failure! } : {}),
        });
      };
      const step = () => {
        if (cancelled) return finish('cancelled');
        if (failure !== null && tokens.length >= script.length) return finish('error');
        const tok = script[tokens.length] ?? 248046;
        const t = performance.now();
        tokens.push(tok);
        tokenMs.push(t);
        onToken?.({ token: tok, index: tokens.length - 1, tMs: t, ...(req.logprobs !== undefined ? { logprobs: { logprob: -0.5, top: [] } } : {}) });
        if (!req.ignoreEos && (req.stopTokens ?? []).includes(tok)) return finish('stop');
        if (tokens.length >= req.maxTokens) return finish('length');
        setImmediate(step);
      };
      setImmediate(step);
    });
    return { id, done, cancel: () => { cancelled = true; } };
  }

  stats(): EngineStats {
    return {
      peakActiveBytes: 0, activeBytes: 0, numAllocs: 0, parkWaits: 0, prefixAdmittedTokens: 0, prefixHitTokens: 0, retires: 0,
      evictions: 0, preemptions: 0, kvBlocksUsed: 0, kvBlocksFree: 64, kvBlocksTotal: 64, stateSlotsFree: 8 - this.live,
      stateSlotsTotal: 8, prefixCachedBlocks: 0, snapshotsUsed: 0, snapshotsTotal: 0, steps: 0, weightBytes: 0,
    };
  }

  resetCounters(): void {}
  nowMs(): number { return performance.now(); }
  takeProfile(): null { return null; }
  async close(): Promise<void> {}
}

export interface PromSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Parses the Prometheus text exposition format strictly: every line is a comment, HELP/TYPE, or a sample. */
export function parsePrometheus(text: string): { samples: PromSample[]; types: Map<string, string> } {
  const samples: PromSample[] = [];
  const types = new Map<string, string>();
  const name = '[a-zA-Z_:][a-zA-Z0-9_:]*';
  const sample = new RegExp(`^(${name})(\\{([^}]*)\\})? (-?[0-9.eE+-]+|NaN|[+-]Inf)( -?\\d+)?$`);
  for (const line of text.split('\n')) {
    if (line === '') continue;
    if (line.startsWith('# HELP ')) continue;
    const t = new RegExp(`^# TYPE (${name}) (counter|gauge|histogram|summary|untyped)$`).exec(line);
    if (t) { types.set(t[1]!, t[2]!); continue; }
    if (line.startsWith('#')) continue;
    const m = sample.exec(line);
    if (!m) throw new Error(`not a Prometheus sample line: ${line}`);
    const labels: Record<string, string> = {};
    if (m[3]) {
      for (const part of m[3].match(/[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"/g) ?? []) {
        const eq = part.indexOf('=');
        labels[part.slice(0, eq)] = JSON.parse(part.slice(eq + 1)) as string;
      }
    }
    const v = m[4]!;
    samples.push({ name: m[1]!, labels, value: v === '+Inf' ? Infinity : v === '-Inf' ? -Infinity : Number(v) });
  }
  return { samples, types };
}

/** The value of one sample (labels must match those given); 0 when absent. */
export function promValue(p: { samples: PromSample[] }, metric: string, labels: Record<string, string> = {}): number {
  const s = p.samples.find((x) => x.name === metric && Object.entries(labels).every(([k, v]) => x.labels[k] === v));
  return s ? s.value : 0;
}

/** Reads an SSE body into its events (`data:` payloads, with the `event:` name if any). */
export async function readSse(res: Response, onEvent?: (e: { event: string | null; data: string }) => void): Promise<{ event: string | null; data: string }[]> {
  const events: { event: string | null; data: string }[] = [];
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i: number;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      let event: string | null = null;
      const data: string[] = [];
      for (const line of block.split('\n')) {
        if (line.startsWith('event: ')) event = line.slice(7);
        else if (line.startsWith('data: ')) data.push(line.slice(6));
        else throw new Error(`unexpected SSE line: ${JSON.stringify(line)}`);
      }
      const e = { event, data: data.join('\n') };
      events.push(e);
      onEvent?.(e);
    }
  }
  if (buf.trim() !== '') throw new Error(`SSE body ends mid-event: ${JSON.stringify(buf)}`);
  return events;
}
