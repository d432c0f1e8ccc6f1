// One streamed completion over the OpenAI wire: the request body the benchmark sends (chat or
// completions; greedy; exactly osl tokens asked for with ignore_eos and min_tokens; usage asked for,
// with continuous_usage_stats), and the stream read into timed chunks, the final usage and the finish.
import type { HttpPool } from './http-pool.js';
import { HttpFailure } from './http-pool.js';
import { SseParser } from './sse.js';
import type { WireChunk } from './chunk-timeline.js';
import { isJsonObject } from '../util/json.js';

export type WireApi = 'chat' | 'completions';

export const API_PATHS: Record<WireApi, string> = { chat: '/v1/chat/completions', completions: '/v1/completions' };

export interface Usage {
  prompt_tokens: number | null;
  completion_tokens: number | null;
  cached_tokens: number | null;
  /**
   * What in it could not be read, each naming the field and what it held (`completion_tokens "64" (a
   * string)`, `no completion_tokens`): a count that is not a non-negative integer is never taken for one.
   */
  problems: string[];
}

/** The body of a benchmark request: `text` is the prompt (chat: the one user message). */
export function benchRequestBody(api: WireApi, model: string, text: string, maxTokens: number): Record<string, unknown> {
  const common = {
    model,
    max_tokens: maxTokens,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true, continuous_usage_stats: true },
    ignore_eos: true,
    min_tokens: maxTokens,
  };
  return api === 'chat'
    ? { ...common, messages: [{ role: 'user', content: text }] }
    : { ...common, prompt: text };
}

export interface StreamedCompletion {
  /** Client clock (performance.now(), ms): the body written on a connected socket. */
  sentMs: number;
  /** The first chunk with a non-empty `choices` list (vLLM's TTFT mark), and the first with text. */
  firstChoicesMs: number | null;
  firstTextMs: number | null;
  /** Every chunk that had a choice, in order. */
  chunks: WireChunk[];
  /** The last usage object seen (the final usage chunk, or the last continuous one). */
  usage: Usage | null;
  /** The server's finish_reason, or null when the stream gave none. */
  finishReason: string | null;
  /** Why the request failed (HTTP status, an error event, a broken stream), or null. */
  error: string | null;
  /** The request was cancelled by the caller. */
  cancelled: boolean;
  /** HTTP status (0 when no response). */
  status: number;
}

type Json = Record<string, unknown>;

/** Thrown from the data handler once the stream has failed, so the pool stops reading it. */
class StreamFailed extends Error {}

/** A token count: a non-negative integer; anything else present is a problem named with its value. */
function countOf(v: unknown, name: string, problems: string[], required: boolean): number | null {
  if (v === undefined || v === null) {
    if (required) problems.push(`no ${name}`);
    return null;
  }
  if (typeof v === 'number' && Number.isInteger(v) && v >= 0) return v;
  problems.push(`${name} ${describeJson(v)}`);
  return null;
}

/** A usage object's counts (null: not an object: no usage); a count of the wrong type is null, and named in `problems`. */
export function usageOf(u: unknown): Usage | null {
  if (typeof u !== 'object' || u === null) return null;
  const problems: string[] = [];
  if (Array.isArray(u)) return { prompt_tokens: null, completion_tokens: null, cached_tokens: null, problems: [`usage ${describeJson(u)}`] };
  const o = u as Json;
  const details = o.prompt_tokens_details;
  return {
    prompt_tokens: countOf(o.prompt_tokens, 'prompt_tokens', problems, true),
    completion_tokens: countOf(o.completion_tokens, 'completion_tokens', problems, true),
    cached_tokens: isJsonObject(details) ? countOf(details.cached_tokens, 'prompt_tokens_details.cached_tokens', problems, false) : null,
    problems,
  };
}

/** The generated text of a choice: completions' `text`, chat's delta content, reasoning and tool-call arguments. */
export function choiceText(choice: Json): string {
  if (typeof choice.text === 'string') return choice.text;
  const d = (choice.delta ?? {}) as Json;
  let s = '';
  if (typeof d.content === 'string') s += d.content;
  if (typeof d.reasoning_content === 'string') s += d.reasoning_content;
  else if (typeof d.reasoning === 'string') s += d.reasoning;
  if (Array.isArray(d.tool_calls)) {
    for (const t of d.tool_calls as Json[]) {
      const f = (t?.function ?? {}) as Json;
      if (typeof f.name === 'string') s += f.name;
      if (typeof f.arguments === 'string') s += f.arguments;
    }
  }
  return s;
}

/** The message of an error body in the OpenAI shape ({error: {message}}), or the text's start. */
export function errorText(text: string, json?: unknown): string {
  let j = json;
  if (j === undefined) {
    try { j = JSON.parse(text); } catch { j = null; }
  }
  const e = (j as { error?: unknown; message?: unknown } | null)?.error;
  if (typeof e === 'object' && e !== null && typeof (e as Json).message === 'string') return (e as Json).message as string;
  if (typeof e === 'string') return e;
  const m = (j as { message?: unknown } | null)?.message;
  if (typeof m === 'string') return m;
  return text.trim().slice(0, 200);
}

/** What a JSON value is, for a message naming what the server sent instead of what it should have. */
export function describeJson(v: unknown): string {
  if (v === null) return 'null';
  const kind = Array.isArray(v) ? 'an array' : typeof v === 'object' ? 'an object' : `a ${typeof v}`;
  let text: string;
  try { text = JSON.stringify(v) ?? String(v); } catch { text = String(v); }
  return `${text.length > 60 ? `${text.slice(0, 60)}…` : text} (${kind})`;
}

/** The most of a non-200 body kept for its error message, and the most one SSE event may hold. */
const MAX_ERROR_BODY = 64 * 1024;
const MAX_EVENT_BYTES = 16 * 1024 * 1024;

/** Sends one request and reads its stream. Never throws: every failure is in `error`. */
export async function streamCompletion(
  pool: HttpPool, api: WireApi, body: Record<string, unknown>, timeoutMs: number, signal: AbortSignal,
  onChunk?: (c: WireChunk) => void,
): Promise<StreamedCompletion> {
  const out: StreamedCompletion = {
    sentMs: performance.now(), firstChoicesMs: null, firstTextMs: null, chunks: [], usage: null, finishReason: null,
    error: null, cancelled: false, status: 0,
  };
  const parser = new SseParser();
  let raw = '';
  let done = false;
  let streaming = false;
  let contentType = '';
  const readEvent = (data: string, at: number) => {
    if (done || out.error) return;
    if (data === '[DONE]') { done = true; return; }
    let parsed: unknown;
    try {
      parsed = JSON.parse(data);
    } catch {
      out.error = `the stream sent an event that is not JSON: ${data.slice(0, 120)}`;
      return;
    }
    if (!isJsonObject(parsed)) {
      out.error = `the stream sent an event that is not a JSON object: ${describeJson(parsed)}`;
      return;
    }
    const j = parsed;
    if (j.error !== undefined && j.error !== null) {
      out.error = `the server sent an error event: ${errorText(data, j)}`;
      return;
    }
    const usage = usageOf(j.usage);
    if (usage) out.usage = usage;
    // OpenAI's chunks always carry choices (empty in the usage chunk); an event with neither choices nor
    // usage is another wire (llama.cpp's /completion `content`, TGI's `token`), whose text this client
    // would otherwise drop: a row of no tokens marked ok.
    if ((j.choices === undefined || j.choices === null) && usage === null) {
      out.error = `the stream sent an event with no choices list (not an OpenAI ${API_PATHS[api]} chunk): ${describeJson(j)}`;
      return;
    }
    if (j.choices !== undefined && j.choices !== null && !Array.isArray(j.choices)) {
      out.error = `the stream sent an event whose choices is not a list: ${describeJson(j.choices)}`;
      return;
    }
    const choices = (j.choices ?? []) as unknown[];
    if (choices.length === 0) return;
    const choice = choices[0];
    if (!isJsonObject(choice)) {
      out.error = `the stream sent an event whose choices[0] is not an object: ${describeJson(choice)}`;
      return;
    }
    out.firstChoicesMs ??= at;
    const text = choiceText(choice);
    if (text !== '') out.firstTextMs ??= at;
    const c: WireChunk = { atMs: at, text, runningCompletion: usage?.completion_tokens ?? null };
    out.chunks.push(c);
    onChunk?.(c);
    if (typeof choice.finish_reason === 'string') out.finishReason = choice.finish_reason;
  };
  // Whatever an event holds, reading it fails this request at worst (never the process).
  const onEvent = (data: string, at: number) => {
    try {
      readEvent(data, at);
    } catch (err) {
      out.error ??= `the stream sent an event this client could not read (${err instanceof Error ? err.message : String(err)}): ${data.slice(0, 120)}`;
    }
  };
  try {
    out.status = await pool.stream(API_PATHS[api], body, {
      onSent: (t) => { out.sentMs = t; },
      onResponse: (status, _at, type) => { streaming = status === 200; contentType = type; },
      onData: (text, at) => {
        if (!streaming) { if (raw.length < MAX_ERROR_BODY) raw += text; return; }
        for (const ev of parser.push(text)) onEvent(ev.data, at);
        if (out.error === null && parser.pending > MAX_EVENT_BYTES) out.error = `the stream sent over ${MAX_EVENT_BYTES / (1024 * 1024)} MiB without ending an event`;
        // The request has failed: stop reading (the pool closes the connection, which also cancels it on the server).
        if (out.error !== null) throw new StreamFailed(out.error);
        // data: [DONE] ends the stream, as for OpenAI's clients: a server that keeps the connection
        // open after it (or sends more) does not hold the request until --timeout-s.
        return done && streaming ? 'end' : undefined;
      },
    }, { timeoutMs, signal });
  } catch (err) {
    if (err instanceof HttpFailure && err.kind === 'aborted') out.cancelled = true;
    else out.error ??= err instanceof Error ? err.message : String(err);
    return out;
  }
  if (out.status !== 200) {
    out.error = `HTTP ${out.status} from POST ${API_PATHS[api]}: ${errorText(raw)}`;
    return out;
  }
  const tail = parser.end();
  if (tail) onEvent(tail.data, performance.now());
  if (!out.error && done && out.chunks.length === 0) {
    out.error = 'the stream ended (data: [DONE]) without a single choice: no text and no finish_reason';
  }
  if (!out.error && !done && out.finishReason === null) {
    // A server that ignores stream: true answers one JSON body (no events at all): say that, not "ended early".
    out.error = out.chunks.length === 0 && !/text\/event-stream/i.test(contentType)
      ? `the server answered stream: true with ${contentType === '' ? 'no content-type' : `content-type ${contentType}`}, not an event stream (it does not stream this route?)`
      : 'the stream ended before a finish_reason or data: [DONE]';
  }
  return out;
}
