// A chat request (OpenAI messages or Anthropic messages) -> the prompt ids, rendered through the
// checkpoint's own chat template (tools included, laid out by the template), plus what the output
// parsers need: whether the prompt left a <think> block open, and the text a forced tool choice
// writes for the model.
import type { ChatMessage } from '../model/tokenizer.js';
import { isJsonObject } from '../util/json.js';
import { ApiError, badRequest, unsupported } from './errors.js';
import type { ServeModel } from './model.js';
import { encodePrompt } from './request-params.js';
import { promptOpensThinking, THINK_CLOSE } from './reasoning.js';
import { TOOL_OPEN, type ToolDef } from './tool-calls.js';

export type ToolChoice = 'auto' | 'none' | 'required' | { name: string };

/** The request in the template's terms. */
export interface ChatInput {
  messages: ChatMessage[];
  tools: ToolDef[];
  toolChoice: ToolChoice;
  enableThinking?: boolean;
  /** Further template variables (chat_template_kwargs). */
  kwargs: Record<string, unknown>;
}

export interface RenderedChat {
  text: string;
  ids: number[];
  startsInReasoning: boolean;
  /** Tool parsing: the schemas, and the text the prompt wrote for a forced call (parsed as the output's start). */
  tools: { defs: ToolDef[]; prefix: string } | null;
}

type Json = Record<string, unknown>;

function textOfParts(parts: unknown, param: string): string {
  if (parts === null || parts === undefined) return '';
  if (typeof parts === 'string') return parts;
  let out = '';
  for (const p of parts as Json[]) {
    if (p.type !== 'text') throw unsupported(param, `content part of type '${String(p.type)}' (this server takes text only)`);
    out += typeof p.text === 'string' ? p.text : '';
  }
  return out;
}

function parseArguments(args: unknown, param: string): Json {
  if (isJsonObject(args)) return args;
  if (typeof args !== 'string' || args.trim() === '') return {};
  let v: unknown;
  try {
    v = JSON.parse(args);
  } catch {
    throw badRequest(`${param}: the arguments are not valid JSON`, param);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw badRequest(`${param}: the arguments must be a JSON object`, param);
  return v as Json;
}

/** OpenAI chat body -> template input. */
export function openaiChatInput(body: Json): ChatInput {
  const messages: ChatMessage[] = (body.messages as Json[]).map((m, i) => {
    const param = `messages.${i}`;
    const role = m.role as string;
    if (role === 'function') throw unsupported(`${param}.role`, "the deprecated 'function' role (use 'tool')");
    const content = textOfParts(m.content, `${param}.content`);
    if (role === 'system' || role === 'developer') return { role: 'system', content };
    if (role === 'user') return { role: 'user', content };
    if (role === 'tool') return { role: 'tool', content, ...(typeof m.tool_call_id === 'string' ? { tool_call_id: m.tool_call_id } : {}) };
    // assistant
    const out: ChatMessage = { role: 'assistant', content };
    if (typeof m.reasoning_content === 'string') out.reasoning_content = m.reasoning_content;
    const calls = m.tool_calls as Json[] | null | undefined;
    if (calls && calls.length) {
      out.tool_calls = calls.map((c, k) => {
        const fn = c.function as Json;
        return {
          id: c.id, type: 'function',
          function: { name: fn.name, arguments: parseArguments(fn.arguments, `${param}.tool_calls.${k}.function.arguments`) },
        };
      });
    }
    return out;
  });
  const tools = (body.tools as ToolDef[] | null | undefined) ?? [];
  let toolChoice: ToolChoice = 'auto';
  const tc = body.tool_choice as unknown;
  if (typeof tc === 'string') {
    if (tc !== 'auto' && tc !== 'none' && tc !== 'required') throw badRequest(`tool_choice '${tc}' is not one of auto, none, required or a named function`, 'tool_choice');
    toolChoice = tc;
  } else if (tc && typeof tc === 'object') {
    toolChoice = { name: String(((tc as Json).function as Json).name) };
  }
  const kwargs = { ...((body.chat_template_kwargs as Json | null | undefined) ?? {}) };
  const enableThinking = typeof kwargs.enable_thinking === 'boolean' ? kwargs.enable_thinking : undefined;
  delete kwargs.enable_thinking;
  return { messages, tools, toolChoice, kwargs, ...(enableThinking !== undefined ? { enableThinking } : {}) };
}

/** Anthropic tools -> OpenAI layout (what the template reads). */
export function anthropicTools(tools: Json[] | undefined): ToolDef[] {
  return (tools ?? []).map((t, i) => {
    if (t.type !== undefined && t.type !== 'custom') throw unsupported(`tools.${i}.type`, `server tool '${String(t.type)}'`);
    return {
      type: 'function' as const,
      function: {
        name: t.name as string,
        ...(typeof t.description === 'string' ? { description: t.description } : {}),
        parameters: (t.input_schema as Json | undefined) ?? { type: 'object', properties: {} },
      },
    };
  });
}

/** Anthropic messages body -> template input (tool_use blocks become tool calls, tool_result blocks tool messages). */
export function anthropicInput(body: Json): ChatInput {
  const messages: ChatMessage[] = [];
  const system = body.system as string | Json[] | undefined;
  if (system !== undefined) {
    const text = typeof system === 'string' ? system : system.map((b) => String(b.text ?? '')).join('\n');
    if (text) messages.push({ role: 'system', content: text });
  }
  const list = body.messages as Json[];
  list.forEach((m, i) => {
    const role = m.role as 'user' | 'assistant';
    // Anthropic's rules, in its words: no empty message but a final assistant one (the start of
    // the reply), no empty text block. (An empty user turn would otherwise drop out of the prompt.)
    const empty = m.content === '' || (Array.isArray(m.content) && m.content.length === 0);
    if (empty && !(role === 'assistant' && i === list.length - 1)) {
      throw badRequest(`messages.${i}: all messages must have non-empty content except for the optional final assistant message`, `messages.${i}`);
    }
    if (empty) return; // the empty final assistant message: nothing to render, in either form
    if (Array.isArray(m.content)) {
      (m.content as Json[]).forEach((b, k) => {
        if (b.type === 'text' && !b.text) throw badRequest(`messages.${i}.content.${k}.text: text content blocks must be non-empty`, `messages.${i}.content.${k}.text`);
      });
    }
    if (typeof m.content === 'string') {
      messages.push({ role, content: m.content });
      return;
    }
    let text = '';
    let reasoning: string | undefined;
    const calls: Json[] = [];
    const flush = () => {
      if (role === 'assistant') {
        if (text || calls.length || reasoning !== undefined) {
          messages.push({ role, content: text, ...(calls.length ? { tool_calls: calls.splice(0) } : {}), ...(reasoning !== undefined ? { reasoning_content: reasoning } : {}) });
        }
      } else if (text) {
        messages.push({ role, content: text });
      }
      text = '';
      reasoning = undefined;
    };
    (m.content as Json[]).forEach((b, k) => {
      const param = `messages.${i}.content.${k}`;
      if (b.type === 'text') text += String(b.text ?? '');
      else if (b.type === 'thinking' && role === 'assistant') reasoning = (reasoning ?? '') + String(b.thinking ?? '');
      else if (b.type === 'redacted_thinking' && role === 'assistant') { /* nothing to show the model */ }
      else if (b.type === 'tool_use' && role === 'assistant') {
        calls.push({ id: b.id, type: 'function', function: { name: b.name, arguments: (b.input as Json | undefined) ?? {} } });
      } else if (b.type === 'tool_result' && role === 'user') {
        flush();
        const c = b.content as string | Json[] | undefined;
        const out = typeof c === 'string' ? c : (c ?? []).map((x, j) => {
          if (x.type !== 'text') throw unsupported(`${param}.content.${j}`, `tool_result content of type '${String(x.type)}'`);
          return String(x.text ?? '');
        }).join('');
        messages.push({ role: 'tool', content: out, ...(typeof b.tool_use_id === 'string' ? { tool_call_id: b.tool_use_id } : {}) });
      } else {
        throw unsupported(param, `a ${role} content block of type '${String(b.type)}'`);
      }
    });
    flush();
  });
  const tools = anthropicTools(body.tools as Json[] | undefined);
  let toolChoice: ToolChoice = 'auto';
  const tc = body.tool_choice as Json | undefined;
  if (tc) {
    // Anthropic's own terms in its errors ('any', not OpenAI's 'required').
    if (tc.type !== 'auto' && tc.type !== 'none' && tools.length === 0) throw badRequest(`tool_choice '${String(tc.type)}' needs tools`, 'tool_choice');
    if (tc.type === 'any') toolChoice = 'required';
    else if (tc.type === 'none') toolChoice = 'none';
    else if (tc.type === 'tool') {
      if (typeof tc.name !== 'string') throw badRequest("tool_choice of type 'tool' needs a name", 'tool_choice.name');
      toolChoice = { name: tc.name };
    }
  }
  const thinking = body.thinking as Json | undefined;
  const enableThinking = thinking ? thinking.type === 'enabled' : undefined;
  return { messages, tools, toolChoice, kwargs: {}, ...(enableThinking !== undefined ? { enableThinking } : {}) };
}

/**
 * Renders the conversation with the checkpoint's template and tokenizes it. Tool choice: `none`
 * leaves the tools out of the prompt and the output unparsed; `auto` parses what the model writes;
 * `required` and a named function start the assistant's turn with the call (the model writes the
 * rest), closing an open thinking block first. `bounded`: as encodePrompt's (false: /tokenize and
 * count_tokens count any length).
 */
export async function renderChat(model: ServeModel, input: ChatInput, bounded = true): Promise<RenderedChat> {
  const tok = model.tokenizer;
  if (!tok.hasChatTemplate) throw badRequest('this model has no chat template: use /v1/completions', 'messages');
  const choice = input.toolChoice;
  if (choice !== 'auto' && choice !== 'none' && input.tools.length === 0) {
    throw badRequest(`tool_choice ${typeof choice === 'string' ? `'${choice}'` : `'${choice.name}'`} needs tools`, 'tool_choice');
  }
  if (typeof choice === 'object' && !input.tools.some((t) => t.function.name === choice.name)) {
    throw badRequest(`tool_choice names '${choice.name}', which is not one of the tools`, 'tool_choice');
  }
  const useTools = input.tools.length > 0 && choice !== 'none';
  let text: string;
  try {
    text = await model.encoder.render(input.messages, {
      addGenerationPrompt: true,
      ...(input.enableThinking !== undefined ? { enableThinking: input.enableThinking } : {}),
      ...(useTools ? { tools: input.tools } : {}),
      extra: input.kwargs,
    });
  } catch (err) {
    if (err instanceof ApiError) throw err; // not the template's refusal: a tokenizer worker failed, or the server is stopping
    throw badRequest(`the chat template refused the messages: ${(err as Error).message}`, 'messages');
  }
  let startsInReasoning = promptOpensThinking(text);
  let prefix = '';
  if (useTools && choice !== 'auto') {
    if (startsInReasoning) {
      text += `\n${THINK_CLOSE}\n\n`;
      startsInReasoning = false;
    }
    prefix = typeof choice === 'object' ? `${TOOL_OPEN}\n<function=${choice.name}>\n` : `${TOOL_OPEN}\n<function=`;
    text += prefix;
  }
  const ids = await encodePrompt(model, text, 'messages', bounded);
  return { text, ids, startsInReasoning, tools: useTools ? { defs: input.tools, prefix } : null };
}
