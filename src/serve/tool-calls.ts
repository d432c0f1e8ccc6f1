// Tool calls in the model's output. Qwen3.5 writes
//   <tool_call>\n<function=NAME>\n<parameter=ARG>\nVALUE\n</parameter>\n...</function>\n</tool_call>
// (its template's format); the JSON form <tool_call>{"name": ..., "arguments": {...}}</tool_call> of
// earlier Qwen models is read too. Each complete, well-formed block becomes a call (the arguments as a
// JSON string, parameter values typed by the tool's schema); text outside blocks is content; a block
// that does not parse (unknown function, stray text, bad JSON, cut off before its </function>) stays
// text; at the end of the output, a block missing only its </tool_call> is a call. Works on pieces of
// any size: a block is held until its closing tag arrives.
import { randomBytes } from 'node:crypto';

export const TOOL_OPEN = '<tool_call>';
export const TOOL_CLOSE = '</tool_call>';

/** An OpenAI-layout tool definition (`{type: 'function', function: {name, description, parameters}}`). */
export interface ToolDef {
  type: 'function';
  function: { name: string; description?: string; parameters?: Record<string, unknown> };
}

export interface ToolCall {
  id: string;
  name: string;
  /** JSON text of the arguments object (Python json.dumps spacing, as vLLM returns it). */
  arguments: string;
}

export interface ToolDelta {
  content: string;
  calls: ToolCall[];
}

export function toolCallId(prefix = 'chatcmpl-tool-'): string {
  return prefix + randomBytes(8).toString('hex');
}

/** JSON with `", "` and `": "` separators and non-ASCII kept (Python's json.dumps(ensure_ascii=False)). */
export function pyJson(v: unknown): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v) ?? 'null';
  if (Array.isArray(v)) return `[${v.map(pyJson).join(', ')}]`;
  return `{${Object.entries(v as Record<string, unknown>).map(([k, x]) => `${JSON.stringify(k)}: ${pyJson(x)}`).join(', ')}}`;
}

function schemaTypes(schema: unknown): string[] {
  if (typeof schema !== 'object' || schema === null) return [];
  const s = schema as { type?: unknown; anyOf?: unknown; oneOf?: unknown };
  if (typeof s.type === 'string') return [s.type];
  if (Array.isArray(s.type)) return s.type.filter((t): t is string => typeof t === 'string');
  const alts = Array.isArray(s.anyOf) ? s.anyOf : Array.isArray(s.oneOf) ? s.oneOf : [];
  return alts.flatMap(schemaTypes);
}

/** A parameter's text as the value its schema declares (strings stay text; JSON where it parses). */
export function typedValue(raw: string, schema: unknown): unknown {
  const types = schemaTypes(schema);
  const t = raw.trim();
  const tryJson = (): unknown => {
    try {
      return JSON.parse(t);
    } catch {
      return undefined;
    }
  };
  if (types.length === 1 && types[0] === 'string') return raw;
  for (const type of types) {
    if (type === 'integer' && /^-?\d+$/.test(t)) return Number(t);
    if (type === 'number' && t !== '' && Number.isFinite(Number(t))) return Number(t);
    if (type === 'boolean' && /^(true|false)$/i.test(t)) return t.toLowerCase() === 'true';
    if (type === 'null' && /^(null|none)$/i.test(t)) return null;
    if (type === 'object' || type === 'array') {
      const j = tryJson();
      if (j !== undefined && typeof j === 'object') return j;
    }
  }
  if (types.includes('string')) return raw;
  if (types.length === 0) {
    // No declared type: JSON where it parses (numbers, booleans, objects), else the text.
    const j = tryJson();
    return j !== undefined ? j : raw;
  }
  return raw;
}

/** One block's inside -> {name, arguments}; null when it is not a well-formed call of a known tool. */
export function parseToolCallBody(body: string, tools: readonly ToolDef[]): { name: string; arguments: string } | null {
  const known = new Map(tools.map((t) => [t.function.name, t]));
  const b = body.trim();
  if (b.startsWith('{')) {
    let j: unknown;
    try {
      j = JSON.parse(b);
    } catch {
      return null;
    }
    if (typeof j !== 'object' || j === null || Array.isArray(j)) return null;
    const o = j as { name?: unknown; arguments?: unknown; parameters?: unknown };
    if (typeof o.name !== 'string' || !known.has(o.name)) return null;
    let args = o.arguments ?? o.parameters ?? {};
    if (typeof args === 'string') {
      try {
        args = JSON.parse(args);
      } catch {
        return null;
      }
    }
    if (typeof args !== 'object' || args === null || Array.isArray(args)) return null;
    return { name: o.name, arguments: pyJson(args) };
  }
  const fn = /^<function=([^>\n]+)>([\s\S]*)<\/function>$/.exec(b);
  if (!fn) return null;
  const name = fn[1]!.trim();
  const tool = known.get(name);
  if (!tool) return null;
  const props = (tool.function.parameters?.properties ?? {}) as Record<string, unknown>;
  const args: Record<string, unknown> = {};
  let rest = fn[2]!;
  const param = /^\s*<parameter=([^>\n]+)>\n?([\s\S]*?)\n?<\/parameter>/;
  for (;;) {
    const m = param.exec(rest);
    if (!m) break;
    const key = m[1]!.trim();
    args[key] = typedValue(m[2]!, props[key]);
    rest = rest.slice(m[0].length);
  }
  if (rest.trim() !== '') return null; // stray text or an unterminated parameter
  return { name, arguments: pyJson(args) };
}

/** Longest suffix of `s` that is a proper prefix of `tag`. */
function partialTail(s: string, tag: string): number {
  for (let k = Math.min(tag.length - 1, s.length); k > 0; k--) if (tag.startsWith(s.slice(s.length - k))) return k;
  return 0;
}

export class ToolCallParser {
  private held = '';
  private inCall = false;
  private count = 0;
  /** After a call: whitespace up to the next text (the separator between blocks) is not content. */
  private skipSpace = false;

  /**
   * `prefix`: text the prompt already wrote for the model (a forced tool choice starts the block);
   * it is parsed as the start of the output but never returned as content.
   */
  constructor(private readonly tools: readonly ToolDef[], prefix = '', private readonly idPrefix = 'chatcmpl-tool-') {
    if (prefix) this.push(prefix);
  }

  get calls(): number {
    return this.count;
  }

  push(text: string): ToolDelta {
    const out: ToolDelta = { content: '', calls: [] };
    let buf = this.held + text;
    this.held = '';
    while (buf.length) {
      if (this.skipSpace) {
        buf = buf.replace(/^\s+/, '');
        if (!buf.length) return out;
        this.skipSpace = false;
      }
      if (!this.inCall) {
        const i = buf.indexOf(TOOL_OPEN);
        if (i < 0) {
          const k = partialTail(buf, TOOL_OPEN);
          out.content += buf.slice(0, buf.length - k);
          this.held = buf.slice(buf.length - k);
          return out;
        }
        out.content += buf.slice(0, i);
        buf = buf.slice(i);
        this.inCall = true;
      } else {
        const j = buf.indexOf(TOOL_CLOSE);
        if (j < 0) {
          this.held = buf;
          return out;
        }
        const block = buf.slice(0, j + TOOL_CLOSE.length);
        buf = buf.slice(block.length);
        this.inCall = false;
        const call = parseToolCallBody(block.slice(TOOL_OPEN.length, j), this.tools);
        if (call) {
          out.calls.push({ id: toolCallId(this.idPrefix), ...call });
          this.count++;
          this.skipSpace = true; // the newline(s) the format puts between consecutive blocks are not content
        } else {
          out.content += block;
        }
      }
    }
    return out;
  }

  /** End of output: an unterminated block counts if its function is complete, else it is text. */
  flush(): ToolDelta {
    const t = this.held;
    this.held = '';
    if (!this.inCall) return { content: t, calls: [] };
    this.inCall = false;
    const call = parseToolCallBody(t.slice(TOOL_OPEN.length), this.tools);
    if (call) {
      this.count++;
      return { content: '', calls: [{ id: toolCallId(this.idPrefix), ...call }] };
    }
    return { content: t, calls: [] };
  }
}
