import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

/** Repository root (dist/src/util -> ../../..; src/util under vitest -> ../..). */
export const REPO_ROOT: string = (() => {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    try {
      const pkg = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as { name?: string };
      if (pkg.name === 'lumen-bench') return dir;
    } catch { /* keep walking up */ }
    dir = path.dirname(dir);
  }
  throw new Error('cannot locate the lumen-bench package root');
})();

export const TOOL_VERSION: string =
  (JSON.parse(readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string }).version;
