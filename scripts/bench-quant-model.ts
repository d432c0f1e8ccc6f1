// The weight files bench:peer measures per `--quant` entry: bf16 is today's pair (our engine on the
// safetensors checkpoint, llama.cpp on its bf16 GGUF, scripts/bench-model.ts); every other type is
// one GGUF that both engines load, made once from the same synthetic checkpoint by the project's
// converter (the code `bench convert --dtype TYPE` runs). Every GGUF (bf16's too) is cached in
// .models/ under a name that carries a hash of the converter's code, the versions of the packages it
// imports, the source checkpoint's bytes and the type, so a changed converter, package or source
// makes a new file (and the stale one is removed).
import { createHash } from 'node:crypto';
import { closeSync, existsSync, openSync, readdirSync, readFileSync, readSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { OUT_DTYPES, writeGgufParallel, type OutDtype } from '../src/convert/convert.js';
import { loadCheckpoint } from '../src/model/checkpoint.js';
import { UsageError } from '../src/util/usage-error.js';
import { REPO_ROOT } from '../src/util/version.js';
import { ensureBenchModel } from './bench-model.js';

/** `--quant`'s default: the bf16 pair of the earlier figures. */
export const DEFAULT_QUANTS = 'bf16';

/** `--quant LIST`: comma-separated `bench convert --dtype` types, each once. */
export function parseQuantList(value: string): OutDtype[] {
  const parts = value.split(',').map((s) => s.trim().toLowerCase());
  if (parts.every((p) => p === '')) throw new UsageError('--quant: empty list (e.g. --quant q8_0,q4_k_m)');
  const out: OutDtype[] = [];
  for (const p of parts) {
    if (p === '') throw new UsageError(`--quant: '${value}' has an empty entry`);
    if (!(OUT_DTYPES as readonly string[]).includes(p)) throw new UsageError(`--quant: '${p}' is not one of ${OUT_DTYPES.join(', ')}`);
    if (out.includes(p as OutDtype)) throw new UsageError(`--quant: '${p}' is listed twice`);
    out.push(p as OutDtype);
  }
  return out;
}

export interface PeerFiles {
  quant: OutDtype;
  /** What our engine loads: the safetensors directory (bf16) or the GGUF file. */
  ours: string;
  /** The GGUF llama.cpp loads (the same file as `ours` except for bf16). */
  llama: string;
}

const MODELS_DIR = (root: string) => path.join(root, '.models');
const KEY_LEN = 12;

/** The cached GGUF of `quant` made from the `preset` checkpoint, for the content key `key`. */
export function quantModelFile(modelsDir: string, preset: string, quant: OutDtype, key: string): string {
  return path.join(modelsDir, `peer-${preset}-${quant}-${key.slice(0, KEY_LEN)}.gguf`);
}

/** Cached GGUFs of the same preset and type under another key (a changed converter or source). */
export function staleQuantModels(modelsDir: string, preset: string, quant: OutDtype, current: string): string[] {
  if (!existsSync(modelsDir)) return [];
  const prefix = `peer-${preset}-${quant}-`;
  const re = new RegExp(`^[0-9a-f]{${KEY_LEN}}\\.gguf$`);
  return readdirSync(modelsDir)
    .filter((f) => f.startsWith(prefix) && re.test(f.slice(prefix.length)))
    .map((f) => path.join(modelsDir, f))
    .filter((f) => f !== current);
}

function hashFileInto(h: ReturnType<typeof createHash>, file: string): void {
  const fd = openSync(file, 'r');
  try {
    const buf = Buffer.allocUnsafe(16 << 20);
    for (;;) {
      const n = readSync(fd, buf, 0, buf.length, null);
      if (n === 0) break;
      h.update(buf.subarray(0, n));
    }
  } finally {
    closeSync(fd);
  }
}

/**
 * The converter's code as it runs: every module of src/convert (compiled or not, whichever this
 * process loaded) and every project module they import, transitively (the checkpoint loader, the
 * tensor-role table, the GGUF reader, the tokenizer files ...): a change to any of them can change
 * the file written.
 */
export function converterCodeFiles(): string[] {
  const convertDir = fileURLToPath(new URL('../src/convert/', import.meta.url));
  const srcRoot = path.dirname(convertDir);
  const ext = path.extname(fileURLToPath(import.meta.url));
  const seen = new Set<string>();
  const todo = readdirSync(convertDir).filter((f) => f.endsWith(ext) && !f.endsWith(`.d${ext}`)).map((f) => path.join(convertDir, f));
  while (todo.length > 0) {
    const f = todo.pop()!;
    if (seen.has(f)) continue;
    seen.add(f);
    // Relative imports name the compiled file ('./x.js'); the process may run the .ts source.
    for (const m of readFileSync(f, 'utf8').matchAll(/(?:from|import)\s*\(?\s*'(\.\.?\/[^']+)'/g)) {
      const target = path.resolve(path.dirname(f), m[1]!.replace(/\.js$/, ext));
      if (target.startsWith(srcRoot + path.sep) && existsSync(target)) todo.push(target);
    }
  }
  return [...seen].sort();
}

/**
 * The npm packages those modules import (the tokenizer and template libraries), as `name@version`
 * from their installed package.json (`?` where it cannot be read), sorted: an upgrade of one can
 * change the file written as much as a change to the project's own code.
 */
export function converterPackages(codeFiles: readonly string[] = converterCodeFiles(), nodeModules = path.join(REPO_ROOT, 'node_modules')): string[] {
  const names = new Set<string>();
  for (const f of codeFiles)
    for (const m of readFileSync(f, 'utf8').matchAll(/(?:from|import)\s*\(?\s*'([^.'][^']*)'/g)) {
      const spec = m[1]!;
      if (spec.startsWith('node:')) continue;
      const parts = spec.split('/');
      names.add(spec.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!);
    }
  return [...names].sort().map((name) => {
    try {
      const version = (JSON.parse(readFileSync(path.join(nodeModules, name, 'package.json'), 'utf8')) as { version?: unknown }).version;
      return `${name}@${typeof version === 'string' ? version : '?'}`;
    } catch {
      return `${name}@?`;
    }
  });
}

/** sha256 (hex) over the type, the converter's code, the packages it imports and the source checkpoint's files. */
export function conversionKey(sourceDir: string, quant: OutDtype, codeFiles: readonly string[] = converterCodeFiles(),
  packages: readonly string[] = converterPackages(codeFiles)): string {
  const h = createHash('sha256');
  h.update(`peer quant ${quant}\n`);
  for (const f of codeFiles) {
    h.update(`${path.basename(f)}\n`);
    h.update(readFileSync(f));
  }
  for (const p of packages) h.update(`package ${p}\n`);
  for (const f of readdirSync(sourceDir).sort()) {
    const p = path.join(sourceDir, f);
    if (!statSync(p).isFile()) continue;
    h.update(`${f}\n`);
    hashFileInto(h, p);
  }
  return h.digest('hex');
}

/**
 * The files of each quant: bf16 as bench-model.ts makes them; the others converted once (with
 * `threads` quantizer threads) and reused while their key matches.
 */
export async function ensurePeerFiles(root: string, preset: string, quants: readonly OutDtype[], threads: number, log: (s: string) => void): Promise<PeerFiles[]> {
  const base = await ensureBenchModel(preset, log);
  // The bf16 GGUF of earlier versions, named without a key: never checked against its source.
  const unkeyed = `${base.dir}.gguf`;
  if (existsSync(unkeyed)) {
    log(`removing ${unkeyed} (made without a content key)`);
    rmSync(unkeyed, { force: true });
  }
  const out: PeerFiles[] = [];
  for (const quant of quants) {
    const file = quantModelFile(MODELS_DIR(root), preset, quant, conversionKey(base.dir, quant));
    for (const stale of staleQuantModels(MODELS_DIR(root), preset, quant, file)) {
      log(`removing ${stale} (made by another converter or from another source)`);
      rmSync(stale, { force: true });
    }
    if (!existsSync(file)) {
      log(`converting ${base.dir} to ${quant} (up to ${threads} quantizer thread${threads === 1 ? '' : 's'}; once, then cached) ...`);
      const res = await writeGgufParallel(loadCheckpoint(base.dir), file, { dtype: quant, threads });
      log(`  wrote ${file}: ${(res.fileBytes / 2 ** 20).toFixed(0)} MiB in ${res.seconds.toFixed(0)} s on ${res.quantizerThreads} thread(s)`);
    }
    out.push({ quant, ours: quant === 'bf16' ? base.dir : file, llama: file });
  }
  return out;
}
