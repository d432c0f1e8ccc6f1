// An output directory named on the command line, made before any work: each missing level created
// one at a time below the nearest existing one, so every failure is one line naming the flag (Node's
// recursive mkdir loops for ever under some read-only trees, such as /proc).
import { existsSync, mkdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { UsageError } from './usage-error.js';

export function ensureOutputDir(flag: string, dir: string): void {
  const abs = path.resolve(dir);
  const missing: string[] = [];
  let at = abs;
  while (!existsSync(at)) {
    missing.unshift(at);
    const up = path.dirname(at);
    if (up === at) break;
    at = up;
  }
  if (existsSync(at) && !statSync(at).isDirectory()) {
    throw new UsageError(`${flag}: ${at} is a file, not a directory`);
  }
  for (const d of missing) {
    try {
      mkdirSync(d);
    } catch (err) {
      throw new UsageError(`${flag}: cannot create ${d} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
    }
  }
}
