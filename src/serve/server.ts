// `bench serve`'s server: fastify with JSON-schema validation, API keys, the APIs' error shapes, and
// its life: listen first (GET /health answers 503 while the model loads), load the model into the
// one engine, serve; close = stop accepting, cancel what is in flight, close the engine.
import { timingSafeEqual } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import { colorEnabled, engineLine, HumanRenderer, kvPoolFacts, LogRenderer, type SweepRenderer } from '../bench/render.js';
import { createLogger } from '../bench/logger.js';
import { usableCpus } from '../engine/native.js';
import { engineOptionsFrom, fitMaxSeq, kvMemoryFlags, type ServingFlags } from '../engine/options.js';
import { KvMemoryError, loadEngine, type EngineInternals } from '../engine/engine.js';
import { UsageError } from '../util/usage-error.js';
import type { Device, EngineHandle, EngineOptions } from '../engine/types.js';
import { loadModel, loadModelTokenizerParts, modelMaxPositions } from '../model/model-path.js';
import { synthGenerationConfig } from '../model/synth.js';
import { syntheticWeightsOf } from '../model/synthetic-model.js';
import { weightFormatLine } from '../model/weight-format.js';
import { loadedModelNotes, type ModelCheckpoint } from '../model/types.js';
import { machineInfo } from '../util/machine.js';
import { TOOL_VERSION } from '../util/version.js';
import { ServeContext } from './context.js';
import { ServeEngine } from './engine-queue.js';
import { ApiError, errorBody, flavorOf, toApiError } from './errors.js';
import type { GenerationResult } from './generation.js';
import { ServeMetrics } from './metrics.js';
import { makeServeModel } from './model.js';
import { registerAnthropicRoutes } from './routes-anthropic.js';
import { registerMiscRoutes } from './routes-misc.js';
import { registerOpenAIRoutes } from './routes-openai.js';
import { DEFAULT_TOKENIZER_WORKERS, INLINE_MAX_CHARS, INLINE_MAX_MESSAGES, TokenizePool, type TokenizePoolOptions } from './tokenize-pool.js';

export interface ServeOptions {
  /** `--model-path`: a checkpoint directory, a GGUF file, a directory of GGUF files (with quant), or `synthetic:<preset>`. */
  modelDir: string;
  /** `--quant`: the GGUF quantization to choose in a directory. */
  quant?: string;
  /** The embedded synthetic model (said so in the header). */
  embedded: boolean;
  host: string;
  /** 0 = any free port. */
  port: number;
  servedModelName?: string;
  apiKey?: string;
  engine: ServingFlags & { maxSeqs: number };
  device: Device;
  /** -1 quiet, 0 human header, 1 pino JSON lines (one per request), 2 debug. */
  verbosity: number;
  stderr: NodeJS.WritableStream;
  stderrIsTTY: boolean;
  /** Tests only: engine internals (e.g. manual steps). */
  internals?: EngineInternals;
  /** Called once the server listens, before the model loads (GET /health answers 503 until it has). */
  onListening?: (url: string) => void;
  /** Tests only: another engine behind the same handle (e.g. one that plays back scripted tokens). */
  loadEngine?: (ckpt: ModelCheckpoint, opts: EngineOptions) => Promise<EngineHandle>;
  /** `--tokenizer-workers`: threads tokenizing long prompt texts (0: all on the JS thread). Default DEFAULT_TOKENIZER_WORKERS. */
  tokenizerWorkers?: number;
  /** Tests only: hold long texts in the tokenizer workers (see tokenize-worker.ts). */
  tokenizeHold?: TokenizePoolOptions['hold'];
}

export interface RunningServer {
  url: string;
  app: FastifyInstance;
  ctx: ServeContext;
  engine: EngineHandle;
  engineOptions: EngineOptions;
  /** Stop accepting, cancel in flight, close the engine. Idempotent. */
  close(): Promise<void>;
}

/**
 * The routes that answer without the API key (when one is set): everything else needs it, unknown
 * routes included. Decided by the route the router matched (`routeOptions.url`), never by the raw
 * request target: the router decodes percent-escapes (`/%761/models`) and takes absolute-form targets
 * (`http://host/v1/models`), so a test of the raw URL's text lets such requests past the check.
 */
export const PUBLIC_ROUTES: ReadonlySet<string> = new Set(['/health', '/version', '/metrics']);

/** Routes whose requests get no request log line (-v): the probes. */
const UNLOGGED_ROUTES: ReadonlySet<string> = new Set(['/health', '/metrics']);

/** The route a request matched, or (no route matched) its path as the router saw it: decoded, without the query or an absolute-form target's origin. */
export function routePath(req: FastifyRequest): string {
  const matched = req.routeOptions.url;
  if (matched !== undefined) return matched;
  let p = req.url;
  try {
    p = new URL(req.url, 'http://localhost').pathname;
  } catch { /* keep the raw target */ }
  try {
    return decodeURIComponent(p);
  } catch {
    return p;
  }
}

function keyMatches(given: string | undefined, key: string): boolean {
  if (given === undefined) return false;
  const a = Buffer.from(given);
  const b = Buffer.from(key);
  return a.length === b.length && timingSafeEqual(a, b);
}

function presentedKey(req: FastifyRequest): string | undefined {
  const auth = req.headers.authorization;
  if (typeof auth === 'string' && /^bearer\s+/i.test(auth)) return auth.replace(/^bearer\s+/i, '').trim();
  const x = req.headers['x-api-key'];
  return typeof x === 'string' ? x : undefined;
}

/** The body limit: room for a max_seq-token prompt as JSON text with plenty to spare, at least 1 MiB. */
export function bodyLimitFor(maxSeq: number): number {
  return Math.max(1 << 20, maxSeq * 64);
}

export function buildApp(ctx: ServeContext, apiKey: string | undefined, bodyLimit: number): FastifyInstance {
  const app = Fastify({
    logger: false,
    bodyLimit,
    return503OnClosing: true,
    // Wrong types are errors, not conversions; nothing is added to or removed from a body.
    ajv: { customOptions: { coerceTypes: false, removeAdditional: false, useDefaults: false, allErrors: false } },
  });

  // Callback-style hooks, not async ones: each async hook costs the request promise turns before
  // its handler runs (time to first token over HTTP, docs/performance.md).
  app.addHook('onRequest', (req, _reply, done) => {
    (req as { lumenStart?: number }).lumenStart = performance.now();
    // onRequest runs after routing: routeOptions.url is the matched route (undefined: no route, which needs the key too).
    const route = req.routeOptions.url;
    if (apiKey !== undefined && !(route !== undefined && PUBLIC_ROUTES.has(route)) && !keyMatches(presentedKey(req), apiKey)) {
      done(new ApiError(401, presentedKey(req) === undefined
        ? 'missing API key (send Authorization: Bearer KEY, or x-api-key: KEY)'
        : 'incorrect API key', 'authentication'));
      return;
    }
    done();
  });

  app.addHook('onResponse', (req, reply, done) => {
    const r = req as { lumenStart?: number; lumenResult?: GenerationResult; lumenError?: string; lumenStreamed?: boolean; lumenLogged?: boolean };
    if (!r.lumenStreamed && !r.lumenLogged && !UNLOGGED_ROUTES.has(req.routeOptions.url ?? '')) {
      ctx.logRequest({
        route: routePath(req), status: reply.statusCode, result: r.lumenResult ?? null,
        startedAt: r.lumenStart ?? performance.now(), ...(r.lumenError ? { error: r.lumenError } : {}),
      });
    }
    done();
  });

  // A JSON body sent as text/plain would reach the schema as a string ("body must be object"): only
  // application/json is parsed, anything else is a 415 that says so.
  app.removeContentTypeParser('text/plain');

  app.setErrorHandler((err, req, reply) => {
    const e = toApiError(err, req.headers['content-type']);
    (req as { lumenError?: string }).lumenError = e.message;
    if (e.status >= 500) ctx.log.error({ event: 'error', url: req.url, error: (err as Error).stack ?? String(err) }, 'request failed');
    return reply.code(e.status).send(errorBody(flavorOf(routePath(req)), e));
  });

  app.setNotFoundHandler((req, reply) => {
    const e = new ApiError(404, `no route ${req.method} ${req.url.split('?')[0]}`, 'not_found');
    return reply.code(404).send(errorBody(flavorOf(routePath(req)), e));
  });

  registerMiscRoutes(app, ctx);
  registerOpenAIRoutes(app, ctx);
  registerAnthropicRoutes(app, ctx);
  return app;
}

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\./.test(host);
}

/** Starts serving: header, tokenizer, listen (503 on /health while loading), engine, ready. */
export async function startServer(o: ServeOptions): Promise<RunningServer> {
  const log = createLogger(o.verbosity);
  const renderer: SweepRenderer = o.verbosity >= 1
    ? new LogRenderer(log)
    : new HumanRenderer(o.stderr, o.stderrIsTTY, colorEnabled(o.stderrIsTTY, process.env), o.verbosity < 0);
  const machine = machineInfo();
  renderer.header({
    toolVersion: TOOL_VERSION, cpuModel: machine.cpuModel, logicalCores: machine.logicalCores, usableCpus: usableCpus(),
    engineThreads: o.device === 'cuda' ? null : o.engine.threads || usableCpus(), // CUDA computes on the GPU
  });
  renderer.modelPath(o.modelDir, o.embedded, syntheticWeightsOf(o.modelDir) ?? undefined);
  const t0 = performance.now();
  const ckpt = loadModel(o.modelDir, { quant: o.quant, hash: false });
  // --max-seq within the positions the model was built for (a usage error past them; the default
  // lowered to a smaller model's maximum): every request is held to it (a 400 naming the field).
  const fit = fitMaxSeq(o.engine, modelMaxPositions(ckpt));
  const flags = { ...o.engine, maxSeq: fit.maxSeq };
  const { tokenizer, parts } = await loadModelTokenizerParts(ckpt);
  renderer.weights(weightFormatLine(ckpt));
  for (const n of loadedModelNotes(ckpt)) renderer.note(n);
  if (fit.note !== null) renderer.note(fit.note);
  const askedWorkers = o.tokenizerWorkers ?? DEFAULT_TOKENIZER_WORKERS;
  const encoder = TokenizePool.start(parts, tokenizer, askedWorkers, {
    onFailure: (err) => {
      if (o.verbosity >= 1) log.warn({ event: 'tokenizer_worker_failed', error: err.message }, err.message);
      else if (o.verbosity === 0) o.stderr.write(`bench serve: warning: ${err.message} (its texts in flight got a 500; long texts now go to the other workers, or the JS thread)\n`);
    },
    ...(o.tokenizeHold ? { hold: o.tokenizeHold } : {}),
  });
  if (encoder.workers < askedWorkers) renderer.warn(`no compiled tokenizer worker (run \`npm run build\`): long prompt texts are tokenized on the server's JS thread`);
  const name = o.servedModelName ?? ckpt.dir.split(/[/\\]/).filter(Boolean).pop() ?? 'model';
  const model = makeServeModel({
    name, root: ckpt.dir, tokenizer, encoder, configEos: ckpt.config.eosTokenId, maxSeq: flags.maxSeq, vocabSize: ckpt.config.vocabSize,
    // Synthetic weights: the generation_config.json `bench synth` writes, in memory.
    ...(ckpt.syntheticWeights ? { generationConfig: synthGenerationConfig() } : {}),
  });
  const ctx = new ServeContext(model, log);
  let app: FastifyInstance;
  try {
    app = buildApp(ctx, o.apiKey, bodyLimitFor(flags.maxSeq));
    await app.listen({ host: o.host, port: o.port });
  } catch (err) {
    await encoder.close(); // the workers' threads (a copy of the tokenizer each) go with the failed start
    throw err;
  }
  const addr = app.server.address();
  const port = typeof addr === 'object' && addr ? addr.port : o.port;
  const host = o.host.includes(':') ? `[${o.host}]` : o.host;
  const url = `http://${host}:${port}`;
  if (!isLoopback(o.host) && o.apiKey === undefined) {
    renderer.warn(`listening on ${o.host} without an API key: anyone who can reach this port can use the model (give --api-key or --api-key-env)`);
  }

  o.onListening?.(url);

  const opts = engineOptionsFrom(flags, o.device, flags.maxSeqs);
  let engine: EngineHandle;
  try {
    engine = o.loadEngine
      ? await o.loadEngine(ckpt, opts)
      : await loadEngine(ckpt, opts, { onLoadProgress: (d, t) => renderer.loadProgress(d, t) }, o.internals ?? {});
  } catch (err) {
    await app.close();
    await encoder.close();
    renderer.close();
    // A KV cache the flags ask for that cannot be had: a usage error naming them.
    throw err instanceof KvMemoryError ? new UsageError(`${kvMemoryFlags(o.engine.kvMemory, '--max-seqs')}: ${err.message}`) : err;
  }
  const serveEngine = new ServeEngine(engine);
  ctx.engine = serveEngine;
  ctx.metrics = new ServeMetrics({ stats: () => engine.stats(), inFlight: () => serveEngine.inFlight() }, model.name);
  const info = engine.info;
  renderer.loaded({
    seconds: (performance.now() - t0) / 1000, backend: info.backend, isa: info.isa, weightBytes: info.weightBytes,
    threads: info.threads, gpu: info.backend === 'cuda' ? { name: info.gpuName ?? 'GPU', memoryMb: Math.round((info.gpuMemoryBytes ?? 0) / 2 ** 20) } : null,
    engineLine: engineLine(opts, info),
    kvPool: kvPoolFacts(info),
  });
  const tokenizing = encoder.workers > 0
    ? `prompts over ${INLINE_MAX_CHARS} characters or ${INLINE_MAX_MESSAGES} messages on ${encoder.workers} worker thread${encoder.workers === 1 ? '' : 's'}`
    : 'every prompt on the JS thread';
  if (renderer instanceof HumanRenderer) {
    renderer.field('Tokenizing', tokenizing);
    renderer.field('URL', `${url}  (model '${model.name}'; OpenAI /v1/chat/completions, /v1/completions; Anthropic /v1/messages)`);
  } else log.info({ event: 'listening', url, model: model.name, tokenizer_workers: encoder.workers }, `listening on ${url}`);
  renderer.close();

  let closing: Promise<void> | null = null;
  const close = (): Promise<void> => {
    if (closing) return closing;
    closing = (async () => {
      ctx.closing = true;
      const stopped = app.close(); // no new connections; open ones end when their responses do
      const timer = setTimeout(() => app.server.closeAllConnections(), 1000);
      timer.unref();
      await ctx.cancelAll(); // streams end with a "shutting down" error event, others with a 503
      await encoder.close(); // requests whose prompts are still on a tokenizer worker: a 503
      app.server.closeIdleConnections(); // keep-alive connections whose responses just ended
      await stopped;
      clearTimeout(timer);
      await engine.close();
    })();
    return closing;
  };
  return { url, app, ctx, engine, engineOptions: opts, close };
}
