// llama.cpp built natively for this machine (scripts/build-llama-native.sh): found, described, and run
// through its own tools on a GGUF: llama-bench for prefill and single-stream decode, llama-batched-bench
// for the aggregate decode of several sequences. The strongest llama.cpp anchor for bench:peer (the
// prebuilt library node-llama-cpp ships picks one of its per-ISA CPU builds at load time, compiled
// without -march=native).
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

/** The native build when scripts/build-llama-native.sh has made one; null otherwise. */
export function findNativeLlama(): NativeLlama | null {
  let bin: string;
  try {
    bin = execFileSync('bash', [path.join(REPO_ROOT, 'scripts', 'build-llama-native.sh'), '--print'], { encoding: 'utf8', cwd: REPO_ROOT }).trim();
  } catch {
    return null;
  }
  const stamp = path.join(bin, '..', 'lumen-source-commit');
  const commit = existsSync(stamp) ? readFileSync(stamp, 'utf8').trim() : null;
  return { bin, commit, describe: `native build (GGML_NATIVE=ON) of the bundled source ${commit?.slice(0, 12) ?? '?'} at ${bin}` };
}

function run(n: NativeLlama, tool: string, args: string[]): string {
  try {
    // Both streams: the tools print their results on stdout or through their logger.
    return execFileSync(path.join(n.bin, tool), args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 64 << 20, timeout: 900_000 });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`${tool} ${args.join(' ')} failed: ${(e.stderr ?? e.message).trim().split('\n').slice(-3).join(' | ')}`);
  }
}

/** llama-bench: tokens/s of one test (a prompt of `prompt` tokens, or `gen` tokens after `depth` tokens of context), flash attention on. */
export function llamaBench(n: NativeLlama, gguf: string, threads: number, t: { prompt: number; gen: number; depth: number }): number {
  const out = run(n, 'llama-bench', ['-m', gguf, '-t', String(threads), '-fa', '1', '-ngl', '0', '-r', '1', '-o', 'json',
    '-p', String(t.prompt), '-n', String(t.gen), '-d', String(t.depth)]);
  const rows = JSON.parse(out.slice(out.indexOf('['), out.lastIndexOf(']') + 1)) as { avg_ts: number; n_prompt: number; n_gen: number }[];
  const row = rows.find((r) => r.n_prompt === t.prompt && r.n_gen === t.gen);
  if (row === undefined) throw new Error(`llama-bench printed no result for prompt ${t.prompt}, gen ${t.gen}`);
  return row.avg_ts;
}

/** llama-batched-bench: the aggregate decode tokens/s of `sequences` sequences after each prefilled `prompt` tokens. */
export function llamaBatchedDecode(n: NativeLlama, gguf: string, threads: number, prompt: number, gen: number, sequences: number): number {
  const out = run(n, 'llama-batched-bench', ['-m', gguf, '-t', String(threads), '-tb', String(threads), '-fa', 'on', '-ngl', '0',
    '-c', String(sequences * (prompt + gen) + 16), '-b', '2048', '-ub', '512', '-npp', String(prompt), '-ntg', String(gen), '-npl', String(sequences),
    '--output-format', 'jsonl']);
  const line = out.split('\n').find((l) => l.startsWith('{') && l.includes('"speed_tg"'));
  if (line === undefined) throw new Error('llama-batched-bench printed no jsonl result');
  return (JSON.parse(line) as { speed_tg: number }).speed_tg;
}
