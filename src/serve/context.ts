// What every route handler shares: the model, the one engine (absent while loading), the metrics,
// the request log, and the set of generations in flight (cancelled together at shutdown).
import { performance } from 'node:perf_hooks';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from '../bench/logger.js';
import { ApiError, badRequest, toApiError } from './errors.js';
import type { ServeEngine } from './engine-queue.js';
import { apiFinishReason, Generation, type GenerationParams, type GenerationResult, type StepDelta } from './generation.js';
import type { ServeMetrics } from './metrics.js';
import type { ServeModel } from './model.js';

/** The request log's status for a non-streamed request whose client went away before its answer (nginx's "client closed request"). */
export const CLIENT_CLOSED_REQUEST = 499;

export interface RequestLogFields {
  route: string;
  status: number;
  result?: GenerationResult | null;
  /** Wall time from the request's arrival to its last byte (ms). */
  startedAt: number;
  error?: string;
}

export class ServeContext {
  engine: ServeEngine | null = null;
  metrics: ServeMetrics | null = null;
  closing = false;
  /** Called with every finished generation (benchmarks pair a client's view of a request with the engine's). */
  onFinished: ((r: GenerationResult) => void) | null = null;
  private readonly live = new Set<Generation>();
  private nextLogId = 1;

  constructor(readonly model: ServeModel, readonly log: Logger) {}

  /** The engine, or a 503 while the model loads or the server stops. */
  requireEngine(): ServeEngine {
    if (this.closing) throw new ApiError(503, 'the server is shutting down', 'unavailable');
    if (!this.engine) throw new ApiError(503, 'the model is still loading', 'unavailable');
    return this.engine;
  }

  /**
   * Starts a generation; what the engine refuses at submit (a request too large for the KV pool) is
   * a 400 carrying the engine's reason. `reply`: the client's disconnect cancels the request at once.
   */
  start(params: GenerationParams, reply: FastifyReply, onDelta?: (d: StepDelta) => void): Generation {
    const engine = this.requireEngine();
    let gen: Generation;
    try {
      gen = new Generation(engine, this.model.text, params, onDelta);
    } catch (err) {
      throw badRequest((err as Error).message);
    }
    this.live.add(gen);
    const res = reply.raw;
    const onClose = () => {
      if (res.writableEnded) return;
      (reply.request as { lumenClientGone?: boolean }).lumenClientGone = true;
      gen.cancel();
    };
    res.on('close', onClose);
    // A client gone while its prompt was being tokenized (off the JS thread) closed before the listener: cancel at once.
    if (res.destroyed) onClose();
    void gen.done.then((r) => {
      this.live.delete(gen);
      this.metrics?.record(r.engine, r.tokens.length, apiFinishReason(r));
      this.onFinished?.(r);
    }, () => this.live.delete(gen));
    return gen;
  }

  /**
   * A non-streamed generation run to its end: its result (kept on the request for the request's log
   * line) and, when the client is to get an error instead, that error: the engine failed the request,
   * or the server is stopping and cancelled it.
   */
  async complete(params: GenerationParams, req: FastifyRequest, reply: FastifyReply): Promise<{ result: GenerationResult; failure: ApiError | null }> {
    const r = await this.start(params, reply).done;
    const q = req as { lumenResult?: GenerationResult; lumenClientGone?: boolean; lumenLogged?: boolean; lumenStart?: number };
    q.lumenResult = r;
    if (q.lumenClientGone) {
      // No response will finish (fastify's onResponse never runs for it): its log line is written here.
      this.logRequest({ route: req.routeOptions.url ?? req.url, status: CLIENT_CLOSED_REQUEST, result: r, startedAt: q.lumenStart ?? performance.now() });
      q.lumenLogged = true;
    }
    return { result: r, failure: this.failureOf(r) };
  }

  /** The error a finished generation answers with: the engine failed it, or the stopping server cancelled it; else null. */
  failureOf(r: GenerationResult): ApiError | null {
    if (r.finish === 'error') return toApiError(new Error(r.error ?? 'generation failed'));
    if (r.finish === 'cancelled' && this.closing) return new ApiError(503, 'the server is shutting down', 'unavailable');
    return null;
  }

  /** Cancels every generation in flight (shutdown); resolves once each has ended and its handler has answered. */
  async cancelAll(): Promise<void> {
    const all = [...this.live];
    for (const g of all) g.cancel();
    await Promise.allSettled(all.map((g) => g.done));
    await new Promise((r) => setImmediate(r)); // the handlers write their last bytes after `done`
  }

  get inFlight(): number {
    return this.live.size;
  }

  /** One pino line per request (-v): id, route, tokens, TTFT, duration, finish reason, status. */
  logRequest(f: RequestLogFields): void {
    const r = f.result ?? null;
    this.log.info({
      event: 'request',
      id: this.nextLogId++,
      route: f.route,
      status: f.status,
      prompt_tokens: r?.promptTokens ?? null,
      cached_tokens: r?.cachedPromptTokens ?? null,
      output_tokens: r ? r.tokens.length : null,
      ttft_ms: r?.ttftMs ?? null,
      duration_ms: performance.now() - f.startedAt,
      finish_reason: r ? apiFinishReason(r) : null,
      ...(f.error ? { error: f.error } : {}),
    }, 'request');
  }
}
