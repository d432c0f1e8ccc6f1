// Greedy decode timing over HTTP, as the seed report defines it: one streamed request (with
// include_usage) per run; TTFT from the request to the first chunk whose delta has non-empty text;
// the decode time from that chunk to the chunk carrying finish_reason, so the first output token is
// outside it; tokens from usage.completion_tokens (never re-tokenised text).
import { summarizeStream, type Json } from './http-client.js';
import { CheckNotRun, CheckRefused, requireStatus, type Session } from './session.js';

export const TIMING_SCOPE = 'Client-observed first nonempty delta through finish event; excludes first output token';

export const DECODE_PROMPT = 'In about one hundred words, explain why batch-one decoding of a large language model is usually limited by memory bandwidth rather than by compute.';

export interface DecodeRun {
  text: string;
  /** The server's usage (null when it sent none: then the rate is null too). */
  usage: Json | null;
  ttft_ms: number | null;
  /** (completion_tokens − 1) / decode_seconds; null when it cannot be computed (no usage, one token, no finish event). */
  decode_tokens_per_second: number | null;
  decode_seconds: number | null;
  /** The chunks with text after the first, and the network reads past the first content chunk's that
   * delivered them through the finish chunk; null when the stream had no finish chunk. */
  decode_chunks: number;
  decode_reads: number | null;
  /** Why decode_tokens_per_second is null when it is (one token, no usage, the tokens in bursts). */
  decode_rate_note: string | null;
  timing_scope: string;
  finish_reason: string | null;
  chunks: number;
  /** The stream ended with data: [DONE] (absent when the run was refused or failed). */
  stream_done?: boolean;
  /** Output ids when the server returned them in every chunk (determinism comparisons). */
  token_ids?: number[];
  /** The server refused the request itself (400, 413, 422: a finding, the run ran): its status and message. */
  refused?: string;
  /** The server's error body when it refused the request. */
  response?: unknown;
}

/** The figures of one run from its stream's times and usage (`noCount`: why completionTokens is null). */
export function decodeFigures(
  firstContentMs: number | null, finishMs: number | null, completionTokens: number | null,
  delivery: { chunks: number; reads: number | null } = { chunks: 0, reads: null }, noCount = 'no usage chunk',
): Pick<DecodeRun, 'ttft_ms' | 'decode_seconds' | 'decode_tokens_per_second' | 'decode_rate_note'> {
  const decodeSeconds = firstContentMs !== null && finishMs !== null ? (finishMs - firstContentMs) / 1000 : null;
  let note: string | null = null;
  if (firstContentMs === null || finishMs === null) note = 'no content chunk or no finish chunk';
  else if (completionTokens === null) note = noCount;
  else if (completionTokens <= 1) note = 'one output token';
  else if (decodeSeconds === null || decodeSeconds <= 0 || delivery.reads === 0) note = 'every token arrived in the first content chunk\'s network read';
  // All the text in the first content chunk: the wait for the finish chunk is not a decode time.
  else if (delivery.reads !== null && delivery.chunks === 0) note = 'every token arrived in the first content chunk';
  // Chunks the server sent apart but the client read together: their arrival times measure the
  // client (a busy event loop) or the network's buffering, not the server's decode.
  else if (delivery.reads !== null && delivery.reads < MIN_READS_PER_CHUNK * delivery.chunks) {
    note = `the ${delivery.chunks} chunks after the first arrived in ${delivery.reads} network reads (fewer than ${MIN_READS_PER_CHUNK} a chunk): delivered in bursts`;
  }
  const rate = note === null ? (completionTokens! - 1) / decodeSeconds! : null;
  return { ttft_ms: firstContentMs, decode_seconds: decodeSeconds, decode_tokens_per_second: rate, decode_rate_note: note };
}

/** A decode rate needs at least this many network reads per chunk after the first (see decodeFigures). */
export const MIN_READS_PER_CHUNK = 0.5;

export async function timedDecode(s: Session, maxTokens: number, prompt = DECODE_PROMPT): Promise<DecodeRun> {
  const st = await s.client.stream('/v1/chat/completions', s.userBody(prompt, { maxTokens, stream: true, includeUsage: true }));
  try {
    requireStatus(st.status, st.errorBody, 'decode stream'); // the "ran" rule (session.ts, replyKind)
  } catch (err) {
    if (!(err instanceof CheckRefused)) throw err;
    return {
      text: '', usage: null, ttft_ms: null, decode_tokens_per_second: null, decode_seconds: null, decode_chunks: 0, decode_reads: null,
      decode_rate_note: 'the server refused the request', timing_scope: TIMING_SCOPE, finish_reason: null, chunks: 0,
      refused: err.message, response: err.response,
    };
  }
  // A stream that cannot be timed did not run: no SSE events at all (a JSON or other body answering
  // stream: true), or no chunk carrying finish_reason (cut off, with or without data: [DONE]).
  if (st.events.length === 0 && !st.done) {
    throw new CheckNotRun(`decode stream: HTTP ${st.status} (${st.contentType || 'no content-type'}) carried no SSE data events: not an event stream`, null);
  }
  const sum = summarizeStream(st.events);
  if (sum.finishReason === null && sum.errors.length === 0) {
    throw new CheckNotRun(`decode stream ended without a chunk carrying finish_reason${st.done ? '' : ' and without data: [DONE]'} (${st.events.length} events)`, st.events.map((e) => e.data));
  }
  if (sum.errors.length > 0) {
    const e = sum.errors[0];
    const what = typeof e === 'object' && e !== null ? 'an error' : 'an event that is not a JSON object';
    throw new CheckNotRun(`decode stream carried ${what}: ${String(JSON.stringify(e)).slice(0, 160)}`, st.events.map((ev) => ev.data));
  }
  const ct = sum.usage?.completion_tokens;
  const n = typeof ct === 'number' && Number.isInteger(ct) && ct >= 0 ? ct : null;
  // Name what is wrong: no usage chunk at all, or a usage whose completion_tokens is missing or not a count.
  const noCount = sum.usage === null ? 'no usage chunk'
    : ct === undefined ? 'the usage chunk has no completion_tokens'
      : `usage.completion_tokens is ${JSON.stringify(ct)}, not a whole number`;
  return {
    text: sum.text,
    usage: sum.usage,
    ...decodeFigures(sum.firstContentMs, sum.finishMs, n, { chunks: sum.decodeChunks, reads: sum.decodeReads }, noCount),
    decode_chunks: sum.decodeChunks,
    decode_reads: sum.decodeReads,
    timing_scope: TIMING_SCOPE,
    finish_reason: sum.finishReason,
    chunks: st.events.length,
    stream_done: st.done,
    ...(sum.tokenIds ? { token_ids: sum.tokenIds } : {}),
  };
}

export function median(xs: readonly number[]): number | null {
  if (xs.length === 0) return null;
  const a = [...xs].sort((x, y) => x - y);
  const m = Math.floor(a.length / 2);
  return a.length % 2 ? a[m]! : (a[m - 1]! + a[m]!) / 2;
}
