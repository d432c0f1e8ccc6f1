// What every check of `bench diagnose` shares: the client, the model, which of vLLM's extra request
// fields the server accepts (found once by a probe), the chat request body, and the result record of
// one check (id, pass, seconds, the server's whole response) with the rule for "it ran": the server
// answered with 2xx, or refused the request itself with a 4xx such as 400 (a finding: the check ran
// and failed). A 5xx, a 401/403/404/408/429 or no answer at all means the check did not run, and
// the report is incomplete.
import { performance } from 'node:perf_hooks';
import { DiagnoseClient, EndpointError, type HttpReply, type Json } from './http-client.js';

export interface CheckResult {
  id: string;
  /** null: not applicable to this server (`skipped` says why); it still ran. */
  pass: boolean | null;
  seconds: number;
  /** The server's whole response (the error body for an HTTP error; null when there was no answer). */
  response: unknown;
  /** Why it did not run (5xx, no answer); the report is incomplete then. */
  error?: string;
  [extra: string]: unknown;
}

/** What a check's body returns: the result without its id (seconds only when it times part of its work itself). */
export interface CheckBody {
  pass: boolean | null;
  response: unknown;
  seconds?: number;
  [extra: string]: unknown;
}

/** Thrown inside a check when it cannot run; becomes the check's `error`. */
export class CheckNotRun extends Error {
  constructor(message: string, readonly response: unknown = null) {
    super(message);
    this.name = 'CheckNotRun';
  }
}

export interface Extras {
  /** `chat_template_kwargs: {enable_thinking: false}` (vLLM, SGLang, our serve). */
  chatTemplateKwargs: boolean;
  /** `return_token_ids: true` (vLLM ≥ 0.10, our serve): output ids for token-for-token comparisons. */
  returnTokenIds: boolean;
}

export interface ChatOptions {
  maxTokens: number;
  tools?: Json[];
  stop?: string[];
  stream?: boolean;
  includeUsage?: boolean;
  /** More fields, sent as they are. */
  extra?: Json;
}

export class Session {
  extras: Extras = { chatTemplateKwargs: true, returnTokenIds: true };
  constructor(readonly client: DiagnoseClient, readonly model: string) {}

  /** A greedy chat request body. */
  chatBody(messages: Json[], o: ChatOptions): Json {
    return {
      model: this.model,
      messages,
      temperature: 0,
      max_tokens: o.maxTokens,
      ...(o.tools ? { tools: o.tools } : {}),
      ...(o.stop ? { stop: o.stop } : {}),
      ...(o.stream ? { stream: true, ...(o.includeUsage ? { stream_options: { include_usage: true } } : {}) } : {}),
      ...(this.extras.chatTemplateKwargs ? { chat_template_kwargs: { enable_thinking: false } } : {}),
      ...(this.extras.returnTokenIds ? { return_token_ids: true } : {}),
      ...(o.extra ?? {}),
    };
  }

  userBody(prompt: string, o: ChatOptions): Json {
    return this.chatBody([{ role: 'user', content: prompt }], o);
  }

  /** POST /v1/chat/completions, requiring a 2xx JSON answer (a 4xx comes back too: the caller decides). */
  async chat(body: Json): Promise<HttpReply> {
    const r = await this.client.post('/v1/chat/completions', body);
    return requireAnswer(r);
  }

  /**
   * Which extra fields the server accepts: one tiny request with both; on a 4xx, one without
   * return_token_ids, then one with neither. The first that succeeds decides.
   */
  async probeExtras(): Promise<{ extras: Extras; note: string }> {
    const tries: Extras[] = [
      { chatTemplateKwargs: true, returnTokenIds: true },
      { chatTemplateKwargs: true, returnTokenIds: false },
      { chatTemplateKwargs: false, returnTokenIds: false },
    ];
    let last: HttpReply | null = null;
    for (const t of tries) {
      this.extras = t;
      const r = await this.client.post('/v1/chat/completions', this.userBody('Say OK.', { maxTokens: 1 }));
      if (r.status >= 200 && r.status < 300) {
        return { extras: t, note: last ? `the server refused a field (HTTP ${last.status}: ${errorMessage(last.body, last.text)}); sent without it` : 'accepted' };
      }
      last = r;
      if (r.status >= 500 || NOT_RUN_STATUSES.has(r.status)) break;
    }
    throw new CheckNotRun(`a minimal chat request failed: HTTP ${last!.status}: ${errorMessage(last!.body, last!.text)}`, last!.body ?? last!.text);
  }
}

/** The message of an error body (`{"error": {"message"}}`, vLLM's older `{"message"}`), else the text cut short. */
export function errorMessage(body: unknown, text = ''): string {
  const b = body as Json | null;
  const e = b && typeof b === 'object' ? (typeof b.error === 'object' && b.error !== null ? (b.error as Json).message : b.message ?? b.error) : undefined;
  const s = typeof e === 'string' ? e : text;
  return s.length > 160 ? `${s.slice(0, 160)}…` : s;
}

/** Statuses that say nothing of the request's content: the check could not run (a wrong key, model or route; rate limits). */
const NOT_RUN_STATUSES = new Set([401, 403, 404, 408, 429]);

/** A 5xx (or 401, 403, 404, 408, 429), or a 2xx whose body is not JSON, is not an answer a check can score. */
export function requireAnswer(r: HttpReply): HttpReply {
  if (r.status >= 500 || NOT_RUN_STATUSES.has(r.status)) throw new CheckNotRun(`HTTP ${r.status}: ${errorMessage(r.body, r.text)}`, r.body ?? r.text);
  if (r.status >= 200 && r.status < 300 && (r.body === null || typeof r.body !== 'object')) {
    throw new CheckNotRun(`HTTP ${r.status} with a body that is not a JSON object`, r.text);
  }
  return r;
}

export function ok(r: HttpReply): boolean {
  return r.status >= 200 && r.status < 300;
}

/**
 * Runs one check: `fn` returns the result's fields except id (and seconds, unless it times a part
 * of its work itself, e.g. the request without the sizing before it). A CheckNotRun or an
 * EndpointError inside becomes the check's `error` (pass false). So does any other exception (a
 * reply of a shape the check did not foresee, a bug): the check did not run, and says why, and
 * the rest of the report is kept.
 */
export async function runCheck(id: string, fn: () => Promise<CheckBody>): Promise<CheckResult> {
  const t0 = performance.now();
  try {
    const { pass, seconds, response, ...rest } = await fn();
    return { id, pass, seconds: seconds ?? (performance.now() - t0) / 1000, response, ...rest };
  } catch (err) {
    const seconds = (performance.now() - t0) / 1000;
    if (err instanceof CheckNotRun || err instanceof EndpointError) {
      return { id, pass: false, seconds, response: err instanceof CheckNotRun ? err.response : null, error: err.message };
    }
    return { id, pass: false, seconds, response: null, error: unexpectedError(err) };
  }
}

/** The `error` of a check that threw something no rule foresaw. */
export function unexpectedError(err: unknown): string {
  return `internal error (a reply of an unforeseen shape?): ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`;
}
