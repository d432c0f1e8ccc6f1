// POST /v1/messages and /v1/messages/count_tokens, as Anthropic's Messages API defines them.
// Output blocks: `thinking` (Qwen3.5's <think> text), `text`, `tool_use` (input as an object). Stream:
// message_start, then per block content_block_start / content_block_delta (text_delta,
// thinking_delta, input_json_delta) / content_block_stop, then message_delta (stop_reason,
// cumulative output_tokens) and message_stop. The first events leave with the first token.
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { anthropicInput, renderChat } from './chat-request.js';
import type { ServeContext } from './context.js';
import { badRequest, errorBody } from './errors.js';
import type { GenerationParams, GenerationResult, StepDelta } from './generation.js';
import { checkModel } from './model.js';
import { commonParams, resolveMaxTokens } from './request-params.js';
import { COUNT_TOKENS_BODY, MESSAGES_BODY } from './schemas.js';
import { SseStream } from './sse.js';
import type { ToolCall } from './tool-calls.js';

type Json = Record<string, unknown>;

function stopReason(r: GenerationResult): { stop_reason: string; stop_sequence: string | null } {
  if (r.finish === 'tool_calls') return { stop_reason: 'tool_use', stop_sequence: null };
  if (r.finish === 'length') return { stop_reason: 'max_tokens', stop_sequence: null };
  if (typeof r.stopReason === 'string') return { stop_reason: 'stop_sequence', stop_sequence: r.stopReason };
  return { stop_reason: 'end_turn', stop_sequence: null };
}

function toolUse(c: ToolCall): Json {
  return { type: 'tool_use', id: c.id, name: c.name, input: JSON.parse(c.arguments) as Json };
}

/** Anthropic's usage: `input_tokens` counts the prompt tokens not read from the cache, so the prompt is
 * input + cache_read + cache_creation (OpenAI's `prompt_tokens` counts them all). */
function usage(r: { promptTokens: number; cachedPromptTokens: number }, outputTokens: number): Json {
  return {
    input_tokens: r.promptTokens - r.cachedPromptTokens, output_tokens: outputTokens,
    cache_creation_input_tokens: 0, cache_read_input_tokens: r.cachedPromptTokens,
  };
}

export function registerAnthropicRoutes(app: FastifyInstance, ctx: ServeContext): void {
  app.post('/v1/messages', { schema: { body: MESSAGES_BODY } }, (req, reply) => messages(ctx, req, reply));
  app.post('/v1/messages/count_tokens', { schema: { body: COUNT_TOKENS_BODY } }, async (req) => {
    ctx.requireEngine();
    const body = req.body as Json;
    checkModel(ctx.model, body.model);
    const rendered = await renderChat(ctx.model, anthropicInput(body), false);
    return { input_tokens: rendered.ids.length };
  });
}

/** The stream's content blocks: one open at a time, switched when the kind of delta changes. */
class BlockWriter {
  private index = -1;
  private open: 'text' | 'thinking' | null = null;

  constructor(private readonly sse: SseStream) {}

  private close(): void {
    if (this.open !== null) this.sse.event('content_block_stop', { type: 'content_block_stop', index: this.index });
    this.open = null;
  }

  private start(kind: 'text' | 'thinking'): void {
    if (this.open === kind) return;
    this.close();
    this.index++;
    this.open = kind;
    const block = kind === 'text' ? { type: 'text', text: '' } : { type: 'thinking', thinking: '', signature: '' };
    this.sse.event('content_block_start', { type: 'content_block_start', index: this.index, content_block: block });
  }

  thinking(text: string): void {
    if (!text) return;
    this.start('thinking');
    this.sse.event('content_block_delta', { type: 'content_block_delta', index: this.index, delta: { type: 'thinking_delta', thinking: text } });
  }

  text(text: string): void {
    if (!text) return;
    this.start('text');
    this.sse.event('content_block_delta', { type: 'content_block_delta', index: this.index, delta: { type: 'text_delta', text } });
  }

  tool(c: ToolCall): void {
    this.close();
    this.index++;
    this.sse.event('content_block_start', { type: 'content_block_start', index: this.index, content_block: { type: 'tool_use', id: c.id, name: c.name, input: {} } });
    this.sse.event('content_block_delta', { type: 'content_block_delta', index: this.index, delta: { type: 'input_json_delta', partial_json: c.arguments } });
    this.sse.event('content_block_stop', { type: 'content_block_stop', index: this.index });
  }

  /** At the end: close the open block (a response with no output at all still has one, empty, text block). */
  finish(): void {
    if (this.index < 0) this.start('text');
    this.close();
  }
}

async function messages(ctx: ServeContext, req: FastifyRequest, reply: FastifyReply): Promise<unknown> {
  const startedAt = performance.now();
  const body = req.body as Json;
  ctx.requireEngine();
  checkModel(ctx.model, body.model);
  if ((body.max_tokens as number) < 1) throw badRequest(`max_tokens must be at least 1, got ${String(body.max_tokens)}`, 'max_tokens');
  const rendered = await renderChat(ctx.model, anthropicInput(body));
  const maxTokens = resolveMaxTokens(ctx.model, rendered.ids.length, body.max_tokens, 'max_tokens', 'rest');
  // Anthropic's own fields only: the OpenAI routes' vLLM extensions (seed, min_tokens,
  // stop_token_ids, ignore_eos) are not in this API's schema, so, like any field not listed, ignored.
  const common = commonParams(ctx.model, { temperature: body.temperature, top_p: body.top_p, top_k: body.top_k, stop: body.stop_sequences }, maxTokens);
  const disableParallel = (body.tool_choice as Json | undefined)?.disable_parallel_tool_use === true;
  const params: GenerationParams = {
    prompt: rendered.ids, ...common, eosTokens: ctx.model.eosTokenIds,
    reasoning: { startsInReasoning: rendered.startsInReasoning },
    ...(rendered.tools ? { tools: { defs: rendered.tools.defs, prefix: rendered.tools.prefix, idPrefix: 'toolu_', onlyFirst: disableParallel } } : {}),
  };
  const id = `msg_${randomBytes(12).toString('hex')}`;
  const model = ctx.model.name;

  if (body.stream !== true) {
    const { result: r, failure } = await ctx.complete(params, req, reply);
    if (failure) return reply.code(failure.status).send(errorBody('anthropic', failure));
    const content: Json[] = [];
    if (r.reasoning) content.push({ type: 'thinking', thinking: r.reasoning, signature: '' });
    if (r.content || (!r.toolCalls.length && !r.reasoning)) content.push({ type: 'text', text: r.content });
    for (const c of r.toolCalls) content.push(toolUse(c));
    return { id, type: 'message', role: 'assistant', model, content, ...stopReason(r), usage: usage(r, r.tokens.length) };
  }

  let sse: SseStream | null = null;
  let blocks: BlockWriter | null = null;
  const startMessage = () => {
    sse!.event('message_start', {
      type: 'message_start',
      message: {
        id, type: 'message', role: 'assistant', model, content: [], stop_reason: null, stop_sequence: null,
        usage: usage({ promptTokens: rendered.ids.length, cachedPromptTokens: 0 }, 0),
      },
    });
    blocks = new BlockWriter(sse!);
  };
  const onDelta = (d: StepDelta) => {
    if (!sse || sse.closed) return;
    if (!blocks) startMessage();
    blocks!.thinking(d.reasoning);
    blocks!.text(d.content);
    for (const c of d.toolCalls) blocks!.tool(c);
  };
  const gen = ctx.start(params, reply, onDelta);
  sse = new SseStream(reply);
  const r = await gen.done;
  if (!sse.closed) {
    const failure = ctx.failureOf(r);
    if (failure) {
      sse.event('error', errorBody('anthropic', failure));
    } else {
      if (!blocks) startMessage();
      blocks!.finish();
      // The whole message's usage (message_start's went out before the cache hit was known).
      sse.event('message_delta', { type: 'message_delta', delta: stopReason(r), usage: usage(r, r.tokens.length) });
      sse.event('message_stop', { type: 'message_stop' });
    }
    sse.end();
  }
  ctx.logRequest({ route: '/v1/messages', status: 200, result: r, startedAt });
  return reply;
}
