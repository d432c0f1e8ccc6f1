// Kill-safe output files for --output PREFIX: every write is synchronous and reaches the disk before the
// next row starts, so a SIGKILL leaves every finished row behind.
import { closeSync, fsyncSync, openSync, renameSync, rmSync, writeSync } from 'node:fs';
import { e2eMs, ttftOf, type TimedRequest } from './metrics.js';

/** Append-only file written with write(2) + fsync(2) per record. */
export class SyncAppender {
  private fd: number | null;

  constructor(readonly file: string) {
    this.fd = openSync(file, 'w');
  }

  append(text: string): void {
    if (this.fd === null) throw new Error(`${this.file} is closed`);
    const buf = Buffer.from(text, 'utf8');
    let off = 0;
    while (off < buf.length) off += writeSync(this.fd, buf, off, buf.length - off);
    fsyncSync(this.fd);
  }

  close(): void {
    if (this.fd !== null) {
      closeSync(this.fd);
      this.fd = null;
    }
  }
}

/** Replace a file atomically: write a sibling, fsync it, rename it over the target. */
export function writeFileAtomic(file: string, text: string): void {
  const tmp = `${file}.tmp-${process.pid}`;
  const fd = openSync(tmp, 'w');
  try {
    try {
      const buf = Buffer.from(text, 'utf8');
      let off = 0;
      while (off < buf.length) off += writeSync(fd, buf, off, buf.length - off);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, file);
  } catch (err) {
    // A failed write (a full disk) leaves the file as it was and no half-written sibling.
    try { rmSync(tmp, { force: true }); } catch { /* the write's own error is the one to report */ }
    throw err;
  }
}

/** One PREFIX.jsonl line: a timed request's raw native timings. */
export function requestLine(isl: number, osl: number, concurrency: number, t: TimedRequest, firstPass: number): string {
  const r = t.result;
  const gaps: number[] = [];
  for (let k = 1; k < r.tokenMs.length; k++) gaps.push(r.tokenMs[k]! - r.tokenMs[k - 1]!);
  return JSON.stringify({
    isl,
    osl,
    concurrency,
    pass: t.pass - firstPass,
    session: t.session,
    request_id: r.id,
    prompt_tokens: r.promptTokens,
    cached_prompt_tokens: r.cachedPromptTokens,
    generated_tokens: r.tokens.length,
    finish_reason: r.finishReason,
    enqueue_ms: r.enqueueMs,
    ttft_ms: ttftOf(r),
    e2e_ms: e2eMs(r),
    prefill_chunk_ms: r.prefillChunkMs,
    prefill_chunks_to_first: r.prefillChunksToFirst ?? null,
    itl_ms: gaps,
  }) + '\n';
}
