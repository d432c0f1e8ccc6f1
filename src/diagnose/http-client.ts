// The HTTP side of `bench diagnose`: JSON requests and SSE streams to an OpenAI-compatible server over
// Node's fetch (undici: keep-alive pool, no cap on connections per origin), every request bounded by
// a timeout, times from the monotonic clock. A request that got no HTTP answer at all (refused,
// reset, timed out) throws EndpointError; an HTTP error status is an answer and comes back as one.
// Every body read is capped (a reply, a stream): one larger throws ReplyTooLarge, never exhausting
// memory on a server that sends gigabytes.
import { performance } from 'node:perf_hooks';
import { bytesText } from '../util/bytes-text.js';

export type Json = Record<string, unknown>;

/** No HTTP answer: the connection failed or the request timed out. */
export class EndpointError extends Error {
  constructor(message: string, readonly kind: 'unreachable' | 'timeout' | 'protocol') {
    super(message);
    this.name = 'EndpointError';
  }
}

/** An answer whose body is larger than the client's cap: it was not read further. */
export class ReplyTooLarge extends EndpointError {
  constructor(message: string) {
    super(message, 'protocol');
    this.name = 'ReplyTooLarge';
  }
}

/** The most bytes one JSON reply may have, and one SSE stream. */
export const MAX_REPLY_BYTES = 16 * 1024 * 1024;
export const MAX_STREAM_BYTES = 64 * 1024 * 1024;

export interface HttpReply {
  status: number;
  /** The parsed JSON body, or null when the body is not JSON (then see `text`). */
  body: unknown;
  text: string;
  seconds: number;
}

/** One SSE `data:` event of a stream: its payload (parsed JSON, or the raw text such as `[DONE]`) and when it arrived. */
export interface StreamEvent {
  /** ms since the request was sent (monotonic clock), when the network read that completed it returned:
   * the events of one read share it. */
  atMs: number;
  /** That read's number within the stream (0, 1, ...): events delivered together share it. */
  read?: number;
  data: unknown;
}

export interface StreamReply {
  status: number;
  /** The error body when the status is not 2xx (no events then). */
  errorBody: unknown;
  events: StreamEvent[];
  /** The stream ended with `data: [DONE]`. */
  done: boolean;
  /** The client cancelled it (onEvent returned 'cancel'). */
  cancelled: boolean;
  seconds: number;
  /** The answer's Content-Type ('' when it sent none). */
  contentType: string;
}

export interface ClientOptions {
  /** The server's root (no trailing slash, no /v1). */
  baseUrl: string;
  apiKey?: string;
  timeoutMs: number;
  /** Caps on a reply's body and a stream's bytes (defaults MAX_REPLY_BYTES, MAX_STREAM_BYTES). */
  maxReplyBytes?: number;
  maxStreamBytes?: number;
}

/** The server's root URL from what a user typed: trailing slashes and a final `/v1` removed. */
export function normalizeBaseUrl(url: string): string {
  let u = url.trim().replace(/\/+$/, '');
  if (u.endsWith('/v1')) u = u.slice(0, -3);
  return u.replace(/\/+$/, '');
}

function describeFetchError(err: unknown, url: string, timeoutMs: number): EndpointError {
  const e = err as Error & { cause?: { code?: string; message?: string } };
  if (e.name === 'TimeoutError') return new EndpointError(`${url}: no answer within ${timeoutMs / 1000} s`, 'timeout');
  const cause = e.cause?.code ?? e.cause?.message ?? e.message;
  return new EndpointError(`cannot reach ${url}: ${cause}`, 'unreachable');
}

export class DiagnoseClient {
  readonly baseUrl: string;
  /** Whether any request has had an HTTP answer (of any status). */
  answered = false;
  private readonly apiKey: string | undefined;
  private readonly timeoutMs: number;
  private readonly maxReplyBytes: number;
  private readonly maxStreamBytes: number;

  constructor(o: ClientOptions) {
    this.baseUrl = normalizeBaseUrl(o.baseUrl);
    this.apiKey = o.apiKey;
    this.timeoutMs = o.timeoutMs;
    this.maxReplyBytes = o.maxReplyBytes ?? MAX_REPLY_BYTES;
    this.maxStreamBytes = o.maxStreamBytes ?? MAX_STREAM_BYTES;
  }

  private headers(json: boolean): Record<string, string> {
    return {
      ...(json ? { 'content-type': 'application/json' } : {}),
      ...(this.apiKey !== undefined ? { authorization: `Bearer ${this.apiKey}` } : {}),
    };
  }

  /**
   * One request, limited to --timeout-s from its start to its body's end: `end()` (called when the
   * body is read, or given up) stops the clock. The limit is a timer of its own that aborts the
   * request's controller, not AbortSignal.timeout inside AbortSignal.any: on Node 20 the combined
   * signal can lose the timeout to garbage collection, and a stream whose body never ended (a server
   * that keeps the connection open) was waited on for ever.
   */
  private async send(method: 'GET' | 'POST', path: string, body: unknown, ctl = new AbortController()): Promise<{ res: Response; t0: number; end: () => void }> {
    const url = `${this.baseUrl}${path}`;
    const timer = setTimeout(() => ctl.abort(new DOMException(`no answer within ${this.timeoutMs / 1000} s`, 'TimeoutError')), this.timeoutMs);
    timer.unref();
    const end = () => clearTimeout(timer);
    const t0 = performance.now();
    try {
      const res = await fetch(url, {
        method,
        headers: this.headers(body !== undefined),
        ...(body !== undefined ? { body: typeof body === 'string' ? body : JSON.stringify(body) } : {}),
        signal: ctl.signal,
      });
      this.answered = true;
      return { res, t0, end };
    } catch (err) {
      end();
      throw describeFetchError(err, url, this.timeoutMs);
    }
  }

  /** The body of `res` as text, at most `this.maxReplyBytes` bytes (else ReplyTooLarge, the rest unread). */
  private async cappedText(res: Response, what: string): Promise<string> {
    const cap = this.maxReplyBytes;
    const tooLarge = () => new ReplyTooLarge(`${what}: the reply is larger than ${bytesText(cap)} (the cap on one reply); not read further`);
    const declared = Number(res.headers.get('content-length') ?? NaN);
    if (Number.isFinite(declared) && declared > cap) {
      await res.body?.cancel().catch(() => {});
      throw tooLarge();
    }
    if (!res.body) return '';
    const reader = res.body.getReader();
    const parts: Uint8Array[] = [];
    let n = 0;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      n += value.byteLength;
      if (n > cap) {
        await reader.cancel().catch(() => {});
        throw tooLarge();
      }
      parts.push(value);
    }
    return Buffer.concat(parts).toString('utf8');
  }

  private async reply(method: 'GET' | 'POST', path: string, body?: unknown): Promise<HttpReply> {
    const { res, t0, end } = await this.send(method, path, body);
    let text: string;
    try {
      text = await this.cappedText(res, `${method} ${path}`);
    } catch (err) {
      if (err instanceof EndpointError) throw err;
      throw describeFetchError(err, `${this.baseUrl}${path}`, this.timeoutMs);
    } finally {
      end();
    }
    let parsed: unknown = null;
    try { parsed = JSON.parse(text); } catch { /* not JSON: the caller sees text */ }
    return { status: res.status, body: parsed, text, seconds: (performance.now() - t0) / 1000 };
  }

  get(path: string): Promise<HttpReply> {
    return this.reply('GET', path);
  }

  /** POST a JSON body (an object, or raw text sent as is, e.g. deliberately malformed JSON). */
  post(path: string, body: unknown): Promise<HttpReply> {
    return this.reply('POST', path, body);
  }

  /**
   * POST a streaming request and read its SSE events. `onEvent` sees each event as it arrives and
   * may return 'cancel' to abort the request there (the connection is closed, as a client that goes
   * away would).
   */
  async stream(path: string, body: unknown, onEvent?: (e: StreamEvent, index: number) => 'cancel' | void): Promise<StreamReply> {
    const ctl = new AbortController();
    const { res, t0, end } = await this.send('POST', path, body, ctl);
    const url = `${this.baseUrl}${path}`;
    const events: StreamEvent[] = [];
    if (res.status < 200 || res.status >= 300 || !res.body) {
      const text = await this.cappedText(res, `POST ${path}`).catch((err: unknown) => {
        if (err instanceof ReplyTooLarge) throw err;
        return '';
      }).finally(end);
      let errorBody: unknown = text;
      try { errorBody = JSON.parse(text); } catch { /* keep the text */ }
      return { status: res.status, errorBody, events, done: false, cancelled: false, seconds: (performance.now() - t0) / 1000, contentType: res.headers.get('content-type') ?? '' };
    }
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    let done = false;
    let cancelled = false;
    let readAtMs = 0;
    let reads = -1;
    let bytes = 0;
    const handle = (block: string): void => {
      const data: string[] = [];
      for (const line of block.split(/\r?\n/)) {
        if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
        // event:, id:, retry: and comments carry nothing an OpenAI stream needs.
      }
      if (data.length === 0) return;
      const payload = data.join('\n');
      if (payload === '[DONE]') { done = true; return; }
      let parsed: unknown = payload;
      try { parsed = JSON.parse(payload); } catch { /* kept as text: the checks say so */ }
      const ev = { atMs: readAtMs, read: reads, data: parsed };
      events.push(ev);
      if (onEvent?.(ev, events.length - 1) === 'cancel') {
        cancelled = true;
        ctl.abort();
      }
    };
    try {
      // data: [DONE] ends the stream, as it does for OpenAI's clients: what a server sends after it,
      // or a connection it keeps open, is not waited for.
      while (!cancelled && !done) {
        const { value, done: closed } = await reader.read();
        if (closed) break;
        readAtMs = performance.now() - t0;
        reads++;
        bytes += value.byteLength;
        if (bytes > this.maxStreamBytes) {
          ctl.abort();
          throw new ReplyTooLarge(`POST ${path}: the stream is larger than ${bytesText(this.maxStreamBytes)} (the cap on one stream); not read further`);
        }
        buf += dec.decode(value, { stream: true });
        let m: RegExpExecArray | null;
        while (!cancelled && !done && (m = /\r?\n\r?\n/.exec(buf)) !== null) {
          const block = buf.slice(0, m.index);
          buf = buf.slice(m.index + m[0].length);
          handle(block);
        }
      }
      if (!cancelled && !done && buf.trim() !== '') handle(buf);
    } catch (err) {
      if (err instanceof ReplyTooLarge) throw err;
      if (!cancelled) throw describeFetchError(err, url, this.timeoutMs);
    } finally {
      end();
      if (cancelled || done) await reader.cancel().catch(() => {});
    }
    return { status: res.status, errorBody: null, events, done, cancelled, seconds: (performance.now() - t0) / 1000, contentType: res.headers.get('content-type') ?? '' };
  }
}

/** `choices[0]` of a response or chunk, if it has one. */
export function firstChoice(x: unknown): Json | undefined {
  const choices = (x as Json | null)?.choices;
  return Array.isArray(choices) && choices.length > 0 && typeof choices[0] === 'object' && choices[0] !== null ? choices[0] as Json : undefined;
}

/** What a stream says, put together: text, finish reason, usage, token ids (when every content chunk had them). */
export interface StreamSummary {
  text: string;
  finishReason: string | null;
  usage: Json | null;
  tokenIds: number[] | null;
  /** ms from the request to the first chunk whose delta had non-empty text (content or reasoning). */
  firstContentMs: number | null;
  /** ms from the request to the chunk that carried finish_reason. */
  finishMs: number | null;
  /** Chunks with text after the first one, through the finish chunk, and the network reads that
   * delivered them (past the first content chunk's read): fewer reads than chunks means the client
   * received them in bursts, so their times say little about the server's pace. */
  decodeChunks: number;
  decodeReads: number | null;
  /** Chunks that were not JSON objects, or error objects inside the stream. */
  errors: unknown[];
}

export function summarizeStream(events: readonly StreamEvent[]): StreamSummary {
  let text = '';
  let finishReason: string | null = null;
  let usage: Json | null = null;
  let ids: number[] | null = [];
  let firstContentMs: number | null = null;
  let finishMs: number | null = null;
  let firstRead: number | null = null;
  let finishRead: number | null = null;
  let decodeChunks = 0;
  const errors: unknown[] = [];
  for (const ev of events) {
    const d = ev.data as Json | null;
    if (typeof d !== 'object' || d === null) { errors.push(ev.data); continue; }
    if (d.error !== undefined) errors.push(d);
    if (d.usage && typeof d.usage === 'object') usage = d.usage as Json;
    const c = firstChoice(d);
    if (!c) continue;
    const delta = (c.delta ?? {}) as Json;
    const piece = typeof delta.content === 'string' ? delta.content : typeof c.text === 'string' ? c.text : '';
    const reasoning = typeof delta.reasoning_content === 'string' ? delta.reasoning_content : typeof delta.reasoning === 'string' ? delta.reasoning : '';
    if (piece !== '' || reasoning !== '') {
      if (firstContentMs === null) {
        firstContentMs = ev.atMs;
        firstRead = ev.read ?? null;
      } else if (finishReason === null) {
        decodeChunks++;
      }
    }
    text += piece;
    if (Array.isArray(c.token_ids)) { if (ids) ids.push(...(c.token_ids as number[])); }
    else if (piece !== '') ids = null;
    if (c.finish_reason !== null && c.finish_reason !== undefined && finishReason === null) {
      finishReason = String(c.finish_reason);
      finishMs = ev.atMs;
      finishRead = ev.read ?? null;
    }
  }
  const decodeReads = firstRead !== null && finishRead !== null ? finishRead - firstRead : null;
  return { text, finishReason, usage, tokenIds: ids && ids.length > 0 ? ids : null, firstContentMs, finishMs, decodeChunks, decodeReads, errors };
}
