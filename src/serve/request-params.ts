// Request fields -> generation parameters, with the checks every route shares: lengths against the
// engine's max_seq (messages give both numbers), sampling defaults, stops, and the fields this server
// cannot honour (refused with a 400 that names them, never silently ignored).
import { randomInt } from 'node:crypto';
import { badRequest, unsupported } from './errors.js';
import type { GenerationParams } from './generation.js';
import type { ServeModel } from './model.js';

type Json = Record<string, unknown>;

/** The generation parameters every route reads from its request the same way. */
export type CommonParams = Pick<GenerationParams,
  'maxTokens' | 'minTokens' | 'temperature' | 'topP' | 'topK' | 'seed' | 'stop' | 'stopTokenIds' | 'ignoreEos'>;

const given = (v: unknown) => v !== undefined && v !== null;

/** The prompt must leave room for at least one generated token. */
export function checkPromptLength(model: ServeModel, promptTokens: number, param = 'messages'): void {
  if (promptTokens === 0) throw badRequest('the prompt is empty', param);
  if (promptTokens >= model.maxSeq) {
    throw badRequest(
      `the prompt is ${promptTokens} tokens, but this server's maximum context length (--max-seq) is ${model.maxSeq} tokens ` +
      '(prompt and output together)', param);
  }
}

/**
 * A prompt's text -> its token ids. `bounded` (the generation routes): a text that cannot fit in
 * --max-seq tokens is refused with the 400 naming --max-seq, before it is tokenized whole when a
 * lower bound on its count already says so (prompt-bound.ts); the count itself is checked by
 * checkPromptLength. Unbounded (/tokenize, count_tokens): any length the body limit lets in is
 * counted. Long texts are tokenized off the JS thread (tokenize-pool.ts; docs/serve.md, "Long prompts").
 */
export async function encodePrompt(model: ServeModel, text: string, param: string, bounded = true): Promise<number[]> {
  const bound = bounded ? { maxSeq: model.maxSeq, longestTokenBytes: model.longestTokenBytes, prefixCountable: model.prefixCountable } : null;
  const r = await model.encoder.encode(text, bound);
  if ('tooLong' in r) {
    throw badRequest(
      `the prompt is ${r.tooLong}, but this server's maximum context length (--max-seq) is ${model.maxSeq} tokens (prompt and output together)`, param);
  }
  return r.ids;
}

/** max_tokens: given (>= 1, within max_seq together with the prompt), or all the room the prompt leaves. */
export function resolveMaxTokens(
  model: ServeModel, promptTokens: number, requested: unknown, param: string, dflt: number | 'rest', promptParam = 'messages',
): number {
  checkPromptLength(model, promptTokens, promptParam);
  if (!given(requested)) return dflt === 'rest' ? model.maxSeq - promptTokens : Math.min(dflt, model.maxSeq - promptTokens);
  const n = requested as number;
  if (n < 1) throw badRequest(`${param} must be at least 1, got ${n}`, param);
  if (n > model.maxSeq) throw badRequest(`${param} ${n} is more than this server's maximum context length (--max-seq) of ${model.maxSeq} tokens`, param);
  if (promptTokens + n > model.maxSeq) {
    throw badRequest(
      `this server's maximum context length (--max-seq) is ${model.maxSeq} tokens, but the request needs ${promptTokens + n} ` +
      `(${promptTokens} in the prompt, ${n} for the output)`, param);
  }
  return n;
}

export function stopList(v: unknown): string[] {
  if (!given(v)) return [];
  return (typeof v === 'string' ? [v] : (v as string[])).filter((s) => s.length > 0);
}

/** Seeds are taken modulo 2^53 (a negative one wraps): every seed the engine's stream takes. */
const SEED_BITS = 53;

/**
 * Sampling: the request's values, else the checkpoint's defaults (generation_config.json). A top_k
 * of -1 (vLLM's "all"), 0, or at least the vocabulary samples from the whole vocabulary (0).
 */
export function sampling(model: ServeModel, body: Json): Pick<CommonParams, 'temperature' | 'topP' | 'topK' | 'seed'> {
  const topK = given(body.top_k) ? (body.top_k as number) : model.defaults.topK;
  return {
    temperature: given(body.temperature) ? (body.temperature as number) : model.defaults.temperature,
    topP: given(body.top_p) ? (body.top_p as number) : model.defaults.topP,
    topK: topK < 0 || topK >= model.vocabSize ? 0 : topK,
    seed: given(body.seed) ? Number(BigInt.asUintN(SEED_BITS, BigInt(body.seed as number))) : randomInt(0, 2 ** 48 - 1),
  };
}

/** Fields of the OpenAI-style routes this server does not implement: each refused by name unless at its no-op value. */
export function rejectUnsupported(body: Json, route: 'chat' | 'completions'): void {
  if (given(body.n) && body.n !== 1) {
    if ((body.n as number) < 1) throw badRequest(`n must be at least 1, got ${String(body.n)}`, 'n');
    throw unsupported('n', 'n > 1 (several choices per request)');
  }
  if (given(body.best_of) && body.best_of !== 1) throw unsupported('best_of', 'best_of > 1');
  if (given(body.presence_penalty) && body.presence_penalty !== 0) throw unsupported('presence_penalty', 'presence_penalty');
  if (given(body.frequency_penalty) && body.frequency_penalty !== 0) throw unsupported('frequency_penalty', 'frequency_penalty');
  if (given(body.repetition_penalty) && body.repetition_penalty !== 1) throw unsupported('repetition_penalty', 'repetition_penalty');
  if (given(body.min_p) && body.min_p !== 0) throw unsupported('min_p', 'min_p');
  if (given(body.logit_bias) && Object.keys(body.logit_bias as Json).length > 0) throw unsupported('logit_bias', 'logit_bias');
  if (body.include_stop_str_in_output === true) throw unsupported('include_stop_str_in_output', 'include_stop_str_in_output');
  if (body.skip_special_tokens === false) throw unsupported('skip_special_tokens', 'skip_special_tokens: false');
  if (given(body.stream_options) && body.stream !== true) throw badRequest('stream_options is only allowed with stream: true', 'stream_options');
  if (route === 'chat') {
    const rf = body.response_format as Json | null | undefined;
    if (rf && rf.type !== 'text') throw unsupported('response_format', `response_format '${String(rf.type)}' (only 'text')`);
    for (const f of ['reasoning_effort', 'audio', 'prediction', 'web_search_options'] as const) {
      if (given(body[f])) throw unsupported(f, f);
    }
    if (given(body.modalities) && (body.modalities as unknown[]).some((m) => m !== 'text')) throw unsupported('modalities', 'output modalities other than text');
    if (given(body.top_logprobs) && body.logprobs !== true) throw badRequest('top_logprobs requires logprobs: true', 'top_logprobs');
    if (given(body.top_logprobs) && (body.top_logprobs as number) > 20) throw badRequest('top_logprobs must be at most 20', 'top_logprobs');
  } else {
    if (given(body.suffix) && body.suffix !== '') throw unsupported('suffix', 'suffix');
    if (given(body.logprobs) && (body.logprobs as number) > 20) throw badRequest('logprobs must be at most 20', 'logprobs');
    if (body.echo === true && given(body.logprobs)) throw unsupported('logprobs', 'logprobs together with echo (prompt logprobs)');
  }
}

export function commonParams(model: ServeModel, body: Json, maxTokens: number): CommonParams {
  const minTokens = given(body.min_tokens) ? (body.min_tokens as number) : 0;
  if (minTokens > maxTokens) throw badRequest(`min_tokens ${minTokens} is more than max_tokens ${maxTokens}`, 'min_tokens');
  const stopTokenIds = (body.stop_token_ids as number[] | null | undefined) ?? [];
  const bad = stopTokenIds.find((t) => t >= model.vocabSize);
  if (bad !== undefined) throw badRequest(`stop_token_ids: ${bad} is outside the vocabulary (${model.vocabSize})`, 'stop_token_ids');
  return {
    maxTokens, minTokens, ...sampling(model, body), stop: stopList(body.stop), stopTokenIds, ignoreEos: body.ignore_eos === true,
  };
}
