// vitest's global setup: the tests run `bench` from dist/ (bin/bench.js) and bench serve's tokenizer
// workers run dist/src/serve/tokenize-worker.js, so a dist/ older than the TypeScript it is built from
// would test yesterday's code while the in-process tests test today's. On a clean checkout `npm ci`
// has just built it (the `prepare` script) and nothing is done here; after an edit without a build, it
// is built once before any test runs.
import { execFileSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

function* sources(dir: string): Generator<string> {
  for (const e of readdirSync(path.join(root, dir), { withFileTypes: true })) {
    const rel = path.join(dir, e.name);
    if (e.isDirectory()) yield* sources(rel);
    else if (e.name.endsWith('.ts') && !e.name.endsWith('.d.ts')) yield rel;
  }
}

/** The first source whose built file is missing or older than it, or null. */
function staleSource(): string | null {
  for (const dir of ['src', 'scripts']) {
    for (const rel of sources(dir)) {
      const built = path.join(root, 'dist', rel.replace(/\.ts$/, '.js'));
      let builtAt: number;
      try {
        builtAt = statSync(built).mtimeMs;
      } catch {
        return rel;
      }
      if (statSync(path.join(root, rel)).mtimeMs > builtAt) return rel;
    }
  }
  return null;
}

export default function setup(): void {
  const stale = staleSource();
  if (stale === null) return;
  process.stderr.write(`dist/ is older than ${stale}: building it (tsc -p tsconfig.json) before the tests\n`);
  try {
    execFileSync(process.execPath, [path.join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', path.join(root, 'tsconfig.json')], { stdio: 'inherit' });
  } catch {
    throw new Error('tsc -p tsconfig.json failed (above): the tests run bench from dist/, so fix the build first');
  }
}
