// What the quantized-GGUF parity tests share: our log-softmax rows from `bench prompt --logits-out`
// (so dist/ must be built), and their comparison with another run's (llama.cpp gives probabilities,
// so logits are compared as log-softmax, i.e. up to a per-position constant).
import { execFile } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { logSoftmax } from './llama-ref.js';

const execFileP = promisify(execFile);
const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const BENCH = join(ROOT, 'bin', 'bench.js');
/** The vocabulary of every synthetic checkpoint (Qwen3.5's). */
export const VOCAB = 248320;
/** Entries below this log-probability are dropped from comparisons (llama.cpp's probabilities underflow there). */
export const LOGPROB_FLOOR = -60;
const ENGINE_TIMEOUT_MS = 100_000;

/** Our log-softmax rows [prompt.length, VOCAB] for `prompt` on the model `--model-path` names (extra flags appended). */
export async function ourLogSoftmax(modelPath: string, prompt: number[], work: string, extra: string[] = []): Promise<Float32Array> {
  const file = join(work, `logits-${prompt.length}.f32`);
  try {
    await execFileP(process.execPath, [BENCH, 'prompt', '--model-path', modelPath, '--prompt-ids', prompt.join(','), '--max-new-tokens', '0',
      '--logits-out', file, '--device', 'cpu', '--threads', '2', ...extra], { cwd: ROOT, maxBuffer: 64 << 20, timeout: ENGINE_TIMEOUT_MS, killSignal: 'SIGKILL' });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`bench prompt failed: ${(e.stderr ?? '').trim() || e.message}`);
  }
  const buf = readFileSync(file);
  rmSync(file, { force: true });
  if (buf.length !== prompt.length * VOCAB * 4) throw new Error(`logits file: ${buf.length} bytes, ${prompt.length * VOCAB * 4} expected`);
  const logits = new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4);
  const out = new Float32Array(logits.length);
  for (let r = 0; r < prompt.length; r++) logSoftmax(logits.subarray(r * VOCAB, (r + 1) * VOCAB), out.subarray(r * VOCAB, (r + 1) * VOCAB));
  return out;
}

/** max |a - b| over the entries both put above LOGPROB_FLOOR (overall and per row), and the share of rows whose argmax agree. */
export function logSoftmaxDiff(a: Float32Array, b: Float32Array, rows: number): { max: number; argmaxAgree: number; rowMax: number[] } {
  let max = 0;
  let agree = 0;
  const rowMax: number[] = [];
  for (let r = 0; r < rows; r++) {
    let rm = 0;
    let ia = 0;
    let ib = 0;
    for (let i = 0; i < VOCAB; i++) {
      const x = a[r * VOCAB + i]!;
      const y = b[r * VOCAB + i]!;
      if (x > a[r * VOCAB + ia]!) ia = i;
      if (y > b[r * VOCAB + ib]!) ib = i;
      if (x > LOGPROB_FLOOR && y > LOGPROB_FLOOR) rm = Math.max(rm, Math.abs(x - y));
    }
    max = Math.max(max, rm);
    rowMax.push(rm);
    if (ia === ib) agree++;
  }
  return { max, argmaxAgree: agree / rows, rowMax };
}
