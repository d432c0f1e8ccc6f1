// The embedded default model: the `tiny` synthetic preset (bf16, fixed seed), generated once into a
// cache directory and reused. Generation happens in a temporary sibling directory that is renamed
// into place, so concurrent or killed runs never observe a half-written model.

import { existsSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import { readSafetensorsHeader } from './safetensors.js';
import { writeSynthCheckpoint } from './synth.js';
import { failureText } from '../util/errno-text.js';
import { ensureWritableDir } from '../util/output-dir.js';
import { REPO_ROOT } from '../util/version.js';

/** Bump when the generated content changes (new directory name -> regenerated). */
export const EMBEDDED_MODEL_NAME = 'embedded-tiny-v2';
export const EMBEDDED_SEED = 20260301;

/**
 * Directory of the embedded model: `$LUMEN_CACHE_DIR/embedded-tiny-v2` when LUMEN_CACHE_DIR is set,
 * else `<repo root>/.models/embedded-tiny-v2`.
 */
export function embeddedModelDir(): string {
  const root = process.env.LUMEN_CACHE_DIR ? path.resolve(process.env.LUMEN_CACHE_DIR) : path.join(REPO_ROOT, '.models');
  return path.join(root, EMBEDDED_MODEL_NAME);
}

const REQUIRED = ['config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json', 'generation_config.json'];

/**
 * Every file there, and the weights whole: model.safetensors as long as its own header says (a file
 * truncated since it was written is written again, not loaded). Read from the files themselves, so a
 * cache written by an earlier version, or kept on read-only storage, is used as it is.
 */
function isComplete(dir: string): boolean {
  if (!REQUIRED.every((f) => existsSync(path.join(dir, f)))) return false;
  try {
    const h = readSafetensorsHeader(path.join(dir, 'model.safetensors'));
    let end = 0;
    for (const t of h.tensors.values()) end = Math.max(end, t.offset + t.nbytes);
    return end === h.fileSize;
  } catch {
    return false;
  }
}

/** What names the cache's place in a message: the variable that set it, or the default directory. */
function cacheFlag(): string {
  return process.env.LUMEN_CACHE_DIR ? `LUMEN_CACHE_DIR=${process.env.LUMEN_CACHE_DIR}` : 'the embedded model\'s cache directory (LUMEN_CACHE_DIR places it elsewhere)';
}

/** A load failure of the embedded model, said as the cache's (no flag of the user's named it). */
export function embeddedModelError(dir: string, err: unknown): Error {
  const why = err instanceof Error ? err.message : String(err);
  return new Error(`the embedded model in ${dir} does not load (${why}); remove that directory and it is written again`);
}

let inFlight: Promise<string> | null = null;

/** Returns the embedded model's directory, generating it on first use (about a second). */
export function ensureEmbeddedModel(): Promise<string> {
  const dir = embeddedModelDir();
  if (isComplete(dir)) return Promise.resolve(dir);
  if (!inFlight) {
    inFlight = create(dir).finally(() => { inFlight = null; });
  }
  return inFlight;
}

async function create(dir: string): Promise<string> {
  const parent = path.dirname(dir);
  const base = path.basename(dir);
  // Made one level at a time, and tried: a cache under /proc had Node's recursive mkdir spin for ever.
  ensureWritableDir(cacheFlag(), parent);
  cleanStale(parent, base);
  if (existsSync(dir) && !isComplete(dir)) {
    // Left by something other than this code (renames are atomic): move it aside, then remove it.
    const aside = path.join(parent, `${base}.stale-${process.pid}-${Date.now()}`);
    try {
      renameSync(dir, aside);
      rmSync(aside, { recursive: true, force: true });
    } catch { /* another process may have fixed it meanwhile */ }
  }
  const tmp = path.join(parent, `${base}.tmp-${process.pid}-${Date.now()}-${Math.floor(Math.random() * 1e9)}`);
  try {
    try {
      await writeSynthCheckpoint({ preset: 'tiny', out: tmp, dtype: 'bf16', seed: EMBEDDED_SEED, shards: 1 });
    } catch (err) {
      // A full disk, a directory that went away: said as the cache's, not as a bare errno.
      throw new Error(`${cacheFlag()}: writing the embedded model in ${parent} failed: ${failureText(err)}`);
    }
    try {
      renameSync(tmp, dir);
    } catch (err) {
      // Another process won the race (the target now exists and is not empty): use theirs.
      const code = (err as NodeJS.ErrnoException).code;
      if ((code === 'ENOTEMPTY' || code === 'EEXIST') && isComplete(dir)) return dir;
      throw err;
    }
  } finally {
    if (existsSync(tmp)) rmSync(tmp, { recursive: true, force: true });
  }
  return dir;
}

/** Removes temporary directories of runs that died more than an hour ago. */
function cleanStale(parent: string, base: string): void {
  let names: string[];
  try {
    names = readdirSync(parent);
  } catch {
    return;
  }
  const cutoff = Date.now() - 3600_000;
  for (const n of names) {
    if (!n.startsWith(`${base}.tmp-`) && !n.startsWith(`${base}.stale-`)) continue;
    const p = path.join(parent, n);
    try {
      if (statSync(p).mtimeMs < cutoff) rmSync(p, { recursive: true, force: true });
    } catch { /* raced with another cleaner */ }
  }
}
