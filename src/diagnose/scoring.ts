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

/** The answer (code fence removed) matches `re`. */
export function regexAnswer(re: RegExp, what: string): Scorer {
  return (response) => {
    const answer = answerText(response);
    const pass = answer !== null && re.test(unfence(answer));
    return { pass, answer, reason: pass ? `matches ${what}` : `expected ${what}, got ${show(answer)}` };
  };
}

/**
 * A Python function `is_even` with one parameter whose return expression tests evenness:
 * `p % 2 == 0`, `not p % 2`, or `p & 1 == 0` (parentheses allowed, type hints allowed).
 */
export const IS_EVEN_RE = new RegExp(
  String.raw`(?:^|\n)[ \t]*def[ \t]+is_even[ \t]*\([ \t]*([A-Za-z_]\w*)[ \t]*(?::[ \t]*int[ \t]*)?\)[ \t]*(?:->[ \t]*bool[ \t]*)?:` +
  String.raw`(?:[ \t]*|[\s\S]*?\n[ \t]*)return[ \t]+\(?[ \t]*` +
  String.raw`(?:\(?[ \t]*\1[ \t]*%[ \t]*2[ \t]*\)?[ \t]*==[ \t]*0|not[ \t]+\(?[ \t]*\1[ \t]*%[ \t]*2[ \t]*\)?|\(?[ \t]*\1[ \t]*&[ \t]*1[ \t]*\)?[ \t]*==[ \t]*0)` +
  String.raw`[ \t]*\)?[ \t]*(?:\n|$)`,
);

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
