// The wire checks every OpenAI-compatible server owes its clients, whatever its model: a stop
// sequence, max_tokens truncation, streamed = non-streamed text, usage with include_usage, a 4xx
// error object for a malformed request, and a Unicode round trip through /tokenize + /detokenize
// (where the server has them; pass null, "skipped", where it has not). Each is built so that it
// holds on any deterministic server, random weights included: the stop string is taken from the
// server's own greedy answer, not guessed.
import { isJsonObject } from '../util/json.js';
import { firstChoice, summarizeStream, type Json } from './http-client.js';
import { CheckNotRun, errorMessage, ok, requireAnswer, requireStatus, runCheck, SERVICE_REFUSED_STATUSES, type CheckResult, type Session } from './session.js';

const STOP_PROMPT = 'Write the lowercase English alphabet, the letters separated by single spaces.';
const LONG_PROMPT = 'Write a long story about a lighthouse keeper and the ships she watches over.';
const STREAM_PROMPT = 'Describe a harbour at dawn in two sentences.';
export const UNICODE_TEXT = 'Grüße aus Köln, ¿qué tal? Ça va — naïve café, 東京と大阪, 한국어, Ελληνικά, עברית, 🚀🌍✨ 𝄞 ½ Ω ∑ ≠ ∞';

function content(body: unknown): string | null {
  const c = (firstChoice(body)?.message as Json | undefined)?.content;
  return typeof c === 'string' ? c : null;
}

/**
 * A stop string from a reference text: `len` characters from its middle (not all whitespace) whose
 * first occurrence has some text (not all whitespace) before it, and that text. Null when there is
 * none (the text too short): an empty reply must never be what the stop is expected to leave.
 */
export function stopFromReference(text: string, len = 3): { stop: string; before: string } | null {
  if (text.length < 2 * len) return null;
  const chars = Array.from(text); // whole code points, never half a surrogate pair
  for (let p = Math.floor(chars.length / 2); p + len <= chars.length; p++) {
    const stop = chars.slice(p, p + len).join('');
    if (stop.trim() === '') continue;
    const before = text.slice(0, text.indexOf(stop));
    if (before.trim() === '') continue;
    return { stop, before };
  }
  return null;
}

async function stopSequence(s: Session): Promise<CheckResult> {
  return runCheck('protocol-stop-sequence', async () => {
    const ref = await s.chat(s.userBody(STOP_PROMPT, { maxTokens: 32 }));
    const refText = content(ref.body) ?? '';
    const pick = stopFromReference(refText);
    // No stop string to test (a reply too short, or one repeating a few characters, as random weights
    // write): the model's answer, not the server's handling of stop, so the check cannot decide.
    if (!pick) {
      const why = refText.length < 6 ? 'is too short to take a stop string from' : 'has no 3 characters whose first occurrence follows other text';
      return { pass: null, response: ref.body, skipped: `the greedy reference answer (${JSON.stringify(refText)}) ${why}: no stop string to test` };
    }
    const r = await s.chat(s.userBody(STOP_PROMPT, { maxTokens: 32, stop: [pick.stop] }));
    const text = content(r.body) ?? '';
    const finish = firstChoice(r.body)?.finish_reason;
    // Greedy on one server: the same request with a stop string must give the reference answer cut
    // just before the string's first occurrence (an empty or shortened reply is not a stop).
    const equal = text === pick.before;
    const pass = finish === 'stop' && equal;
    return {
      pass, response: r.body, stop: pick.stop, reference_response: ref.body, expected_text: pick.before,
      text_equals_reference_before_stop: equal,
      reason: pass ? `finish_reason stop; the text is the reference answer cut before ${JSON.stringify(pick.stop)}`
        : `expected finish_reason stop and the reference answer cut before ${JSON.stringify(pick.stop)} (${JSON.stringify(pick.before.slice(0, 60))}); got finish_reason ${JSON.stringify(finish)}, text ${JSON.stringify(text.slice(0, 80))}`,
    };
  });
}

async function maxTokens(s: Session, n = 5): Promise<CheckResult> {
  return runCheck('protocol-max-tokens', async () => {
    const r = await s.chat(s.userBody(LONG_PROMPT, { maxTokens: n }));
    const c = firstChoice(r.body);
    const usage = (r.body as Json).usage as Json | undefined;
    const ids = Array.isArray(c?.token_ids) ? (c!.token_ids as number[]).length : null;
    const pass = c?.finish_reason === 'length' && usage?.completion_tokens === n && (ids === null || ids === n);
    return {
      pass, response: r.body, max_tokens: n,
      reason: pass ? `finish_reason length, ${n} completion tokens`
        : `expected finish_reason length and ${n} completion tokens; got ${JSON.stringify(c?.finish_reason)}, usage.completion_tokens ${JSON.stringify(usage?.completion_tokens)}${ids !== null ? `, ${ids} token ids` : ''}`,
    };
  });
}

async function streamEqualsNonStreamed(s: Session): Promise<CheckResult> {
  return runCheck('protocol-stream-equals-non-streamed', async () => {
    const plain = await s.chat(s.userBody(STREAM_PROMPT, { maxTokens: 24 }));
    const st = await s.client.stream('/v1/chat/completions', s.userBody(STREAM_PROMPT, { maxTokens: 24, stream: true }));
    requireStatus(st.status, st.errorBody, 'stream');
    const sum = summarizeStream(st.events);
    const text = content(plain.body);
    const finish = firstChoice(plain.body)?.finish_reason;
    const pass = st.done && text !== null && sum.text === text && sum.finishReason === finish;
    return {
      pass, response: plain.body, stream_events: st.events.map((e) => e.data), streamed_text: sum.text,
      reason: pass ? 'the streamed text and finish reason equal the non-streamed ones'
        : !st.done ? 'the stream did not end with data: [DONE]'
            : `streamed ${JSON.stringify(sum.text.slice(0, 60))} (${sum.finishReason}) vs non-streamed ${JSON.stringify((text ?? '').slice(0, 60))} (${String(finish)})`,
    };
  });
}

const USAGE_MAX_TOKENS = 8;

/**
 * Whether a stream's usage.completion_tokens agrees with what was streamed: the token ids' count
 * when the chunks carried ids; max_tokens when it stopped for length; else at least the chunks
 * that carried text (a chunk carries at least one token) and at most max_tokens. Null when it agrees,
 * else why not.
 */
export function usageDisagreement(
  completionTokens: number, streamed: { tokenIds: number[] | null; finishReason: string | null; textChunks: number }, maxTokens: number,
): string | null {
  if (streamed.tokenIds !== null && completionTokens !== streamed.tokenIds.length) {
    return `usage.completion_tokens ${completionTokens}, but ${streamed.tokenIds.length} token ids were streamed`;
  }
  if (streamed.finishReason === 'length' && completionTokens !== maxTokens) {
    return `usage.completion_tokens ${completionTokens}, but the stream stopped for length at max_tokens ${maxTokens}`;
  }
  if (completionTokens > maxTokens) return `usage.completion_tokens ${completionTokens} exceeds max_tokens ${maxTokens}`;
  if (completionTokens < streamed.textChunks) {
    return `usage.completion_tokens ${completionTokens}, but ${streamed.textChunks} chunks carried text (each at least one token)`;
  }
  return null;
}

async function includeUsage(s: Session): Promise<CheckResult> {
  return runCheck('protocol-stream-usage', async () => {
    const st = await s.client.stream('/v1/chat/completions', s.userBody(STREAM_PROMPT, { maxTokens: USAGE_MAX_TOKENS, stream: true, includeUsage: true }));
    requireStatus(st.status, st.errorBody, 'stream');
    const data = st.events.map((e) => e.data);
    const lastData = data[data.length - 1];
    // The last event must be the usage chunk: an object (a `data: null` or other non-object event there fails the check).
    const last = isJsonObject(lastData) ? lastData : undefined;
    const u = (typeof last?.usage === 'object' && last.usage !== null ? last.usage : null) as Json | null;
    const int = (x: unknown) => Number.isInteger(x) && (x as number) >= 0;
    const usageChunk = last !== undefined && Array.isArray(last.choices) && last.choices.length === 0 && u !== null;
    const consistent = u !== null && int(u.prompt_tokens) && (u.prompt_tokens as number) > 0 && int(u.completion_tokens) && int(u.total_tokens) &&
      (u.total_tokens as number) === (u.prompt_tokens as number) + (u.completion_tokens as number);
    // The count must agree with the tokens the stream carried.
    const sum = summarizeStream(st.events);
    const textChunks = st.events.filter((e) => {
      const c = firstChoice(e.data);
      const delta = c?.delta as Json | undefined;
      return (typeof delta?.content === 'string' && delta.content !== '') || (typeof c?.text === 'string' && c.text !== '');
    }).length;
    const disagreement = consistent ? usageDisagreement(u!.completion_tokens as number, { tokenIds: sum.tokenIds, finishReason: sum.finishReason, textChunks }, USAGE_MAX_TOKENS) : null;
    const pass = usageChunk && consistent && disagreement === null;
    return {
      pass, response: st.events.map((e) => e.data), usage: u, streamed_text_chunks: textChunks, streamed_token_ids: sum.tokenIds?.length ?? null,
      finish_reason: sum.finishReason,
      reason: pass ? `a final chunk with choices [] carries usage (${String(u!.prompt_tokens)} + ${String(u!.completion_tokens)} = ${String(u!.total_tokens)}), in agreement with the streamed tokens`
        : lastData !== undefined && last === undefined ? `the stream's last event is ${JSON.stringify(lastData).slice(0, 60)}, not a chunk with choices [] and usage`
          : !usageChunk ? 'no final chunk with choices [] and usage (stream_options.include_usage ignored?)'
            : !consistent ? `usage is not consistent: ${JSON.stringify(u)}`
              : `usage disagrees with the stream: ${disagreement!}`,
    };
  });
}

async function malformed(s: Session): Promise<CheckResult> {
  return runCheck('protocol-malformed-request', async () => {
    const badJson = await s.client.post('/v1/chat/completions', `{"model": ${JSON.stringify(s.model)}, "messages": [{"role": "user", "content": "hi"`);
    const badType = await s.client.post('/v1/chat/completions', { model: s.model, messages: 'this should be a list', max_tokens: 4 });
    // A refusal of service says nothing of how malformed requests are handled: not run. (A 5xx is
    // the finding this check looks for, so it is judged here, not left not run.)
    for (const r of [badJson, badType]) {
      if (SERVICE_REFUSED_STATUSES.has(r.status)) throw new CheckNotRun(`HTTP ${r.status}: ${errorMessage(r.body, r.text)}`, r.body ?? r.text);
    }
    const shaped = (r: { status: number; body: unknown }) => r.status >= 400 && r.status < 500 &&
      typeof (r.body as Json | null)?.error === 'object' && (r.body as Json).error !== null &&
      typeof ((r.body as Json).error as Json).message === 'string';
    const pass = shaped(badJson) && shaped(badType);
    return {
      pass, response: { malformed_json: badJson.body ?? badJson.text, messages_not_a_list: badType.body ?? badType.text },
      statuses: [badJson.status, badType.status],
      reason: pass ? `HTTP ${badJson.status} and ${badType.status}, each with an error object`
        : `expected a 4xx with {"error": {"message": ...}} for malformed JSON and for messages that are not a list; got HTTP ${badJson.status} and ${badType.status}`,
    };
  });
}

async function unicodeRoundTrip(s: Session): Promise<CheckResult> {
  return runCheck('protocol-unicode-roundtrip', async () => {
    // vLLM's shape ({prompt} -> {tokens}), then llama.cpp's ({content}), which answers vLLM's with no tokens.
    let tok = await s.client.post('/tokenize', { model: s.model, prompt: UNICODE_TEXT, add_special_tokens: false });
    if (tok.status === 404 || tok.status === 405) {
      return { pass: null, response: tok.body ?? tok.text, skipped: `the server has no /tokenize (HTTP ${tok.status})` };
    }
    const none = (t: typeof tok) => !ok(t) || (Array.isArray((t.body as Json | null)?.tokens) && ((t.body as Json).tokens as unknown[]).length === 0);
    if (none(tok)) {
      const llama = await s.client.post('/tokenize', { content: UNICODE_TEXT, add_special: false });
      if (!none(llama)) tok = llama;
    }
    requireAnswer(tok, '/tokenize');
    const tokens = (tok.body as Json).tokens;
    if (!Array.isArray(tokens)) return { pass: false, response: tok.body, reason: '/tokenize answered without a tokens list' };
    const det = await s.client.post('/detokenize', { model: s.model, tokens });
    if (det.status === 404 || det.status === 405) {
      return { pass: null, response: det.body ?? det.text, skipped: `the server has /tokenize but no /detokenize (HTTP ${det.status})` };
    }
    requireAnswer(det, '/detokenize');
    const body = det.body as Json;
    const back = typeof body.prompt === 'string' ? body.prompt : body.content; // vLLM's field, else llama.cpp's
    const pass = back === UNICODE_TEXT;
    return {
      pass, response: { tokenize: tok.body, detokenize: det.body }, text: UNICODE_TEXT, tokens: tokens.length,
      reason: pass ? `${tokens.length} tokens decode to the same text` : `decoded to ${JSON.stringify(back)}`,
    };
  });
}

/** The protocol checks' ids, in the order they run (a setup that failed lists them all as not run). */
export const PROTOCOL_CHECK_IDS = [
  'protocol-stop-sequence', 'protocol-max-tokens', 'protocol-stream-equals-non-streamed', 'protocol-stream-usage',
  'protocol-malformed-request', 'protocol-unicode-roundtrip',
] as const;

export async function runProtocol(s: Session): Promise<CheckResult[]> {
  const out: CheckResult[] = [];
  for (const f of [stopSequence, maxTokens, streamEqualsNonStreamed, includeUsage, malformed, unicodeRoundTrip]) out.push(await f(s));
  if (out.some((r, i) => r.id !== PROTOCOL_CHECK_IDS[i])) throw new Error('internal: PROTOCOL_CHECK_IDS is not the protocol checks\' order');
  return out;
}
