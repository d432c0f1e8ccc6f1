// POST /v1/chat/completions and POST /v1/completions, as the OpenAI API (and vLLM's extensions)
// define them, streamed or not. Streams: one `id`; chat's first chunk carries the role alone (no
// content, no logprobs, as OpenAI and vLLM send it), written together with the first token's chunk
// (nothing is sent before prefill ends); one chunk per engine step; a final chunk with
// finish_reason and no content; the usage chunk (`choices: []`) when asked; `data: [DONE]`.
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { TokenLogprobs } from '../engine/types.js';
import { openaiChatInput, renderChat } from './chat-request.js';
import type { ServeContext } from './context.js';
import { badRequest, errorBody, toApiError } from './errors.js';
import { apiFinishReason as finishReason, codePoints, type GenerationParams, type GenerationResult, type StepDelta } from './generation.js';
import { checkModel } from './model.js';
import { commonParams, encodePrompt, rejectUnsupported, resolveMaxTokens } from './request-params.js';
import { CHAT_BODY, COMPLETION_BODY } from './schemas.js';
import { SseStream } from './sse.js';
import type { ToolCall } from './tool-calls.js';

type Json = Record<string, unknown>;

const hexId = () => randomBytes(8).toString('hex');

export function usageOf(r: GenerationResult): Json {
  return {
    prompt_tokens: r.promptTokens,
    completion_tokens: r.tokens.length,
    total_tokens: r.promptTokens + r.tokens.length,
    prompt_tokens_details: { cached_tokens: r.cachedPromptTokens },
  };
}

function chatLogprobs(ctx: ServeContext, tokens: readonly number[], lps: readonly TokenLogprobs[]): Json {
  const piece = (id: number, logprob: number) => {
    const p = ctx.model.text.tokenPiece(id);
    return { token: p.text, logprob, bytes: p.bytes };
  };
  return {
    content: lps.map((l, i) => ({ ...piece(tokens[i]!, l.logprob), top_logprobs: l.top.map((t) => piece(t.token, t.logprob)) })),
  };
}

/**
 * The completions API's logprobs. `tokens`: each token decoded alone (a token ending mid-character
 * shows U+FFFD for it); `text_offset`: where the token's text starts in `text`, in code points, as the
 * output pipeline assembled it (`offsets`, from the generation, after `base` characters of echo): a
 * token that ends mid-character has the offset of that character, as has the token that completes it.
 */
function completionLogprobs(ctx: ServeContext, tokens: readonly number[], lps: readonly TokenLogprobs[], offsets: readonly number[], base: number): Json {
  return {
    tokens: tokens.slice(0, lps.length).map((t) => ctx.model.text.tokenPiece(t).text),
    token_logprobs: lps.map((l) => l.logprob),
    top_logprobs: lps.map((l) => Object.fromEntries(l.top.map((t) => [ctx.model.text.tokenPiece(t.token).text, t.logprob]))),
    text_offset: lps.map((_, i) => base + offsets[i]!),
  };
}

function toolCallsOut(calls: readonly ToolCall[], base = 0, indexed = false): Json[] {
  return calls.map((c, k) => ({
    ...(indexed ? { index: base + k } : {}),
    id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments },
  }));
}

/** Sends an error response in the OpenAI shape (before a stream started). */
function sendError(reply: FastifyReply, err: unknown): FastifyReply {
  const e = toApiError(err);
  return reply.code(e.status).send(errorBody('openai', e));
}

export function registerOpenAIRoutes(app: FastifyInstance, ctx: ServeContext): void {
  app.post('/v1/chat/completions', { schema: { body: CHAT_BODY } }, (req, reply) => chat(ctx, req, reply));
  app.post('/v1/completions', { schema: { body: COMPLETION_BODY } }, (req, reply) => completions(ctx, req, reply));
}

async function chat(ctx: ServeContext, req: FastifyRequest, reply: FastifyReply): Promise<unknown> {
  const startedAt = performance.now();
  const body = req.body as Json;
  ctx.requireEngine();
  checkModel(ctx.model, body.model);
  rejectUnsupported(body, 'chat');
  const rendered = await renderChat(ctx.model, openaiChatInput(body));
  const maxParam = body.max_completion_tokens !== undefined && body.max_completion_tokens !== null ? 'max_completion_tokens' : 'max_tokens';
  const maxTokens = resolveMaxTokens(ctx.model, rendered.ids.length, body[maxParam], maxParam, 'rest');
  const common = commonParams(ctx.model, body, maxTokens);
  const params: GenerationParams = {
    prompt: rendered.ids, ...common, eosTokens: ctx.model.eosTokenIds,
    ...(body.logprobs === true ? { logprobs: (body.top_logprobs as number | null | undefined) ?? 0 } : {}),
    reasoning: { startsInReasoning: rendered.startsInReasoning },
    ...(rendered.tools
      ? { tools: { defs: rendered.tools.defs, prefix: rendered.tools.prefix, idPrefix: 'chatcmpl-tool-', onlyFirst: body.parallel_tool_calls === false } }
      : {}),
  };
  const id = `chatcmpl-${hexId()}`;
  const created = Math.floor(Date.now() / 1000);
  const model = ctx.model.name;
  const returnIds = body.return_token_ids === true;

  if (body.stream !== true) {
    const { result: r, failure } = await ctx.complete(params, req, reply);
    if (failure) return sendError(reply, failure);
    const message: Json = {
      role: 'assistant',
      content: r.toolCalls.length && !r.content ? null : r.content,
      reasoning_content: r.reasoning || null,
      tool_calls: toolCallsOut(r.toolCalls),
    };
    return {
      id, object: 'chat.completion', created, model,
      choices: [{
        index: 0, message,
        logprobs: r.logprobs ? chatLogprobs(ctx, r.tokens, r.logprobs) : null,
        finish_reason: finishReason(r), stop_reason: r.stopReason,
        ...(returnIds ? { token_ids: r.tokens } : {}),
      }],
      usage: usageOf(r),
      ...(returnIds ? { prompt_token_ids: rendered.ids } : {}),
    };
  }

  const opts = (body.stream_options as Json | null | undefined) ?? {};
  const includeUsage = opts.include_usage === true;
  const continuous = includeUsage && opts.continuous_usage_stats === true;
  let sse: SseStream | null = null;
  let first = true;
  let toolIndex = 0;
  let produced = 0;
  const chunk = (choice: Json, usage?: Json | null): Json => ({
    id, object: 'chat.completion.chunk', created, model, choices: [choice],
    ...(includeUsage ? { usage: usage ?? null } : {}),
  });
  const running = () => ({ prompt_tokens: rendered.ids.length, completion_tokens: produced, total_tokens: rendered.ids.length + produced });
  // The first chunk: the role alone, as OpenAI's (a token's logprobs in it would be counted twice by the
  // SDK's stream helper, which reads logprobs from every chunk); vLLM's prompt_token_ids ride on it.
  const roleChunk = (): Json => ({
    ...chunk({ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }, continuous ? running() : null),
    ...(returnIds ? { prompt_token_ids: rendered.ids } : {}),
  });
  const onDelta = (d: StepDelta) => {
    if (!sse || sse.closed) return;
    const head = first ? [roleChunk()] : [];
    first = false;
    produced += d.tokens.length;
    const delta: Json = {};
    if (d.reasoning) delta.reasoning_content = d.reasoning;
    if (d.content) delta.content = d.content;
    if (d.toolCalls.length) {
      delta.tool_calls = toolCallsOut(d.toolCalls, toolIndex, true);
      toolIndex += d.toolCalls.length;
    }
    if (!('content' in delta) && !('reasoning_content' in delta) && !('tool_calls' in delta)) delta.content = '';
    sse.data(...head, chunk({
      index: 0, delta,
      logprobs: d.logprobs ? chatLogprobs(ctx, d.tokens, d.logprobs) : null,
      finish_reason: null,
      ...(returnIds ? { token_ids: d.tokens } : {}),
    }, continuous ? running() : null));
  };
  const gen = ctx.start(params, reply, onDelta);
  sse = new SseStream(reply);
  const r = await gen.done;
  if (!sse.closed) {
    const failure = ctx.failureOf(r);
    if (failure) {
      sse.data(errorBody('openai', failure));
    } else {
      const head = first ? [roleChunk()] : []; // no token came: the role chunk still opens the stream
      sse.data(...head, chunk({ index: 0, delta: {}, logprobs: null, finish_reason: finishReason(r), stop_reason: r.stopReason }, continuous ? usageOf(r) : null));
      if (includeUsage) sse.data({ id, object: 'chat.completion.chunk', created, model, choices: [], usage: usageOf(r) });
    }
    sse.line('data: [DONE]');
    sse.end();
  }
  ctx.logRequest({ route: '/v1/chat/completions', status: 200, result: r, startedAt });
  return reply;
}

/** `prompt` -> token ids, and the prompt's text (for echo; token-id prompts are decoded only when asked). */
async function completionPrompt(ctx: ServeContext, prompt: unknown): Promise<{ ids: number[]; text: () => string }> {
  const one = (Array.isArray(prompt) && prompt.length === 1 && (typeof prompt[0] === 'string' || Array.isArray(prompt[0]))) ? prompt[0] : prompt;
  if (Array.isArray(one) && one.some((x) => typeof x !== 'number')) throw badRequest('batched prompts (a list of several prompts) are not supported by this server', 'prompt');
  if (typeof one === 'string') return { ids: await encodePrompt(ctx.model, one, 'prompt'), text: () => one };
  const ids = one as number[];
  const bad = ids.find((t) => t >= ctx.model.vocabSize);
  if (bad !== undefined) throw badRequest(`prompt: token ${bad} is outside the vocabulary (${ctx.model.vocabSize})`, 'prompt');
  return { ids, text: () => ctx.model.text.text(ids) };
}

async function completions(ctx: ServeContext, req: FastifyRequest, reply: FastifyReply): Promise<unknown> {
  const startedAt = performance.now();
  const body = req.body as Json;
  ctx.requireEngine();
  checkModel(ctx.model, body.model);
  rejectUnsupported(body, 'completions');
  const prompt = await completionPrompt(ctx, body.prompt);
  const maxTokens = resolveMaxTokens(ctx.model, prompt.ids.length, body.max_tokens, 'max_tokens', 16, 'prompt');
  const common = commonParams(ctx.model, body, maxTokens);
  const logprobs = typeof body.logprobs === 'number' ? body.logprobs : undefined;
  const params: GenerationParams = {
    prompt: prompt.ids, ...common, eosTokens: ctx.model.eosTokenIds, ...(logprobs !== undefined ? { logprobs } : {}),
  };
  const echo = body.echo === true ? prompt.text() : '';
  const id = `cmpl-${hexId()}`;
  const created = Math.floor(Date.now() / 1000);
  const model = ctx.model.name;
  const returnIds = body.return_token_ids === true;

  if (body.stream !== true) {
    const { result: r, failure } = await ctx.complete(params, req, reply);
    if (failure) return sendError(reply, failure);
    return {
      id, object: 'text_completion', created, model,
      choices: [{
        index: 0, text: echo + r.content,
        logprobs: r.logprobs ? completionLogprobs(ctx, r.tokens, r.logprobs, r.textOffsets ?? [], codePoints(echo)) : null,
        finish_reason: finishReason(r), stop_reason: r.stopReason,
        ...(returnIds ? { token_ids: r.tokens, prompt_token_ids: prompt.ids } : {}),
      }],
      usage: usageOf(r),
    };
  }

  const opts = (body.stream_options as Json | null | undefined) ?? {};
  const includeUsage = opts.include_usage === true;
  const continuous = includeUsage && opts.continuous_usage_stats === true;
  let sse: SseStream | null = null;
  let first = true;
  const base = codePoints(echo);
  let produced = 0;
  const chunk = (choice: Json, usage?: Json | null): Json => ({
    id, object: 'text_completion', created, model, choices: [choice], ...(includeUsage ? { usage: usage ?? null } : {}),
  });
  const onDelta = (d: StepDelta) => {
    if (!sse || sse.closed) return;
    produced += d.tokens.length;
    const text = (first ? echo : '') + d.content;
    const lp = d.logprobs ? completionLogprobs(ctx, d.tokens, d.logprobs, d.textOffsets ?? [], base) : null;
    sse.data(chunk({
      index: 0, text, logprobs: lp, finish_reason: null,
      ...(returnIds ? { token_ids: d.tokens, ...(first ? { prompt_token_ids: prompt.ids } : {}) } : {}),
    }, continuous ? { prompt_tokens: prompt.ids.length, completion_tokens: produced, total_tokens: prompt.ids.length + produced } : null));
    first = false;
  };
  const gen = ctx.start(params, reply, onDelta);
  sse = new SseStream(reply);
  const r = await gen.done;
  if (!sse.closed) {
    const failure = ctx.failureOf(r);
    if (failure) {
      sse.data(errorBody('openai', failure));
    } else {
      sse.data(chunk({ index: 0, text: first ? echo : '', logprobs: null, finish_reason: finishReason(r), stop_reason: r.stopReason }, continuous ? usageOf(r) : null));
      if (includeUsage) sse.data({ id, object: 'text_completion', created, model, choices: [], usage: usageOf(r) });
    }
    sse.line('data: [DONE]');
    sse.end();
  }
  ctx.logRequest({ route: '/v1/completions', status: 200, result: r, startedAt });
  return reply;
}
