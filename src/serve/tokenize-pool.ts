// Prompts -> token ids for `bench serve` without stalling the server's one JS thread: a prompt text
// longer than INLINE_MAX_CHARS is tokenized on a worker thread (a 1 MB text takes most of a second or
// more, during which no stream would get a chunk), a shorter one on the JS thread (a worker's round
// trip would cost about what tokenizing it does); likewise a conversation of more than
// INLINE_MAX_MESSAGES messages is rendered through the chat template on a worker (the template's loop
// takes ~25 ms for 1000 messages). Each worker builds the same tokenizer from a copy of the parts the
// main thread built its own from, and runs the same code (prompt-bound.ts, the tokenizer's template).
// The worker is dist/src/serve/tokenize-worker.js (running from sources, e.g. under vitest, the
// compiled copy `npm run build` made, which the tests' global setup rebuilds when a source is newer:
// test/helpers/dist-fresh.ts; none: everything on the JS thread).
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { ChatMessage, ChatTemplateOptions, LoadedTokenizer, TokenizerParts } from '../model/tokenizer.js';
import { REPO_ROOT } from '../util/version.js';
import { ApiError } from './errors.js';
import { boundedEncode, byteBound, type BoundedIds, type PromptBound } from './prompt-bound.js';
import type { TokenizeReply, TokenizeRequest, TokenizeWorkerData } from './tokenize-worker.js';

/** `--tokenizer-workers`' default: a second worker takes the texts behind a huge one. */
export const DEFAULT_TOKENIZER_WORKERS = 2;
/** `--tokenizer-workers`' bound (each worker holds its own copy of the tokenizer, ~90 MB for Qwen3.5's). */
export const MAX_TOKENIZER_WORKERS = 64;

/** Texts of at most this many characters are tokenized on the JS thread (about half a millisecond). */
export const INLINE_MAX_CHARS = 1024;

/** Conversations of at most this many messages are rendered on the JS thread (a few milliseconds at most). */
export const INLINE_MAX_MESSAGES = 64;

/** Where prompt texts are tokenized and conversations rendered. */
export interface PromptEncoder {
  /** The text's ids (or, with a bound, why it cannot fit); rejects when the tokenizer fails on it. */
  encode(text: string, bound: PromptBound | null): Promise<BoundedIds>;
  /** The conversation through the chat template; rejects with the template's own error (an ApiError when a worker failed). */
  render(messages: ChatMessage[], opts: ChatTemplateOptions): Promise<string>;
  /** Worker threads tokenizing long texts now (0: every text on the JS thread). */
  readonly workers: number;
  close(): Promise<void>;
}

/** Every text on the JS thread. */
export function inlineEncoder(tokenizer: LoadedTokenizer): PromptEncoder {
  return {
    encode: async (text, bound) => boundedEncode((t) => tokenizer.encode(t), bound, text),
    render: async (messages, opts) => tokenizer.applyChatTemplate(messages, opts),
    workers: 0,
    close: async () => {},
  };
}

interface Pending { resolve(r: BoundedIds | string): void; reject(err: Error): void; chars: number }

/** What a text gets once the server stops: the 503 every route answers then (nothing is tokenized for it). */
const shuttingDown = () => new ApiError(503, 'the server is shutting down', 'unavailable');

interface Slot { worker: Worker; pending: Map<number, Pending>; chars: number; failed: boolean }

function compiledWorker(): string | null {
  const here = fileURLToPath(new URL('./tokenize-worker.js', import.meta.url));
  if (existsSync(here)) return here;
  const built = path.join(REPO_ROOT, 'dist', 'src', 'serve', 'tokenize-worker.js');
  return existsSync(built) ? built : null;
}

export interface TokenizePoolOptions {
  /** Called once per worker that fails (its texts in flight are rejected; later texts go to the others, or the JS thread). */
  onFailure?: (err: Error) => void;
  /** Tests only: hold texts of at least minChars characters until gate[0] is set (see tokenize-worker.ts). */
  hold?: TokenizeWorkerData['hold'];
}

export class TokenizePool implements PromptEncoder {
  private readonly slots: Slot[];
  private nextId = 0;
  private closing = false;

  /** Short texts and conversations, and everything once no worker is left: the JS thread. */
  private readonly local: PromptEncoder;

  private constructor(file: string, parts: TokenizerParts, n: number, tokenizer: LoadedTokenizer, private readonly o: TokenizePoolOptions) {
    this.local = inlineEncoder(tokenizer);
    const data: TokenizeWorkerData = { parts, ...(o.hold ? { hold: o.hold } : {}) };
    this.slots = Array.from({ length: n }, () => {
      const slot: Slot = { worker: new Worker(file, { workerData: data }), pending: new Map(), chars: 0, failed: false };
      slot.worker.unref(); // never what keeps the process alive
      slot.worker.on('message', (m: TokenizeReply) => {
        const p = slot.pending.get(m.id);
        if (!p) return;
        slot.pending.delete(m.id);
        slot.chars -= p.chars;
        if ('error' in m) p.reject(new Error(m.error));
        else p.resolve('text' in m ? m.text : m.result);
      });
      slot.worker.on('error', (err) => this.fail(slot, err));
      slot.worker.on('exit', (code) => { if (!this.closing) this.fail(slot, new Error(`the tokenizer worker exited (code ${code})`)); });
      return slot;
    });
  }

  /**
   * `workers` threads tokenizing texts longer than INLINE_MAX_CHARS; an encoder for the JS thread
   * alone when `workers` is 0 or there is no compiled worker. `parts`: what `tokenizer` was built from.
   */
  static start(parts: TokenizerParts, tokenizer: LoadedTokenizer, workers: number, o: TokenizePoolOptions = {}): PromptEncoder {
    const file = workers > 0 ? compiledWorker() : null;
    return file === null ? inlineEncoder(tokenizer) : new TokenizePool(file, parts, workers, tokenizer, o);
  }

  get workers(): number {
    return this.slots.filter((s) => !s.failed).length;
  }

  /** Texts on the workers now (sent, not yet answered). */
  get inFlight(): number {
    return this.slots.reduce((n, s) => n + s.pending.size, 0);
  }

  encode(text: string, bound: PromptBound | null): Promise<BoundedIds> {
    if (this.closing) return Promise.reject(shuttingDown());
    const slot = this.idlest();
    if (text.length <= INLINE_MAX_CHARS || slot === undefined) return this.local.encode(text, bound);
    // A text the byte bound refuses is not copied to a worker at all.
    const over = bound === null ? null : byteBound(bound, text);
    if (over !== null) return Promise.resolve(over);
    return this.send(slot, { id: this.nextId++, kind: 'encode', text, bound }, text.length) as Promise<BoundedIds>;
  }

  render(messages: ChatMessage[], opts: ChatTemplateOptions): Promise<string> {
    if (this.closing) return Promise.reject(shuttingDown());
    const slot = this.idlest();
    if (messages.length <= INLINE_MAX_MESSAGES || slot === undefined) return this.local.render(messages, opts);
    // A message weighs what ~100 characters of text do in the workers' queues.
    return this.send(slot, { id: this.nextId++, kind: 'template', messages, opts }, messages.length * 100) as Promise<string>;
  }

  /** The live worker with the fewest characters waiting (one huge text holds up only what queues behind it there). */
  private idlest(): Slot | undefined {
    let slot: Slot | undefined;
    for (const s of this.slots) if (!s.failed && (slot === undefined || s.chars < slot.chars)) slot = s;
    return slot;
  }

  private send(slot: Slot, req: TokenizeRequest, chars: number): Promise<BoundedIds | string> {
    return new Promise((resolve, reject) => {
      slot.pending.set(req.id, { resolve, reject, chars });
      slot.chars += chars;
      slot.worker.postMessage(req);
    });
  }

  private fail(slot: Slot, err: Error): void {
    if (slot.failed) return;
    slot.failed = true;
    const e = new ApiError(500, `the tokenizer worker failed: ${err.message}`, 'server');
    for (const p of slot.pending.values()) p.reject(e);
    slot.pending.clear();
    slot.chars = 0;
    this.o.onFailure?.(e);
  }

  async close(): Promise<void> {
    this.closing = true;
    const e = shuttingDown();
    for (const s of this.slots) {
      for (const p of s.pending.values()) p.reject(e);
      s.pending.clear();
    }
    await Promise.all(this.slots.map((s) => s.worker.terminate()));
  }
}
