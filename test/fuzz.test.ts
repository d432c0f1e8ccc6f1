// The CI slice of the parser fuzzer: a fixed-seed 500-case run of the compiled fuzzer must end with
// no failures and must really have exercised every file kind (some cases loaded, some rejected).
// Also checks that the fuzzer's judge and watchdog can fail: an unclear error, out-of-range data,
// a hang and a crash are each reported as failures.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { TARGETS } from '../scripts/fuzz/cases.js';
import { checkCheckpoint, judgeError, Violation } from '../scripts/fuzz/oracle.js';
import { Supervisor } from '../scripts/fuzz/supervisor.js';
import type { Summary } from '../scripts/fuzz/summary.js';
import { loadCheckpoint } from '../src/model/checkpoint.js';
import { CheckpointError } from '../src/model/types.js';
import { cleanupAllFixtures, smallFixture } from './helpers/synth-fixture.js';

const run = promisify(execFile);
const FUZZ = path.resolve('dist/scripts/fuzz.js');
const dir = mkdtempSync(path.join(tmpdir(), 'lumen-fuzz-test-'));
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
  cleanupAllFixtures();
});

describe('fuzz slice (seed 1, 500 cases)', () => {
  it('loads or cleanly rejects every case, and exercises every file kind', async () => {
    const json = path.join(dir, 'slice.json');
    let stdout = '';
    let code = 0;
    try {
      ({ stdout } = await run(process.execPath, [FUZZ, '--cases', '500', '--seed', '1', '--json', json], { maxBuffer: 16 << 20 }));
    } catch (err) {
      const e = err as { code?: number; stdout?: string; stderr?: string };
      code = e.code ?? -1;
      stdout = `${e.stdout ?? ''}${e.stderr ?? ''}`;
    }
    const s = JSON.parse(readFileSync(json, 'utf8')) as Summary;
    expect(s.failures, stdout).toEqual([]);
    expect(code, stdout).toBe(0);
    expect(s.cases).toBe(500);
    expect(s.outcomes.loaded + s.outcomes.rejected).toBe(500);
    for (const t of TARGETS) {
      const c = s.targets[t];
      expect(c, t).toBeDefined();
      expect(c!.loaded, `${t}: some cases load`).toBeGreaterThan(0);
      expect(c!.rejected, `${t}: some cases are rejected`).toBeGreaterThan(0);
    }
    // The rejections are the project's one-line errors naming the file.
    expect(s.messages.length).toBeGreaterThan(50);
    for (const m of s.messages) {
      expect(m.example, m.pattern).toContain('<case>');
      expect(['CheckpointError', 'GgufError', 'UsageError']).toContain(m.errorClass);
    }
    expect(stdout).toMatch(/^fuzz: 500 cases, seed 1: \d+ loaded, \d+ rejected with a clear error, 0 failures/);
  });

  it('the same case number gives the same case (--only)', async () => {
    const full = JSON.parse(readFileSync(path.join(dir, 'slice.json'), 'utf8')) as Summary;
    const pick = full.messages.slice(0, 3).map((m) => m.case);
    const json = path.join(dir, 'only.json');
    await run(process.execPath, [FUZZ, '--seed', '1', '--only', pick.join(','), '--json', json]);
    const again = JSON.parse(readFileSync(json, 'utf8')) as Summary;
    expect(again.cases).toBe(pick.length);
    const examples = new Set(again.messages.map((m) => m.example));
    for (const m of full.messages.slice(0, 3)) expect(examples.has(m.example), m.example).toBe(true);
  });
});

describe('the fuzzer can fail', () => {
  it('judges errors: only the project classes with a one-line message naming the file are clear', () => {
    const at = '/tmp/case-1';
    expect(judgeError(new CheckpointError(`${at}/config.json: text_config.hidden_size is missing`), at).clear).toBe(true);
    expect(judgeError(new TypeError("Cannot read properties of undefined (reading 'type')"), at).clear).toBe(false);
    expect(judgeError(new SyntaxError('Unexpected token \'x\', "xyz" is not valid JSON'), at).clear).toBe(false);
    expect(judgeError(new CheckpointError('config.json: hidden_size is missing'), at).clear).toBe(false); // no path
    expect(judgeError(new CheckpointError(`${at}/tokenizer.json: cannot build the tokenizer (x.map is not a function)`), at).clear).toBe(false);
    expect(judgeError(new Error(`${at}: plain Error`), at).clear).toBe(false);
  });

  it('catches a load that hands over out-of-range data', async () => {
    const f = await smallFixture();
    const ck = loadCheckpoint(f.dir);
    expect(() => checkCheckpoint(ck, f.dir)).not.toThrow();
    const t = ck.tensors.get('norm.weight')!;
    ck.tensors.set('norm.weight', { ...t, offset: t.offset + 1_000_000_000 });
    expect(() => checkCheckpoint(ck, f.dir)).toThrow(Violation);
    ck.tensors.set('norm.weight', { ...t, nbytes: t.nbytes - 2 });
    expect(() => checkCheckpoint(ck, f.dir)).toThrow(/nbytes/);
    ck.tensors.set('norm.weight', t);
    ck.config.rmsNormEps = Number.NaN;
    expect(() => checkCheckpoint(ck, f.dir)).toThrow(/rmsNormEps/);
  });

  it('reports a hang and a crash of the child as failures, and carries on with a new child', async () => {
    const worker = path.join(dir, 'bad-worker.mjs');
    writeFileSync(worker, [
      "process.on('message', (m) => {",
      "  if (m.path === 'hang') return;",
      "  if (m.path === 'crash') process.kill(process.pid, 'SIGSEGV');",
      "  process.send({ type: 'result', index: m.index, outcome: 'loaded', stage: 'checkpoint', ms: 0, rssBytes: 0 });",
      '});',
      "process.send({ type: 'ready' });",
    ].join('\n'));
    const sup = new Supervisor(worker, 5000); // the real watchdog: only the never-answering case waits for it
    try {
      const req = (index: number, p: string) => ({ type: 'case' as const, index, kind: 'checkpoint' as const, path: p });
      expect((await sup.run(req(0, 'ok'))).outcome).toBe('loaded');
      const hang = await sup.run(req(1, 'hang'));
      expect(hang).toMatchObject({ index: 1, outcome: 'failure', stage: 'hang' });
      const crash = await sup.run(req(2, 'crash'));
      expect(crash).toMatchObject({ index: 2, outcome: 'failure', stage: 'crash' });
      expect(crash.why).toMatch(/SIGSEGV/);
      expect((await sup.run(req(3, 'ok'))).outcome).toBe('loaded');
      expect(sup.starts).toBe(3);
    } finally {
      sup.close();
    }
  });
});
