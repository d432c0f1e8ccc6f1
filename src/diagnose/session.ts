// What every check of `bench diagnose` shares: the client, the model, which of vLLM's extra request
// fields the server accepts (found once by a probe), the chat request body, and the result record of
// one check (id, pass, seconds, the server's whole response) with the one rule for "it ran" every
// check goes through (replyKind): the server answered with a 2xx, or refused the request itself with
// 400, 413 or 422 (a finding: the check ran and failed, with the server's error as its response). A
// 5xx, a refusal of service (401, 403, 404, 405, 407, 408, 429: a wrong key, model or route, a rate
// limit), any other status, a 2xx whose body is not what was asked for, or no answer at all means
// the check did not run, and the report is incomplete.
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

/**
 * Thrown inside a check when the server refused one of its requests with a status that judges the
 * request itself (400, 413, 422): the check ran and failed, with the server's error as its response.
 */
export class CheckRefused extends Error {
  constructor(message: string, readonly response: unknown = null) {
    super(message);
    this.name = 'CheckRefused';
  }
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

  /** POST /v1/chat/completions: a 2xx JSON answer, else CheckRefused or CheckNotRun by the "ran" rule (requireAnswer). */
  async chat(body: Json, what = ''): Promise<HttpReply> {
    const r = await this.client.post('/v1/chat/completions', body);
    return requireAnswer(r, what);
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
      if (replyKind(r.status) !== 'refused') break; // only a refusal of the request itself says a field may be to blame
    }
    const keyHint = last!.status === 401 || last!.status === 403 ? '; the server refused the key (or its absence): give the right one with --api-key-env VAR' : '';
    throw new CheckNotRun(`a minimal chat request failed: HTTP ${last!.status}: ${errorMessage(last!.body, last!.text)}${keyHint}`, last!.body ?? last!.text);
  }
}

/** The message of an error body (`{"error": {"message"}}`, vLLM's older `{"message"}`), else the text cut short. */
export function errorMessage(body: unknown, text = ''): string {
  const b = body as Json | null;
  const e = b && typeof b === 'object' ? (typeof b.error === 'object' && b.error !== null ? (b.error as Json).message : b.message ?? b.error) : undefined;
  const s = typeof e === 'string' ? e : text;
  return s.length > 160 ? `${s.slice(0, 160)}…` : s;
}

/** Statuses that judge the request itself: the server cannot do what was asked, a finding (the check ran and failed). */
export const REFUSAL_STATUSES: ReadonlySet<number> = new Set([400, 413, 422]);
/** Statuses that refuse service, saying nothing of the request's content (a wrong key, model or route; a rate limit). */
export const SERVICE_REFUSED_STATUSES: ReadonlySet<number> = new Set([401, 403, 404, 405, 407, 408, 429]);

/**
 * The one "did it run" rule of every check (docs/diagnose.md, "What ran means"): a 2xx is an answer;
 * 400, 413 and 422 refuse the request itself (the check ran and fails); anything else (a 5xx, a
 * refusal of service, any other status) means the check did not run.
 */
export function replyKind(status: number): 'answer' | 'refused' | 'not-run' {
  if (status >= 200 && status < 300) return 'answer';
  return REFUSAL_STATUSES.has(status) ? 'refused' : 'not-run';
}

/** The rule applied to a status and an error body: throws CheckRefused or CheckNotRun unless it is a 2xx. */
export function requireStatus(status: number, body: unknown, what = ''): void {
  const kind = replyKind(status);
  if (kind === 'answer') return;
  const msg = `${what ? `${what}: ` : ''}HTTP ${status}: ${errorMessage(body, typeof body === 'string' ? body : '')}`;
  if (kind === 'refused') throw new CheckRefused(msg, body);
  throw new CheckNotRun(msg, body);
}

/** The rule applied to a reply: a 2xx with a JSON object body comes back; else CheckRefused or CheckNotRun (a 2xx whose body is not a JSON object: not run). */
export function requireAnswer(r: HttpReply, what = ''): HttpReply {
  requireStatus(r.status, r.body ?? r.text, what);
  if (r.body === null || typeof r.body !== 'object') {
    throw new CheckNotRun(`${what ? `${what}: ` : ''}HTTP ${r.status} with a body that is not a JSON object`, r.text);
  }
  return r;
}

export function ok(r: HttpReply): boolean {
  return r.status >= 200 && r.status < 300;
}

/**
 * Runs one check: `fn` returns the result's fields except id (and seconds, unless it times a part
 * of its work itself, e.g. the request without the sizing before it). A CheckRefused inside is a
 * finding: the check ran and failed (pass false, the server's error as its response, `reason`). A
 * CheckNotRun or an EndpointError becomes the check's `error` (pass false). So does any other exception (a
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
    if (err instanceof CheckRefused) return { id, pass: false, seconds, response: err.response, reason: `the server refused the request: ${err.message}` };
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
