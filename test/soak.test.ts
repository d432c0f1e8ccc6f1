// The CI slice of the soak run (scripts/soak.ts; the long run is `npm run soak -- --minutes 20`):
// 30 seconds of random traffic on the embedded model with cancellations, parking, preemption and
// prefix-cache eviction, checked at every quiescent point for leaked blocks, slots and snapshots,
// for active bytes off their baseline, and for probe requests that drift from their solo tokens.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, expect, it } from 'vitest';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const tmp = mkdtempSync(path.join(os.tmpdir(), 'bench-soak-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

it('30 s of random traffic: no leak, no drift, every result well formed', async () => {
  const json = path.join(tmp, 'soak.json');
  const args = ['--expose-gc', path.join(ROOT, 'dist', 'scripts', 'soak.js'), '--minutes', '0.5', '--seed', '7', '--json', json];
  let code = 0;
  let stderr = '';
  try {
    await promisify(execFile)(process.execPath, args, { cwd: ROOT, timeout: 110_000, killSignal: 'SIGKILL', maxBuffer: 16 << 20 });
  } catch (err) {
    const e = err as { code?: number; stderr?: string };
    code = e.code ?? -1;
    stderr = e.stderr ?? '';
  }
  const s = JSON.parse(readFileSync(json, 'utf8'));
  expect(s.failures, stderr).toEqual([]);
  expect(code).toBe(0);
  // The slice did real work: every round ends in a checked quiescent point with two probes.
  expect(s.rounds).toBeGreaterThanOrEqual(1);
  expect(s.leakChecks).toBe(s.rounds);
  expect(s.probeChecks).toBe(2 * s.rounds);
  expect(s.probeMismatches).toBe(0);
  expect(s.requests).toBeGreaterThan(0);
  expect(s.tokensGenerated).toBeGreaterThan(0);
});
