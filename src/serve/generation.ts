// One request through the engine and the output pipeline: tokens -> text (UTF-8 safe) -> stop strings
// -> reasoning split -> tool calls. Streamed and non-streamed requests run the very same pipeline
// (the non-streamed one just keeps the pieces), so their texts are equal by construction. The
// pipeline runs once per step's tokens; a stop string cancels the request in the engine at once.
import type { RequestResult, TokenLogprobs } from '../engine/types.js';
import type { TokenText } from './detokenizer.js';
import type { ServeEngine } from './engine-queue.js';
import { ReasoningSplitter } from './reasoning.js';
import { StopStrings } from './stop-strings.js';
import { ToolCallParser, type ToolCall, type ToolDef } from './tool-calls.js';

export interface GenerationParams {
  prompt: number[];
  maxTokens: number;
  minTokens: number;
  temperature: number;
  topP: number;
  topK: number;
  seed: number;
  /** The model's end-of-sequence ids. */
  eosTokens: number[];
  /** The request's stop_token_ids (they stop the output even with ignoreEos). */
  stopTokenIds: number[];
  /** ignore_eos: the eosTokens do not stop the output (the stopTokenIds still do). */
  ignoreEos: boolean;
  stop: string[];
  /** Top alternatives per token (undefined: no logprobs). */
  logprobs?: number;
  /** Split <think> blocks out as reasoning (chat routes); `startsInReasoning` when the prompt left one open. */
  reasoning?: { startsInReasoning: boolean };
  /** Parse tool calls (chat routes with tools). */
  tools?: { defs: ToolDef[]; prefix: string; idPrefix: string; onlyFirst: boolean };
}

/** What one engine step added to a request's output. */
export interface StepDelta {
  /** Tokens this step contributed to the output (the first step is the first token). */
  tokens: number[];
  content: string;
  reasoning: string;
  toolCalls: ToolCall[];
  logprobs?: TokenLogprobs[];
  /** With logprobs: where each token's text starts in the output text, in code points (see Generation.offsets). */
  textOffsets?: number[];
}

export type GenerationFinish = 'stop' | 'length' | 'tool_calls' | 'cancelled' | 'error';

/**
 * The finish reason a client, /metrics (`finished_reason`) and the -v log line see: `stop`, `length`,
 * `tool_calls`, or `abort` for a request the server cut (client gone, shutdown, engine error), as vLLM
 * says. The -v line adds `error` for an engine failure.
 */
export type ApiFinishReason = 'stop' | 'length' | 'tool_calls' | 'abort';

export function apiFinishReason(r: { finish: GenerationFinish }): ApiFinishReason {
  return r.finish === 'cancelled' || r.finish === 'error' ? 'abort' : r.finish;
}

export interface GenerationResult {
  finish: GenerationFinish;
  /** The stop string, or the stop token id, that ended the output (vLLM's stop_reason); null otherwise. */
  stopReason: string | number | null;
  /** Output tokens (up to and including the one that completed a stop string). */
  tokens: number[];
  content: string;
  reasoning: string;
  toolCalls: ToolCall[];
  logprobs?: TokenLogprobs[];
  textOffsets?: number[];
  promptTokens: number;
  cachedPromptTokens: number;
  /** Native times: enqueue -> first token, enqueue -> last output token (ms); null without tokens. */
  ttftMs: number | null;
  e2eMs: number | null;
  engine: RequestResult;
  error?: string;
}

/** Unicode code points of a string (Python's len: vLLM's and Python clients' unit of text offsets). */
export function codePoints(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) n--; // a high surrogate: its pair is one code point
  }
  return n;
}

export class Generation {
  readonly done: Promise<GenerationResult>;
  private readonly tokens: number[] = [];
  private readonly logprobs: TokenLogprobs[] | undefined;
  /**
   * With logprobs: per output token, where its text starts in the detokenizer's output (before stop
   * strings are cut), in code points. A token whose bytes are whole characters: its own text ends its
   * piece (after any U+FFFD it completed for an invalid sequence before it). Any other token (it ends
   * or continues a split character): the characters completed before it, so the tokens of a split
   * character share the character's offset.
   */
  private readonly offsets: number[] | undefined;
  private chars = 0;
  private content = '';
  private reasoningText = '';
  private readonly calls: ToolCall[] = [];
  private stopString: string | null = null;
  private stopped = false;
  private cancelled = false;
  private readonly detok;
  private readonly stops: StopStrings;
  private readonly split: ReasoningSplitter | null;
  private readonly toolParser: ToolCallParser | null;
  private readonly stopSet: Set<number>;
  private readonly handle: { id: number; cancel(): void };

  /** Throws synchronously what the engine refuses at submit. */
  constructor(
    engine: ServeEngine,
    private readonly text: TokenText,
    private readonly p: GenerationParams,
    private readonly onDelta?: (d: StepDelta) => void,
  ) {
    this.detok = text.detokenizer();
    this.stops = new StopStrings(p.stop);
    this.split = p.reasoning ? new ReasoningSplitter(p.reasoning.startsInReasoning) : null;
    this.toolParser = p.tools ? new ToolCallParser(p.tools.defs, p.tools.prefix, p.tools.idPrefix) : null;
    // ignore_eos ignores the model's end-of-sequence ids only (vLLM): the request's stop_token_ids
    // still stop it. The engine's ignoreEos would switch off every stop id, so it is never set here:
    // the engine gets just the ids that stop this request.
    const stopTokens = [...new Set([...(p.ignoreEos ? [] : p.eosTokens), ...p.stopTokenIds])];
    this.stopSet = new Set(stopTokens);
    this.logprobs = p.logprobs !== undefined ? [] : undefined;
    this.offsets = p.logprobs !== undefined ? [] : undefined;
    const h = engine.submit({
      prompt: p.prompt, maxTokens: p.maxTokens, minTokens: p.minTokens, temperature: p.temperature, topP: p.topP,
      topK: p.topK, seed: p.seed, stopTokens, ignoreEos: false,
      ...(p.logprobs !== undefined ? { logprobs: p.logprobs } : {}),
    }, (s) => this.step(s.tokens, s.logprobs));
    this.handle = h;
    this.done = h.done.then((r) => this.finish(r));
  }

  get id(): number {
    return this.handle.id;
  }

  /** The client went away (or the server is stopping): the engine frees the request's blocks and slot at its next step. */
  cancel(): void {
    if (this.cancelled) return;
    this.cancelled = true;
    this.handle.cancel();
  }

  private step(ids: number[], lps?: TokenLogprobs[]): void {
    if (this.stopped || this.cancelled) return;
    let text = '';
    let used = 0;
    if (!this.stops.active && !this.offsets) {
      const visible = this.stopSet.size ? ids.filter((t) => !this.stopSet.has(t)) : ids;
      text = this.detok.push(visible);
      used = ids.length;
    } else {
      // Token by token, so the output ends exactly at the token that completed the stop string
      // (and each token's text offset is known).
      for (const t of ids) {
        used++;
        if (this.stopSet.has(t)) {
          this.offsets?.push(this.chars);
          continue;
        }
        const piece = this.detok.push([t]);
        if (this.offsets) {
          const before = this.chars;
          this.chars += codePoints(piece);
          const own = this.text.tokenPiece(t).text;
          this.offsets.push(own === '' || own.includes('\uFFFD') ? before : Math.max(before, this.chars - codePoints(own)));
        }
        // min_tokens holds off stop strings as vLLM (v1) does: a match must end in a token past the
        // first min_tokens, as a stop token can only come after them.
        const r = this.stops.push(piece, this.tokens.length + used > this.p.minTokens);
        text += r.text;
        if (r.stop !== null) {
          this.stopString = r.stop;
          this.stopped = true;
          this.handle.cancel();
          break;
        }
      }
    }
    const tokens = ids.slice(0, used);
    this.tokens.push(...tokens);
    const stepLps = lps?.slice(0, used);
    if (stepLps) this.logprobs?.push(...stepLps);
    const d = this.parse(text);
    const offsets = this.offsets?.slice(this.offsets.length - used);
    this.onDelta?.({ tokens, ...d, ...(stepLps ? { logprobs: stepLps } : {}), ...(offsets ? { textOffsets: offsets } : {}) });
  }

  private parse(text: string, end = false): { content: string; reasoning: string; toolCalls: ToolCall[] } {
    let reasoning = '';
    let content = text;
    if (this.split) {
      const a = this.split.push(text);
      const b = end ? this.split.flush() : { reasoning: '', content: '' };
      reasoning = a.reasoning + b.reasoning;
      content = a.content + b.content;
    }
    let toolCalls: ToolCall[] = [];
    if (this.toolParser) {
      const a = this.toolParser.push(content);
      const b = end ? this.toolParser.flush() : { content: '', calls: [] };
      content = a.content + b.content;
      toolCalls = [...a.calls, ...b.calls];
      if (this.p.tools!.onlyFirst) {
        // parallel_tool_calls: false — the first call only; later ones are dropped.
        toolCalls = toolCalls.slice(0, Math.max(0, 1 - this.calls.length));
      }
    }
    this.content += content;
    this.reasoningText += reasoning;
    this.calls.push(...toolCalls);
    return { content, reasoning, toolCalls };
  }

  private finish(r: RequestResult): GenerationResult {
    // What the pipeline still holds: a partial character, a possible stop-string start, a partial tag.
    let tail = this.detok.flush();
    if (!this.stopped) {
      const r = this.stops.push(tail, this.tokens.length > this.p.minTokens);
      if (r.stop !== null) this.stopString = r.stop;
      tail = r.text + (r.stop !== null ? '' : this.stops.flush());
    }
    const last = this.parse(tail, true);
    if (last.content || last.reasoning || last.toolCalls.length) this.onDelta?.({ tokens: [], ...last });

    let finish: GenerationFinish;
    let stopReason: string | number | null = null;
    if (this.stopString !== null) {
      finish = 'stop';
      stopReason = this.stopString;
    } else if (r.finishReason === 'stop') {
      finish = 'stop';
      const lastTok = r.tokens[r.tokens.length - 1];
      // vLLM reports a stop_token_ids hit as its id and an end-of-sequence token as null.
      stopReason = lastTok !== undefined && this.p.stopTokenIds.includes(lastTok) && (this.p.ignoreEos || !this.p.eosTokens.includes(lastTok)) ? lastTok : null;
    } else {
      finish = r.finishReason;
    }
    // Parsed calls are complete calls to run, whatever ended the output (vLLM's tool parsers say
    // tool_calls too): one cut off by max_tokens inside its function stayed text (ToolCallParser.flush),
    // so a call here is never truncated; only its closing </tool_call> may be missing.
    if ((finish === 'stop' || finish === 'length') && this.calls.length > 0) finish = 'tool_calls';
    const n = this.tokens.length;
    const ttft = n > 0 && r.tokenMs.length > 0 ? r.tokenMs[0]! - r.enqueueMs : null;
    const e2e = n > 0 && r.tokenMs.length >= n ? r.tokenMs[n - 1]! - r.enqueueMs : null;
    return {
      finish, stopReason, tokens: this.tokens.slice(), content: this.content, reasoning: this.reasoningText,
      toolCalls: this.calls.slice(), ...(this.logprobs ? { logprobs: this.logprobs } : {}), ...(this.offsets ? { textOffsets: this.offsets } : {}),
      promptTokens: r.promptTokens || this.p.prompt.length, cachedPromptTokens: r.cachedPromptTokens, ttftMs: ttft, e2eMs: e2e,
      engine: r, ...(r.error ? { error: r.error } : {}),
    };
  }
}
