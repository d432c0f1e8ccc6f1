// The serve output pipeline on canned inputs: detokenizer (UTF-8 safe, pieces = whole), stop strings
// across pieces, the <think> split, the tool-call parser (one call, several, streamed in pieces,
// malformed), and the rendered prompt of a request with tools (the schema as the template lays it out).
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureEmbeddedModel } from '../src/model/embedded.js';
import { loadTokenizer, type LoadedTokenizer } from '../src/model/tokenizer.js';
import { anthropicInput, openaiChatInput, renderChat } from '../src/serve/chat-request.js';
import { TokenText } from '../src/serve/detokenizer.js';
import { makeServeModel, type ServeModel } from '../src/serve/model.js';
import { promptOpensThinking, ReasoningSplitter } from '../src/serve/reasoning.js';
import { StopStrings } from '../src/serve/stop-strings.js';
import { parseToolCallBody, pyJson, ToolCallParser, typedValue, type ToolDef } from '../src/serve/tool-calls.js';

const WEATHER: ToolDef = {
  type: 'function',
  function: {
    name: 'get_weather', description: 'Current weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' }, metric: { type: 'boolean' } }, required: ['city'] },
  },
};
const TIME: ToolDef = { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string' } } } } };

/** Every way of cutting `s` into two pieces, and into single characters. */
function splits(s: string): string[][] {
  const out: string[][] = [[s], [...s]];
  for (let i = 1; i < s.length; i++) out.push([s.slice(0, i), s.slice(i)]);
  return out;
}

/** Deterministic xorshift stream. */
function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    return x;
  };
}

describe('serve: detokenizer', () => {
  let tok: LoadedTokenizer;
  let text: TokenText;
  beforeAll(async () => {
    tok = await loadTokenizer(await ensureEmbeddedModel());
    text = new TokenText(tok);
  });

  it('pieces concatenate to the whole decode, never end in half a character, for any token sequence', () => {
    const next = rng(11);
    // Raw byte tokens (ids 0..255 are the 256 byte symbols) split multi-byte characters across tokens.
    const euro = tok.encode('€ naïve 日本語 😀');
    for (let trial = 0; trial < 200; trial++) {
      const ids: number[] = [];
      const n = 1 + (next() % 40);
      for (let i = 0; i < n; i++) {
        const r = next() % 10;
        ids.push(r < 4 ? next() % 256 : r < 7 ? euro[next() % euro.length]! : r < 9 ? next() % 248044 : 248044 + (next() % 33));
      }
      const d = text.detokenizer();
      let got = '';
      for (let i = 0; i < ids.length;) {
        const k = 1 + (next() % 3);
        const piece = d.push(ids.slice(i, i + k));
        // A piece never ends inside a surrogate pair or with an incomplete character held as U+FFFD.
        expect(/[\uD800-\uDBFF]$/.test(piece)).toBe(false);
        got += piece;
        i += k;
      }
      got += d.flush();
      const keep = new Set(['<think>', '</think>', '<tool_call>', '</tool_call>'].map((s) => tok.tokenToId(s)!));
      const visible = ids.filter((t) => !tok.specialTokenIds.has(t) || keep.has(t));
      expect(got).toBe(tok.decode(visible));
    }
  });

  it('holds a split character until its last byte, and special tokens other than the markers vanish', () => {
    const bytes = [...new TextEncoder().encode('€')]; // e2 82 ac
    // The byte-symbol token of each byte (ids 0..255).
    const ids = bytes.map((b) => {
      for (let id = 0; id < 256; id++) if (text.bytesOf(id).length === 1 && text.bytesOf(id)[0] === b) return id;
      throw new Error(`no token for byte ${b}`);
    });
    const d = text.detokenizer();
    expect(d.push([ids[0]!])).toBe('');
    expect(d.push([ids[1]!])).toBe('');
    expect(d.push([248046, ids[2]!])).toBe('€'); // <|im_end|> in between contributes nothing
    expect(d.push([248068])).toBe('<think>');
    expect(d.flush()).toBe('');
    const e = text.detokenizer();
    expect(e.push([ids[0]!])).toBe('');
    expect(e.flush()).toBe('\uFFFD'); // an incomplete character at the very end
  });
});

describe('serve: stop strings', () => {
  it('match across pieces, hold a possible start back, and exclude the stop string', () => {
    const text = 'The cat sat. STOP here and more';
    for (const pieces of splits(text)) {
      const s = new StopStrings(['STOP', 'never']);
      let out = '';
      let stop: string | null = null;
      for (const p of pieces) {
        const r = s.push(p);
        out += r.text;
        if (r.stop) { stop = r.stop; break; }
      }
      expect(stop).toBe('STOP');
      expect(out).toBe('The cat sat. ');
    }
    const s = new StopStrings(['xyz']);
    expect(s.push('abcx').text).toBe('abc'); // 'x' could start 'xyz'
    expect(s.push('y').text).toBe('');
    expect(s.push('q').text).toBe('xyq');
    expect(s.push('xy').text).toBe('');
    expect(s.flush()).toBe('xy'); // the output ended without the stop string
    const e = new StopStrings(['a', 'bc']);
    expect(e.push('xxbca').stop).toBe('bc'); // the earliest match wins
  });

  it('match nothing before min_tokens (pushed unarmed), as vLLM: a match must end in text pushed armed', () => {
    const s = new StopStrings(['ab']);
    expect(s.push('xab', false)).toEqual({ text: 'xab', stop: null }); // a whole stop string, not matched
    expect(s.push('a', false)).toEqual({ text: '', stop: null }); // still held back: it could start one
    expect(s.push('b', true)).toEqual({ text: '', stop: 'ab' }); // completed by armed text: matched
    // Overlapping stop strings: 'ab' ended in the held text (unarmed), so it stays output; 'abc'
    // completed by the armed piece matches.
    const o = new StopStrings(['ab', 'abc']);
    expect(o.push('xab', false)).toEqual({ text: 'x', stop: null }); // 'ab' held: it could start 'abc'
    expect(o.push('d', true)).toEqual({ text: 'abd', stop: null });
    const p = new StopStrings(['ab', 'abc']);
    p.push('xab', false);
    expect(p.push('c', true)).toEqual({ text: '', stop: 'abc' });
  });
});

describe('serve: reasoning split', () => {
  it('splits <think> blocks in any pieces; the newlines after </think> are not content', () => {
    const out = 'I should greet.\n</think>\n\nHello there.';
    for (const pieces of splits(out)) {
      const r = new ReasoningSplitter(true);
      let reasoning = '';
      let content = '';
      for (const p of pieces) {
        const d = r.push(p);
        reasoning += d.reasoning;
        content += d.content;
      }
      const f = r.flush();
      expect(reasoning + f.reasoning).toBe('I should greet.\n');
      expect(content + f.content).toBe('Hello there.');
    }
    // An output that opens the block itself; one that never thinks; a block cut off by max_tokens.
    const a = new ReasoningSplitter(false);
    expect(a.push('<thi')).toEqual({ reasoning: '', content: '' });
    expect(a.push('nk>hmm</think>ok')).toEqual({ reasoning: 'hmm', content: 'ok' });
    const b = new ReasoningSplitter(false);
    expect(b.push('<b>bold</b>')).toEqual({ reasoning: '', content: '<b>bold</b>' });
    const c = new ReasoningSplitter(true);
    expect(c.push('still thinking </thi')).toEqual({ reasoning: 'still thinking ', content: '' });
    expect(c.flush()).toEqual({ reasoning: '</thi', content: '' });
    expect(promptOpensThinking('<|im_start|>assistant\n<think>\n')).toBe(true);
    expect(promptOpensThinking('<|im_start|>assistant\n<think>\n\n</think>\n\n')).toBe(false);
  });
});

describe('serve: tool-call parser', () => {
  const one = 'Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>';
  const two = '<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Jose\n</parameter>\n<parameter=days>\n3\n</parameter>\n' +
    '<parameter=metric>\ntrue\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n<parameter=zone>\nCET\n</parameter>\n</function>\n</tool_call>';

  function run(pieces: string[], tools = [WEATHER, TIME], prefix = '') {
    const p = new ToolCallParser(tools, prefix);
    let content = '';
    const calls: { name: string; arguments: string }[] = [];
    for (const piece of pieces) {
      const d = p.push(piece);
      content += d.content;
      calls.push(...d.calls.map((c) => ({ name: c.name, arguments: c.arguments })));
    }
    const f = p.flush();
    content += f.content;
    calls.push(...f.calls.map((c) => ({ name: c.name, arguments: c.arguments })));
    return { content, calls };
  }

  it('one call (Qwen3.5 XML form): arguments as a JSON string, the text before it as content', () => {
    expect(run([one])).toEqual({ content: 'Let me check.\n\n', calls: [{ name: 'get_weather', arguments: '{"city": "Oslo"}' }] });
  });

  it('several calls, values typed by the schema; the same result for every way of cutting the text', () => {
    const want = {
      content: '',
      calls: [
        { name: 'get_weather', arguments: '{"city": "San Jose", "days": 3, "metric": true}' },
        { name: 'get_time', arguments: '{"zone": "CET"}' },
      ],
    };
    for (const pieces of splits(two)) expect(run(pieces)).toEqual(want);
    for (const pieces of splits(one)) expect(run(pieces).calls).toEqual([{ name: 'get_weather', arguments: '{"city": "Oslo"}' }]);
  });

  it('the JSON form of earlier Qwen models', () => {
    expect(run(['<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>']).calls)
      .toEqual([{ name: 'get_weather', arguments: '{"city": "Oslo"}' }]);
  });

  it('malformed calls stay text: unknown function, stray text, bad JSON, unterminated', () => {
    const bad = [
      '<tool_call>\n<function=launch_rocket>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>',
      '<tool_call>\n<function=get_weather>\nOslo please\n</function>\n</tool_call>',
      '<tool_call>\n{"name": "get_weather", "arguments": {"city": Oslo}}\n</tool_call>',
      '<tool_call>\n<function=get_weather>\n<parameter=city>\nOs',
      'a < b and <tool_c',
    ];
    for (const text of bad) for (const pieces of splits(text)) expect(run(pieces)).toEqual({ content: text, calls: [] });
  });

  it('a forced call: the prefix the prompt wrote is parsed as the start but never returned', () => {
    const prefix = '<tool_call>\n<function=get_weather>\n';
    expect(run(['<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>'], [WEATHER], prefix))
      .toEqual({ content: '', calls: [{ name: 'get_weather', arguments: '{"city": "Oslo"}' }] });
    // An unterminated block whose function is complete still counts at the end of the output.
    expect(run(['<parameter=city>\nOslo\n</parameter>\n</function>'], [WEATHER], prefix).calls).toHaveLength(1);
  });

  it('helpers: Python-style JSON, typed values, bodies', () => {
    expect(pyJson({ a: [1, 'x', { b: null }], 'ü': true })).toBe('{"a": [1, "x", {"b": null}], "ü": true}');
    expect(typedValue('42', { type: 'integer' })).toBe(42);
    expect(typedValue('42', { type: 'string' })).toBe('42');
    expect(typedValue('[1, 2]', { type: 'array' })).toEqual([1, 2]);
    expect(typedValue('maybe', { type: 'boolean' })).toBe('maybe');
    expect(typedValue('{"k": 1}', undefined)).toEqual({ k: 1 });
    expect(parseToolCallBody('<function=get_time>\n</function>', [TIME])).toEqual({ name: 'get_time', arguments: '{}' });
  });
});

describe('serve: rendered chat prompts', () => {
  let model: ServeModel;
  beforeAll(async () => {
    const dir = await ensureEmbeddedModel();
    const tokenizer = await loadTokenizer(dir);
    model = makeServeModel({ name: 'm', root: dir, tokenizer, configEos: 248044, maxSeq: 4096, vocabSize: 248320 });
  });

  it('a request with tools: the schemas as JSON lines inside <tools> in a system turn, as the Qwen3.5 template lays them out', async () => {
    const r = await renderChat(model, openaiChatInput({
      messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Weather in Oslo?' }],
      tools: [WEATHER, TIME],
    }));
    const text = model.tokenizer.decode(r.ids);
    expect(text).toBe(r.text);
    expect(text.startsWith('<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n' +
      `${pyJson(WEATHER)}\n${pyJson(TIME)}\n</tools>\n\nIf you choose to call a function ONLY reply in the following format`)).toBe(true);
    expect(text).toContain('</IMPORTANT>\n\nBe brief.<|im_end|>\n<|im_start|>user\nWeather in Oslo?<|im_end|>\n<|im_start|>assistant\n');
    expect(r.tools?.defs).toHaveLength(2);
    expect(r.tools?.prefix).toBe('');
    // The tool-call and tool-response tokens are the special ids, not spelled out.
    expect(r.ids.filter((t) => t === 248058).length).toBe(2); // the instructions' example block and their reminder
  });

  it('history with tool calls and results (OpenAI and Anthropic shapes render the same)', async () => {
    const openai = await renderChat(model, openaiChatInput({
      messages: [
        { role: 'user', content: 'Weather in Oslo?' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Oslo"}' } }] },
        { role: 'tool', tool_call_id: 'c1', content: '{"temp_c": 3}' },
      ],
      tools: [WEATHER],
    }));
    expect(openai.text).toContain('<|im_start|>assistant\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call><|im_end|>\n' +
      '<|im_start|>user\n<tool_response>\n{"temp_c": 3}\n</tool_response><|im_end|>\n<|im_start|>assistant\n');
    const anthropic = await renderChat(model, anthropicInput({
      messages: [
        { role: 'user', content: 'Weather in Oslo?' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'c1', name: 'get_weather', input: { city: 'Oslo' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'c1', content: '{"temp_c": 3}' }] },
      ],
      tools: [{ name: 'get_weather', description: 'Current weather of a city', input_schema: WEATHER.function.parameters }],
    }));
    expect(anthropic.text).toBe(openai.text);
  });

  it('tool_choice: none leaves the tools out; a named function starts the call; thinking on: the prompt opens <think>', async () => {
    const none = await renderChat(model, openaiChatInput({ messages: [{ role: 'user', content: 'x' }], tools: [WEATHER], tool_choice: 'none' }));
    expect(none.text).not.toContain('<tools>');
    expect(none.tools).toBeNull();
    const named = await renderChat(model, openaiChatInput({
      messages: [{ role: 'user', content: 'x' }], tools: [WEATHER], tool_choice: { type: 'function', function: { name: 'get_weather' } },
      chat_template_kwargs: { enable_thinking: true },
    }));
    expect(named.text.endsWith('<think>\n\n</think>\n\n<tool_call>\n<function=get_weather>\n')).toBe(true);
    expect(named.startsInReasoning).toBe(false);
    const think = await renderChat(model, openaiChatInput({ messages: [{ role: 'user', content: 'x' }], chat_template_kwargs: { enable_thinking: true } }));
    expect(think.startsInReasoning).toBe(true);
    await expect(renderChat(model, openaiChatInput({ messages: [{ role: 'user', content: 'x' }], tools: [WEATHER], tool_choice: { type: 'function', function: { name: 'nope' } } })))
      .rejects.toThrow(/not one of the tools/);
  });
});
