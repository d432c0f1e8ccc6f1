// Puts a fuzz case on disk: a fresh directory holding the mutated file, with every untouched file
// of the base checkpoint hard-linked in (never written to, so the base stays valid).
import { linkSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { CaseSpec } from './cases.js';

export interface CaseOnDisk {
  /** The checkpoint directory, or the GGUF file. */
  path: string;
  /** The directory to remove when the case is done. */
  dir: string;
}

export function writeCase(spec: CaseSpec, root: string): CaseOnDisk {
  const dir = path.join(root, `case-${spec.index}`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir);
  if (spec.gguf) {
    const file = path.join(dir, 'model.gguf');
    writeFileSync(file, spec.gguf);
    return { path: file, dir };
  }
  const base = spec.base!;
  const changes = spec.changes!;
  for (const name of base.files.keys()) {
    if (changes.has(name)) continue;
    linkSync(path.join(base.dir, name), path.join(dir, name));
  }
  for (const [name, bytes] of changes) {
    if (bytes !== null) writeFileSync(path.join(dir, name), bytes);
  }
  return { path: dir, dir };
}

export function removeCase(c: CaseOnDisk): void {
  rmSync(c.dir, { recursive: true, force: true });
}
