// The one engine every HTTP request goes into. Requests are submitted straight to the engine (which
// batches them continuously, admits those of one JS turn in one step and parks the rest until a
// sequence slot and KV blocks free up); this wrapper counts what is in flight, hands each request's
// tokens over once per JS turn (the tokens of one engine step arrive in one callback turn, so one
// delivery = one step's tokens), and cancels everything at shutdown.
import type { EngineHandle, EngineStats, RequestHandle, RequestOptions, RequestResult, TokenLogprobs } from '../engine/types.js';

/** The tokens of one request that arrived in one JS turn (one engine step, unless the JS thread fell behind). */
export interface StepTokens {
  tokens: number[];
  /** Native emit times, ms. */
  tMs: number[];
  /** When the request asked for logprobs. */
  logprobs?: TokenLogprobs[];
}

export class ServeEngine {
  private readonly live = new Map<number, RequestHandle>();

  constructor(readonly engine: EngineHandle) {}

  /**
   * Submits a request; `onStep` receives its new tokens once per JS turn. Throws (synchronously)
   * what the engine refuses (e.g. a request longer than max_seq or the KV pool).
   */
  submit(req: RequestOptions, onStep: (s: StepTokens) => void): { id: number; done: Promise<RequestResult>; cancel(): void } {
    let pending: StepTokens | null = null;
    const deliver = () => {
      const s = pending!;
      pending = null;
      onStep(s);
    };
    const h = this.engine.submit(req, (ev) => {
      if (pending === null) {
        pending = { tokens: [], tMs: [], ...(ev.logprobs ? { logprobs: [] } : {}) };
        queueMicrotask(deliver); // after the rest of this delivery: the whole step's tokens at once
      }
      pending.tokens.push(ev.token);
      pending.tMs.push(ev.tMs);
      if (ev.logprobs) pending.logprobs?.push(ev.logprobs);
    });
    this.live.set(h.id, h);
    const done = h.done.then((r) => {
      this.live.delete(h.id);
      return r;
    });
    return { id: h.id, done, cancel: () => h.cancel() };
  }

  inFlight(): number {
    return this.live.size;
  }

  stats(): EngineStats {
    return this.engine.stats();
  }

  /** Cancels every request in flight (shutdown). */
  cancelAll(): void {
    for (const h of this.live.values()) h.cancel();
  }

  close(): Promise<void> {
    return this.engine.close();
  }
}
