// JSON schemas of the request bodies (fastify validates them; a wrong type is a 400 naming the field).
// The fields shared by several routes are written once here. Fields not listed are ignored, as the
// real APIs' clients send many; listed fields this server cannot honour are refused in the route with
// a 400 that says so (see docs/serve.md for the whole table).

const int = (min?: number) => ({ type: ['integer', 'null'], ...(min !== undefined ? { minimum: min } : {}) });
const num = (min?: number, max?: number) => ({
  type: ['number', 'null'], ...(min !== undefined ? { minimum: min } : {}), ...(max !== undefined ? { maximum: max } : {}),
});
const bool = { type: ['boolean', 'null'] };
const str = { type: ['string', 'null'] };
const obj = { type: ['object', 'null'] };
const stringOrList = { anyOf: [{ type: 'string' }, { type: 'array', items: { type: 'string' } }, { type: 'null' }] };

/** Sampling and stopping fields of the OpenAI-style routes (chat and completions) and vLLM's extensions. */
const SAMPLING = {
  model: str,
  max_tokens: int(),
  temperature: num(0),
  top_p: num(0, 1),
  top_k: int(-1),
  min_p: num(0, 1),
  seed: int(),
  stop: stringOrList,
  stop_token_ids: { type: ['array', 'null'], items: { type: 'integer', minimum: 0 } },
  ignore_eos: bool,
  min_tokens: int(0),
  stream: bool,
  stream_options: {
    type: ['object', 'null'],
    properties: { include_usage: bool, continuous_usage_stats: bool },
  },
  n: int(),
  best_of: int(),
  presence_penalty: num(-2, 2),
  frequency_penalty: num(-2, 2),
  repetition_penalty: num(0),
  logit_bias: obj,
  user: str,
  return_token_ids: bool,
  include_stop_str_in_output: bool,
  skip_special_tokens: bool,
};

const TEXT_PART = {
  type: 'object',
  required: ['type'],
  properties: { type: { type: 'string' }, text: { type: 'string' } },
};

const MESSAGE_CONTENT = { anyOf: [{ type: 'string' }, { type: 'null' }, { type: 'array', items: TEXT_PART }] };

const TOOL_CALL = {
  type: 'object',
  required: ['function'],
  properties: {
    id: { type: 'string' },
    type: { type: 'string' },
    function: {
      type: 'object', required: ['name'],
      properties: { name: { type: 'string' }, arguments: { anyOf: [{ type: 'string' }, { type: 'object' }] } },
    },
  },
};

const OPENAI_TOOL = {
  type: 'object',
  required: ['type', 'function'],
  properties: {
    type: { type: 'string', enum: ['function'] },
    function: {
      type: 'object', required: ['name'],
      properties: { name: { type: 'string', minLength: 1 }, description: { type: 'string' }, parameters: { type: 'object' }, strict: bool },
    },
  },
};

export const CHAT_BODY = {
  type: 'object',
  required: ['messages'],
  properties: {
    ...SAMPLING,
    messages: {
      type: 'array', minItems: 1,
      items: {
        type: 'object', required: ['role'],
        properties: {
          role: { type: 'string', enum: ['system', 'developer', 'user', 'assistant', 'tool', 'function'] },
          content: MESSAGE_CONTENT,
          name: str,
          tool_calls: { type: ['array', 'null'], items: TOOL_CALL },
          tool_call_id: str,
          reasoning_content: str,
        },
      },
    },
    max_completion_tokens: int(),
    logprobs: bool,
    top_logprobs: int(0),
    response_format: { type: ['object', 'null'], properties: { type: { type: 'string' } } },
    tools: { type: ['array', 'null'], items: OPENAI_TOOL },
    tool_choice: {
      anyOf: [
        { type: 'string' },
        { type: 'object', required: ['type', 'function'], properties: { type: { type: 'string' }, function: { type: 'object', required: ['name'], properties: { name: { type: 'string' } } } } },
        { type: 'null' },
      ],
    },
    parallel_tool_calls: bool,
    chat_template_kwargs: obj,
    reasoning_effort: str,
    modalities: { type: ['array', 'null'] },
    audio: obj,
    prediction: obj,
    web_search_options: obj,
  },
};

export const COMPLETION_BODY = {
  type: 'object',
  required: ['prompt'],
  properties: {
    ...SAMPLING,
    prompt: {
      anyOf: [
        { type: 'string' },
        { type: 'array', items: { type: 'string' } },
        { type: 'array', items: { type: 'integer', minimum: 0 } },
        { type: 'array', items: { type: 'array', items: { type: 'integer', minimum: 0 } } },
      ],
    },
    echo: bool,
    logprobs: int(0),
    suffix: str,
  },
};

const ANTHROPIC_BLOCK = {
  type: 'object',
  required: ['type'],
  properties: {
    type: { type: 'string' },
    text: { type: 'string' },
    id: { type: 'string' },
    name: { type: 'string' },
    input: { type: 'object' },
    tool_use_id: { type: 'string' },
    content: { anyOf: [{ type: 'string' }, { type: 'array', items: { type: 'object', required: ['type'], properties: { type: { type: 'string' }, text: { type: 'string' } } } }] },
    is_error: { type: 'boolean' },
    thinking: { type: 'string' },
  },
};

const ANTHROPIC_MESSAGES = {
  type: 'array', minItems: 1,
  items: {
    type: 'object', required: ['role', 'content'],
    properties: {
      role: { type: 'string', enum: ['user', 'assistant'] },
      content: { anyOf: [{ type: 'string' }, { type: 'array', items: ANTHROPIC_BLOCK }] },
    },
  },
};

const ANTHROPIC_SYSTEM = { anyOf: [{ type: 'string' }, { type: 'array', items: { type: 'object', required: ['type', 'text'], properties: { type: { type: 'string' }, text: { type: 'string' } } } }] };

const ANTHROPIC_TOOLS = {
  type: 'array',
  items: {
    type: 'object', required: ['name'],
    properties: { name: { type: 'string', minLength: 1 }, description: { type: 'string' }, input_schema: { type: 'object' }, type: { type: 'string' } },
  },
};

const ANTHROPIC_TOOL_CHOICE = {
  type: 'object', required: ['type'],
  properties: { type: { type: 'string', enum: ['auto', 'any', 'tool', 'none'] }, name: { type: 'string' }, disable_parallel_tool_use: { type: 'boolean' } },
};

const ANTHROPIC_THINKING = {
  type: 'object', required: ['type'],
  properties: { type: { type: 'string', enum: ['enabled', 'disabled'] }, budget_tokens: { type: 'integer' } },
};

export const MESSAGES_BODY = {
  type: 'object',
  required: ['model', 'max_tokens', 'messages'],
  properties: {
    model: { type: 'string' },
    max_tokens: { type: 'integer' },
    messages: ANTHROPIC_MESSAGES,
    system: ANTHROPIC_SYSTEM,
    stop_sequences: { type: 'array', items: { type: 'string' } },
    temperature: { type: 'number', minimum: 0, maximum: 1 },
    top_p: { type: 'number', minimum: 0, maximum: 1 },
    top_k: { type: 'integer', minimum: 0 },
    stream: { type: 'boolean' },
    tools: ANTHROPIC_TOOLS,
    tool_choice: ANTHROPIC_TOOL_CHOICE,
    thinking: ANTHROPIC_THINKING,
    metadata: { type: 'object' },
  },
};

export const COUNT_TOKENS_BODY = {
  type: 'object',
  required: ['model', 'messages'],
  properties: {
    model: { type: 'string' },
    messages: ANTHROPIC_MESSAGES,
    system: ANTHROPIC_SYSTEM,
    tools: ANTHROPIC_TOOLS,
    tool_choice: ANTHROPIC_TOOL_CHOICE,
    thinking: ANTHROPIC_THINKING,
  },
};

export const TOKENIZE_BODY = {
  type: 'object',
  properties: {
    model: str,
    prompt: { type: 'string' },
    messages: CHAT_BODY.properties.messages,
    add_special_tokens: bool,
    add_generation_prompt: bool,
    return_token_strs: bool,
    tools: CHAT_BODY.properties.tools,
    chat_template_kwargs: obj,
  },
};

export const DETOKENIZE_BODY = {
  type: 'object',
  required: ['tokens'],
  properties: { model: str, tokens: { type: 'array', items: { type: 'integer', minimum: 0 } } },
};
