// The scoring rules of `bench diagnose`, in code: each takes the server's whole response and says
// pass or fail with the answer it read and why. The answer is `choices[0].message.content` with a
// leading <think>…</think> block removed (a server without a reasoning parser leaves it in the text),
// then trimmed. Nothing is judged by eye, and nothing looser than the rule's name says.
import type { Json } from './http-client.js';
import { firstChoice } from './http-client.js';

export interface Score {
  pass: boolean;
  /** The answer the rule read (null when the response has none). */
  answer: string | null;
  /** One line: what matched, or what was expected and what came instead. */
  reason: string;
}

export type Scorer = (response: unknown) => Score;

/** The assistant message of a chat completion, if any. */
export function messageOf(response: unknown): Json | undefined {
  const m = firstChoice(response)?.message;
  return typeof m === 'object' && m !== null ? m as Json : undefined;
}

/** A leading reasoning block (`<think>…</think>`, or a bare `…</think>` when the template opened it). */
export function stripThinking(text: string): string {
  const close = text.indexOf('</think>');
  if (close < 0) return text;
  const open = text.indexOf('<think>');
  if (open > 0 && text.slice(0, open).trim() !== '') return text; // not a leading block
  return text.slice(close + '</think>'.length);
}

/** The answer text of a chat completion: content, reasoning block removed, trimmed; null when there is no text content. */
export function answerText(response: unknown): string | null {
  const c = messageOf(response)?.content;
  if (typeof c !== 'string') return null;
  return stripThinking(c).trim();
}

const show = (s: string | null, max = 60): string => s === null ? 'no text content' : JSON.stringify(s.length > max ? `${s.slice(0, max)}…` : s);

/** Structural equality of JSON values (key order ignored; numbers by value). */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== typeof b || a === null || b === null || typeof a !== 'object') return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    const bb = b as unknown[];
    return a.length === bb.length && a.every((x, i) => jsonEqual(x, bb[i]));
  }
  const ka = Object.keys(a as Json);
  const kb = Object.keys(b as Json);
  return ka.length === kb.length && ka.every((k) => Object.hasOwn(b as Json, k) && jsonEqual((a as Json)[k], (b as Json)[k]));
}

/** The text inside one enclosing Markdown code fence (```lang … ```), or the text itself. */
export function unfence(text: string): string {
  const m = /^```[A-Za-z0-9_+-]*[ \t]*\r?\n([\s\S]*?)\r?\n?```$/.exec(text.trim());
  return m ? m[1]!.trim() : text;
}

/** Exact match after trimming. */
export function exactAnswer(expected: string): Scorer {
  return (response) => {
    const answer = answerText(response);
    const pass = answer === expected;
    return { pass, answer, reason: pass ? `answer is ${JSON.stringify(expected)}` : `expected ${JSON.stringify(expected)}, got ${show(answer)}` };
  };
}

/** The answer parses as JSON (inside one code fence or bare) and deep-equals `expected`. */
export function jsonAnswer(expected: unknown): Scorer {
  return (response) => {
    const answer = answerText(response);
    if (answer === null) return { pass: false, answer, reason: `expected JSON ${JSON.stringify(expected)}, got no text content` };
    let value: unknown;
    try {
      value = JSON.parse(unfence(answer));
    } catch {
      return { pass: false, answer, reason: `expected JSON ${JSON.stringify(expected)}, got text that is not JSON: ${show(answer)}` };
    }
    const pass = jsonEqual(value, expected);
    return { pass, answer, reason: pass ? `JSON equals ${JSON.stringify(expected)}` : `expected JSON ${JSON.stringify(expected)}, got ${JSON.stringify(value)}` };
  };
}

const DEF_IS_EVEN = /^([ \t]*)def[ \t]+is_even[ \t]*\([ \t]*([A-Za-z_]\w*)[ \t]*(?::[ \t]*int[ \t]*)?\)[ \t]*(?:->[ \t]*bool[ \t]*)?:(.*)$/;

/** Whether the parentheses of `s` balance (never closing one that is not open). */
function balanced(s: string): boolean {
  let depth = 0;
  for (const ch of s) {
    if (ch === '(') depth++;
    else if (ch === ')' && --depth < 0) return false;
  }
  return depth === 0;
}

/** `s` without parentheses that enclose all of it (`((x))` -> `x`); `s` must balance. */
function unwrap(s: string): string {
  let e = s.trim();
  for (;;) {
    if (!e.startsWith('(') || !e.endsWith(')')) return e;
    let depth = 0;
    let closesAt = -1;
    for (let i = 0; i < e.length; i++) {
      if (e[i] === '(') depth++;
      else if (e[i] === ')' && --depth === 0) { closesAt = i; break; }
    }
    if (closesAt !== e.length - 1) return e; // `(a) == (b)`: the first parenthesis closes early
    e = e.slice(1, -1).trim();
  }
}

/** The expression of a `return` statement (`return EXPR  # comment`), or null when `stmt` is not one. */
function returnExpression(stmt: string): string | null {
  const m = /^return(?:[ \t]+|(?=\())(.*)$/.exec(stmt.trim());
  if (!m) return null;
  return m[1]!.replace(/#.*$/, '').replace(/;\s*$/, '').trim();
}

/**
 * The rule of behavior-python: a function `def is_even(p)` (type hints `int` / `bool` allowed)
 * whose body's first `return` statement (that one only: a later one never runs, and a function
 * after it is another function) returns `p % 2 == 0`, `not p % 2` or `p & 1 == 0`, an operand or
 * the whole in balanced parentheses. A docstring and comments may come before the return.
 */
export function judgeIsEven(code: string): { pass: boolean; why: string } {
  const lines = code.replace(/\r\n?/g, '\n').split('\n');
  const at = lines.findIndex((l) => DEF_IS_EVEN.test(l));
  if (at < 0) return { pass: false, why: 'no def is_even(x) with one parameter' };
  const [, indent, param, rest] = DEF_IS_EVEN.exec(lines[at]!)!;
  let expr: string | null = null;
  const inline = rest!.replace(/#.*$/, '').trim();
  if (inline !== '') {
    expr = returnExpression(inline.split(';')[0]!); // `def is_even(n): return ...`: the body is this line
  } else {
    let quote: string | null = null; // inside a triple-quoted string (a docstring) opened on an earlier line
    for (const line of lines.slice(at + 1)) {
      const t = line.trim();
      if (quote !== null) {
        if (t.includes(quote)) quote = null;
        continue;
      }
      if (t === '' || t.startsWith('#')) continue;
      if (line.length - line.trimStart().length <= indent!.length) break; // the body ended
      const opens = /^[rRuUbB]{0,2}("""|''')/.exec(t);
      if (opens) {
        if (t.split(opens[1]!).length - 1 < 2) quote = opens[1]!; // not closed on this line
        continue;
      }
      const e = returnExpression(t);
      if (e !== null) { expr = e; break; }
    }
  }
  if (expr === null) return { pass: false, why: 'is_even has no return statement' };
  if (!balanced(expr)) return { pass: false, why: `the parentheses of its first return do not balance: return ${expr}` };
  const p = param!;
  const mod = String.raw`(?:${p}\s*%\s*2|\(\s*${p}\s*%\s*2\s*\))`;
  const and = String.raw`(?:${p}\s*&\s*1|\(\s*${p}\s*&\s*1\s*\))`;
  const even = new RegExp(String.raw`^(?:${mod}\s*==\s*0|${and}\s*==\s*0|not(?:\s+|(?=\())${mod})$`);
  const pass = even.test(unwrap(expr));
  return { pass, why: pass ? `its first return is ${expr}` : `its first return is ${expr}, not an evenness test of ${p}` };
}

/** behavior-python's scorer: judgeIsEven on the answer (one enclosing code fence removed). */
export function isEvenAnswer(what: string): Scorer {
  return (response) => {
    const answer = answerText(response);
    if (answer === null) return { pass: false, answer, reason: `expected ${what}, got no text content` };
    const j = judgeIsEven(unfence(answer));
    return { pass: j.pass, answer, reason: j.pass ? `matches ${what}: ${j.why}` : `expected ${what}, got ${show(answer)}: ${j.why}` };
  };
}

/** The reply is a tool call of `name` whose arguments (a JSON string) deep-equal `args`. */
export function toolCallAnswer(name: string, args: Json): Scorer {
  return (response) => {
    const msg = messageOf(response);
    const calls = Array.isArray(msg?.tool_calls) ? msg!.tool_calls as Json[] : [];
    const content = typeof msg?.content === 'string' ? msg.content : null;
    if (calls.length === 0) return { pass: false, answer: content, reason: `expected a tool call ${name}(${JSON.stringify(args)}), got ${content === null ? 'no tool call' : `text ${show(content)}`}` };
    const first = calls[0] as unknown;
    if (typeof first !== 'object' || first === null) return { pass: false, answer: null, reason: `expected a tool call ${name}(${JSON.stringify(args)}), got tool_calls[0] = ${JSON.stringify(first)}` };
    const f = (first as Json).function;
    const fn = (typeof f === 'object' && f !== null ? f : {}) as Json;
    const raw = typeof fn.arguments === 'string' ? fn.arguments : JSON.stringify(fn.arguments ?? null);
    const answer = `${String(fn.name)}(${raw})`;
    let parsed: unknown;
    try { parsed = JSON.parse(raw); } catch { return { pass: false, answer, reason: `tool call arguments are not JSON: ${show(raw)}` }; }
    const pass = fn.name === name && jsonEqual(parsed, args);
    return { pass, answer, reason: pass ? `tool call ${answer}` : `expected a tool call ${name}(${JSON.stringify(args)}), got ${answer}` };
  };
}

/** The answer holds `n` as a whole number (not inside a longer run of digits). */
export function numberInAnswer(n: number): Scorer {
  return (response) => {
    const answer = answerText(response);
    const pass = answer !== null && new RegExp(`(?<![0-9])${n}(?![0-9])`).test(answer);
    return { pass, answer, reason: pass ? `answer holds ${n}` : `expected the number ${n} in the answer, got ${show(answer)}` };
  };
}
