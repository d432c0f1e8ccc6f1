// llama.cpp built natively for this machine (scripts/build-llama-native.sh): found, described, and run
// through its own tools on a GGUF: llama-bench for prefill and single-stream decode, llama-batched-bench
// for the aggregate decode of several sequences. The strongest llama.cpp anchor for bench:peer (the
// prebuilt library node-llama-cpp ships picks one of its per-ISA CPU builds at load time, compiled
// without -march=native). Both tools load the weights into their own memory (`-lm none`), as this
// engine does, not mapped from the page cache: where the page cache's pages sit is the host's doing,
// and mapped, llama.cpp's bf16 decode once read 8.6 tok/s against 12.5 loaded, minutes apart on one
// machine (docs/performance.md, "An Intel Xeon with AMX").
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { REPO_ROOT } from '../src/util/version.js';

export interface NativeLlama {
  bin: string;
  /** The source commit it was built from (the bundled release's). */
  commit: string | null;
  /** One line for headers and JSON. */
  describe: string;
}

/** The main native build when scripts/build-llama-native.sh has made one; null otherwise. */
export function findNativeLlama(): NativeLlama | null {
  return findBuild('--print');
}

/**
 * On a CPU with AMX, the build that keeps it (scripts/build-llama-native.sh): its product crashes on
 * more than one token row of a Qwen3.5 GGUF, so it runs only one-token batches; null elsewhere.
 */
export function findNativeLlamaAmx(): NativeLlama | null {
  return findBuild('--print-amx');
}

function findBuild(which: '--print' | '--print-amx'): NativeLlama | null {
  let bin: string;
  try {
    bin = execFileSync('bash', [path.join(REPO_ROOT, 'scripts', 'build-llama-native.sh'), which], { encoding: 'utf8', cwd: REPO_ROOT }).trim();
  } catch {
    return null;
  }
  const stamp = path.join(bin, '..', 'lumen-source-commit');
  const commit = existsSync(stamp) ? readFileSync(stamp, 'utf8').trim() : null;
  const flagsFile = path.join(bin, '..', 'lumen-build-flags');
  const flags = existsSync(flagsFile) ? readFileSync(flagsFile, 'utf8').trim() : 'GGML_NATIVE=ON';
  return { bin, commit, describe: `native build (${flags}) of the bundled source ${commit?.slice(0, 12) ?? '?'} at ${bin}` };
}

function run(n: NativeLlama, tool: string, args: string[]): string {
  try {
    // stdout only: llama-bench prints its JSON and llama-batched-bench its jsonl there (its LOG
    // lines go to stdout); stderr, the tools' progress and errors, is kept for the error below.
    return execFileSync(path.join(n.bin, tool), args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 64 << 20, timeout: 900_000 });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`${tool} ${args.join(' ')} failed: ${(e.stderr ?? e.message).trim().split('\n').slice(-3).join(' | ')}`);
  }
}

/** What one llama-bench test was asked for: the file, the threads, and its prompt / generation / depth. */
export interface LlamaBenchAsk { model: string; threads: number; prompt: number; gen: number; depth: number }

/** The fields of a llama-bench JSON row that say which test it is (tools/llama-bench/llama-bench.cpp). */
interface LlamaBenchRow {
  model_filename: string; n_threads: number; flash_attn: number; load_mode: string; n_prompt: number; n_gen: number; n_depth: number; avg_ts: number;
}

/**
 * The tokens/s of the test asked for, from llama-bench's `-o json` output: the row with that prompt,
 * generation and depth, which must also be of that file and thread count with flash attention on
 * (llama-bench prints `flash_attn` as its enum: 1 = enabled) and the weights loaded (`load_mode`
 * none). A row that differs in any of those is an error naming each difference, not a figure of
 * some other test.
 */
export function parseLlamaBench(out: string, ask: LlamaBenchAsk): number {
  const open = out.indexOf('[');
  const close = out.lastIndexOf(']');
  if (open < 0 || close < open) throw new Error(`llama-bench printed no JSON array (asked for ${describeAsk(ask)})`);
  const rows = JSON.parse(out.slice(open, close + 1)) as Partial<LlamaBenchRow>[];
  const row = rows.find((r) => r.n_prompt === ask.prompt && r.n_gen === ask.gen && (r.n_depth ?? 0) === ask.depth);
  if (row === undefined) throw new Error(`llama-bench printed no result for ${describeAsk(ask)}`);
  const wrong: string[] = [];
  if (row.model_filename !== ask.model) wrong.push(`model_filename ${JSON.stringify(row.model_filename)}, asked ${JSON.stringify(ask.model)}`);
  if (row.n_threads !== ask.threads) wrong.push(`n_threads ${String(row.n_threads)}, asked ${ask.threads}`);
  if (row.flash_attn !== 1) wrong.push(`flash_attn ${String(row.flash_attn)}, asked 1 (on)`);
  if (row.load_mode !== 'none') wrong.push(`load_mode ${JSON.stringify(row.load_mode)}, asked "none" (weights loaded, not mapped)`);
  if (typeof row.avg_ts !== 'number' || !(row.avg_ts > 0)) wrong.push(`avg_ts ${String(row.avg_ts)}, not a rate`);
  if (wrong.length > 0) throw new Error(`llama-bench's row for ${describeAsk(ask)} is not the test asked for: ${wrong.join('; ')}`);
  return row.avg_ts!;
}

const describeAsk = (a: LlamaBenchAsk) => `prompt ${a.prompt}, gen ${a.gen}, depth ${a.depth}`;

/**
 * llama-bench: tokens/s of one test (a prompt of `prompt` tokens, or `gen` tokens after `depth` tokens
 * of context), flash attention on; `oneTokenBatches` makes every batch one token (`-ub 1`: the depth's
 * prompt too, untimed), for the AMX build.
 */
export function llamaBench(n: NativeLlama, gguf: string, threads: number, t: { prompt: number; gen: number; depth: number },
                           oneTokenBatches = false): number {
  const out = run(n, 'llama-bench', ['-m', gguf, '-t', String(threads), '-fa', '1', '-ngl', '0', '-lm', 'none', '-r', '1', '-o', 'json',
    '-p', String(t.prompt), '-n', String(t.gen), '-d', String(t.depth), ...(oneTokenBatches ? ['-ub', '1'] : [])]);
  return parseLlamaBench(out, { model: gguf, threads, ...t });
}

/** What one llama-batched-bench run was asked for: threads, and `sequences` sequences of a `prompt`-token prompt and `gen` tokens. */
export interface BatchedAsk { threads: number; prompt: number; gen: number; sequences: number }

/**
 * The aggregate decode tokens/s (`speed_tg`) from llama-batched-bench's `--output-format jsonl`
 * output: the line of the prompt length, generation length and sequence count asked for, which must
 * also be of that thread count (both kinds) with flash attention on. It does not print the file.
 */
export function parseBatchedBench(out: string, ask: BatchedAsk): number {
  const lines = out.split('\n').filter((l) => l.startsWith('{') && l.includes('"speed_tg"'));
  if (lines.length === 0) throw new Error('llama-batched-bench printed no jsonl result');
  const rows = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
  const row = rows.find((r) => r.pp === ask.prompt && r.tg === ask.gen && r.pl === ask.sequences);
  const what = `pp ${ask.prompt}, tg ${ask.gen}, pl ${ask.sequences}`;
  if (row === undefined) throw new Error(`llama-batched-bench printed no result for ${what}`);
  const wrong: string[] = [];
  if (row.n_threads !== ask.threads) wrong.push(`n_threads ${String(row.n_threads)}, asked ${ask.threads}`);
  if (row.n_threads_batch !== ask.threads) wrong.push(`n_threads_batch ${String(row.n_threads_batch)}, asked ${ask.threads}`);
  if (row.flash_attn !== 1) wrong.push(`flash_attn ${String(row.flash_attn)}, asked 1 (on)`);
  if (typeof row.speed_tg !== 'number' || !(row.speed_tg > 0)) wrong.push(`speed_tg ${String(row.speed_tg)}, not a rate`);
  if (wrong.length > 0) throw new Error(`llama-batched-bench's result for ${what} is not the run asked for: ${wrong.join('; ')}`);
  return row.speed_tg as number;
}

/** llama-batched-bench: the aggregate decode tokens/s of `sequences` sequences after each prefilled `prompt` tokens. */
export function llamaBatchedDecode(n: NativeLlama, gguf: string, threads: number, prompt: number, gen: number, sequences: number): number {
  const out = run(n, 'llama-batched-bench', ['-m', gguf, '-t', String(threads), '-tb', String(threads), '-fa', 'on', '-ngl', '0', '-lm', 'none',
    '-c', String(sequences * (prompt + gen) + 16), '-b', '2048', '-ub', '512', '-npp', String(prompt), '-ntg', String(gen), '-npl', String(sequences),
    '--output-format', 'jsonl']);
  return parseBatchedBench(out, { threads, prompt, gen, sequences });
}
