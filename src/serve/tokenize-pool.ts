// Prompt texts -> token ids for `bench serve` without stalling the server's one JS thread: a text
// longer than INLINE_MAX_CHARS is tokenized on a worker thread (a 1 MB text takes seconds, during
// which no stream would get a chunk), a shorter one on the JS thread (a worker's round trip would
// cost about what tokenizing it does). Each worker builds the same tokenizer from a copy of the
// parts the main thread built its own from, and runs the same bounded encode (prompt-bound.ts).
// The worker is dist/src/serve/tokenize-worker.js (running from sources, e.g. under vitest, the
// compiled copy `npm run build` made; none: every text on the JS thread).
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { LoadedTokenizer, TokenizerParts } from '../model/tokenizer.js';
import { REPO_ROOT } from '../util/version.js';
import { ApiError } from './errors.js';
import { boundedEncode, byteBound, type BoundedIds, type PromptBound } from './prompt-bound.js';
import type { TokenizeReply, TokenizeRequest, TokenizeWorkerData } from './tokenize-worker.js';

/** `--tokenizer-workers`' default: a second worker takes the texts behind a huge one. */
export const DEFAULT_TOKENIZER_WORKERS = 2;
/** `--tokenizer-workers`' bound (each worker holds its own copy of the tokenizer, ~100 MB for Qwen3.5's). */
export const MAX_TOKENIZER_WORKERS = 64;

/** Texts of at most this many characters are tokenized on the JS thread (about half a millisecond). */
export const INLINE_MAX_CHARS = 1024;

/** Where prompt texts are tokenized. */
export interface PromptEncoder {
  /** The text's ids (or, with a bound, why it cannot fit); rejects when the tokenizer fails on it. */
  encode(text: string, bound: PromptBound | null): Promise<BoundedIds>;
  /** Worker threads tokenizing long texts now (0: every text on the JS thread). */
  readonly workers: number;
  close(): Promise<void>;
}

/** Every text on the JS thread. */
export function inlineEncoder(tokenizer: LoadedTokenizer): PromptEncoder {
  return {
    encode: async (text, bound) => boundedEncode((t) => tokenizer.encode(t), bound, text),
    workers: 0,
    close: async () => {},
  };
}

interface Pending { resolve(r: BoundedIds): void; reject(err: Error): void; chars: number }

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

  private constructor(file: string, parts: TokenizerParts, n: number, private readonly tokenizer: LoadedTokenizer, private readonly o: TokenizePoolOptions) {
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
        else p.resolve(m.result);
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
    // The least-loaded worker (characters waiting), so one huge text holds up only the texts behind it on its own worker.
    let slot: Slot | undefined;
    for (const s of this.slots) if (!s.failed && (slot === undefined || s.chars < slot.chars)) slot = s;
    if (text.length <= INLINE_MAX_CHARS || slot === undefined || this.closing) {
      try {
        return Promise.resolve(boundedEncode((t) => this.tokenizer.encode(t), bound, text));
      } catch (err) {
        return Promise.reject(err as Error);
      }
    }
    // A text the byte bound refuses is not copied to a worker at all.
    const over = bound === null ? null : byteBound(bound, text);
    if (over !== null) return Promise.resolve(over);
    const id = this.nextId++;
    const target = slot;
    return new Promise((resolve, reject) => {
      target.pending.set(id, { resolve, reject, chars: text.length });
      target.chars += text.length;
      target.worker.postMessage({ id, text, bound } satisfies TokenizeRequest);
    });
  }

  private fail(slot: Slot, err: Error): void {
    if (slot.failed) return;
    slot.failed = true;
    const e = new Error(`the tokenizer worker failed: ${err.message}`);
    for (const p of slot.pending.values()) p.reject(e);
    slot.pending.clear();
    slot.chars = 0;
    this.o.onFailure?.(e);
  }

  async close(): Promise<void> {
    this.closing = true;
    const e = new ApiError(503, 'the server is shutting down', 'unavailable');
    for (const s of this.slots) {
      for (const p of s.pending.values()) p.reject(e);
      s.pending.clear();
    }
    await Promise.all(this.slots.map((s) => s.worker.terminate()));
  }
}
