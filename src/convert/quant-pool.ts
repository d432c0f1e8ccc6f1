// Worker threads that quantize chunks of rows in parallel for the GGUF writer. Rows are
// independent, so the bytes are those of the single-threaded path; only the wall time changes.
// Available when running the compiled CLI (dist/): the worker is dist/src/convert/quant-worker.js.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { GgmlType } from './gguf-writer.js';
import type { EncodeReply, EncodeRequest } from './quant-worker.js';

const WORKER = new URL('./quant-worker.js', import.meta.url);

interface Pending { resolve(out: Uint8Array): void; reject(err: Error): void }

export class EncodePool {
  private readonly workers: Worker[];
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;
  private next = 0;
  private failure: Error | null = null;

  private constructor(threads: number) {
    this.workers = Array.from({ length: threads }, () => {
      const w = new Worker(WORKER);
      w.on('message', (m: EncodeReply) => {
        const p = this.pending.get(m.id);
        if (!p) return;
        this.pending.delete(m.id);
        if ('error' in m) p.reject(new Error(m.error));
        else p.resolve(m.out);
      });
      w.on('error', (err) => this.fail(err));
      w.on('exit', (code) => { if (code !== 0) this.fail(new Error(`quantizer worker exited with code ${code}`)); });
      return w;
    });
  }

  /** A pool of `threads` workers, or null when there is no compiled worker (running from sources). */
  static create(threads: number): EncodePool | null {
    if (threads < 2 || !existsSync(fileURLToPath(WORKER))) return null;
    return new EncodePool(threads);
  }

  get size(): number {
    return this.workers.length;
  }

  /** Encode `vals` (handed over: do not use it afterwards) as `type` on the next worker. */
  encode(type: GgmlType, vals: Float32Array): Promise<Uint8Array> {
    if (this.failure) return Promise.reject(this.failure);
    const id = this.nextId++;
    const worker = this.workers[this.next]!;
    this.next = (this.next + 1) % this.workers.length;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      worker.postMessage({ id, type, vals } satisfies EncodeRequest, [vals.buffer as ArrayBuffer]);
    });
  }

  private fail(err: Error): void {
    this.failure ??= err;
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.terminate()));
  }
}
