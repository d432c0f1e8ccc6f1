// GET /health, GET /version, GET /v1/models, POST /tokenize and /detokenize (vLLM's shapes), GET /metrics.
import type { FastifyInstance } from 'fastify';
import { TOOL_VERSION } from '../util/version.js';
import { openaiChatInput, renderChat } from './chat-request.js';
import type { ServeContext } from './context.js';
import { ApiError, badRequest } from './errors.js';
import { checkModel } from './model.js';
import { encodePrompt } from './request-params.js';
import { DETOKENIZE_BODY, TOKENIZE_BODY } from './schemas.js';

type Json = Record<string, unknown>;

export function registerMiscRoutes(app: FastifyInstance, ctx: ServeContext): void {
  app.get('/health', async (_req, reply) => {
    if (ctx.closing) return reply.code(503).send({ status: 'shutting down' });
    if (!ctx.engine) return reply.code(503).send({ status: 'loading' });
    return { status: 'ok' };
  });

  // vLLM's shape ({version}), plus the server's name, so a benchmark client can say what it measured.
  app.get('/version', async () => ({ version: TOOL_VERSION, server: 'lumen-bench serve' }));

  // Clients probe /v1/models for readiness: like every API route it answers 503 until the model is loaded.
  app.get('/v1/models', async () => (ctx.requireEngine(), {
    object: 'list',
    data: [{
      id: ctx.model.name, object: 'model', created: ctx.model.created, owned_by: 'lumen-bench', root: ctx.model.root,
      parent: null, max_model_len: ctx.model.maxSeq,
    }],
  }));

  app.post('/tokenize', { schema: { body: TOKENIZE_BODY } }, async (req) => {
    ctx.requireEngine();
    const body = req.body as Json;
    checkModel(ctx.model, body.model);
    let ids: number[];
    if (body.messages !== undefined && body.messages !== null) {
      if (body.prompt !== undefined) throw badRequest('give either prompt or messages, not both', 'prompt');
      ids = (await renderChat(ctx.model, openaiChatInput(body), false)).ids;
    } else if (typeof body.prompt === 'string') {
      ids = await encodePrompt(ctx.model, body.prompt, 'prompt', false);
    } else {
      throw badRequest('give prompt (text) or messages', 'prompt');
    }
    return {
      count: ids.length, max_model_len: ctx.model.maxSeq, tokens: ids,
      token_strs: body.return_token_strs === true ? ids.map((t) => ctx.model.tokenizer.idToToken(t) ?? '') : null,
    };
  });

  app.post('/detokenize', { schema: { body: DETOKENIZE_BODY } }, async (req) => {
    ctx.requireEngine();
    const body = req.body as Json;
    checkModel(ctx.model, body.model);
    const ids = body.tokens as number[];
    const bad = ids.find((t) => t >= ctx.model.vocabSize);
    if (bad !== undefined) throw badRequest(`tokens: ${bad} is outside the vocabulary (${ctx.model.vocabSize})`, 'tokens');
    return { prompt: ctx.model.tokenizer.decode(ids) };
  });

  app.get('/metrics', async (_req, reply) => {
    if (!ctx.metrics) throw new ApiError(503, 'the model is still loading', 'unavailable');
    const text = await ctx.metrics.text();
    return reply.type(ctx.metrics.contentType).send(text);
  });
}
