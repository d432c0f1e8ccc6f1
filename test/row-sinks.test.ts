// The --output files of a sweep (src/bench/row-sinks.ts) when the prefix was used before: nothing of the
// earlier run may sit beside the new run's files as if it were the new run's.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PassThrough, Writable } from 'node:stream';
import { afterAll, describe, expect, it } from 'vitest';
import { writeFileAtomic } from '../src/bench/output.js';
import { runSweep, type SweepIO } from '../src/bench/sweep.js';
import { resolveSweepConfig } from '../src/cli/sweep-options.js';
import { fakeBackend } from './helpers/fake-engine.js';

const tmp = mkdtempSync(path.join(os.tmpdir(), 'bench-sinks-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

function sink(): NodeJS.WritableStream {
  const s = new PassThrough();
  s.resume();
  return s;
}

describe('--output PREFIX over an earlier run', () => {
  it('removes the earlier PREFIX.html and the .tmp-PID leftovers of dead processes before it writes; keeps the rest', async () => {
    const prefix = path.join(tmp, 'run');
    // A process that has exited: its pid names a leftover no one is writing any more.
    const dead = spawnSync(process.execPath, ['-e', '0']).pid!;
    const live = process.ppid;
    const files = {
      [`run.html`]: 'the page of an earlier run',
      [`run.json.tmp-${dead}`]: '{"half": ',
      [`run.html.tmp-${dead}`]: '<html',
      [`run.json.tmp-${live}`]: 'a running writer',
      [`other.html`]: 'another prefix',
      [`runner.json.tmp-${dead}`]: 'another prefix',
      [`run.json.tmp-x`]: 'not a pid',
    };
    for (const [name, text] of Object.entries(files)) writeFileSync(path.join(tmp, name), text);
    const cfg = { ...resolveSweepConfig({ cells: '16:8', concurrency: '1', warmup: '0', blockSize: '4', maxSeq: '256' }), output: prefix };
    const io = { stdout: sink(), stderr: sink(), stderrIsTTY: false, env: {}, argv: ['node', 'bench'], handleSignals: false } as SweepIO;
    expect(await runSweep(cfg, fakeBackend(), io)).toBe(0);
    // runSweep writes no page (the CLI renders it after the sweep): whatever page is there would be the old one.
    expect(existsSync(`${prefix}.html`)).toBe(false);
    expect(readdirSync(tmp).sort()).toEqual(['other.html', 'run.csv', 'run.json', `run.json.tmp-${live}`, 'run.json.tmp-x', 'run.jsonl', `runner.json.tmp-${dead}`].sort());
  });

  it('a directory where PREFIX.html goes: a usage error naming it, before any row runs', async () => {
    const prefix = path.join(tmp, 'dirpage');
    mkdirSync(`${prefix}.html`);
    // Refused with the sweep's usage checks, before any model loads or row runs.
    expect(() => resolveSweepConfig({ cells: '16:8', concurrency: '1', output: prefix })).toThrow(`--output: ${prefix}.html is a directory, not a file`);
    expect(existsSync(`${prefix}.json`)).toBe(false);
  });
});

// /dev/full answers every write with ENOSPC: a full disk, forced, for one of the files.
describe.skipIf(!existsSync('/dev/full'))('an --output file that cannot be written (a full disk)', () => {
  function capture(): { io: SweepIO; out: () => string; err: () => string } {
    const o = new PassThrough();
    const e = new PassThrough();
    let out = '';
    let err = '';
    o.on('data', (d) => { out += String(d); });
    e.on('data', (d) => { err += String(d); });
    return { io: { stdout: o, stderr: e, stderrIsTTY: false, env: {}, argv: ['node', 'bench'], handleSignals: false } as SweepIO, out: () => out, err: () => err };
  }

  it('PREFIX.jsonl full at the first row: the row still reaches stdout, the sweep stops there, exit 1 naming the file and the errno', async () => {
    const prefix = path.join(tmp, 'full-jsonl');
    symlinkSync('/dev/full', `${prefix}.jsonl`);
    const cfg = { ...resolveSweepConfig({ cells: '16:8,32:4', concurrency: '1,2', warmup: '0', blockSize: '4', maxSeq: '256' }), output: prefix };
    const c = capture();
    expect(await runSweep(cfg, fakeBackend(), c.io)).toBe(1);
    const lines = c.out().trim().split('\n');
    expect(lines).toHaveLength(2); // the header and the row measured when the file failed
    expect(lines[1]).toMatch(/^16,8,1,/);
    expect(c.err()).toContain(`--output ${prefix}: writing ${prefix}.jsonl failed: no space left on device (ENOSPC); the sweep stopped after 1 row(s) (stdout has every finished row; the files hold those written before the failure)`);
    // The files hold what was written before: the header, a report of no rows; nothing half-written beside them.
    expect(readFileSync(`${prefix}.csv`, 'utf8').trim().split('\n')).toHaveLength(1);
    expect(JSON.parse(readFileSync(`${prefix}.json`, 'utf8')).rows).toEqual([]);
    expect(readdirSync(tmp).filter((n) => n.startsWith('full-jsonl') && n.includes('.tmp-'))).toEqual([]);
  });

  it('PREFIX.csv full at its header: no row runs, exit 1 naming the file', async () => {
    const prefix = path.join(tmp, 'full-csv');
    symlinkSync('/dev/full', `${prefix}.csv`);
    const cfg = { ...resolveSweepConfig({ cells: '16:8', concurrency: '1,2', warmup: '0', blockSize: '4', maxSeq: '256' }), output: prefix };
    const c = capture();
    expect(await runSweep(cfg, fakeBackend(), c.io)).toBe(1);
    expect(c.out().trim().split('\n')).toHaveLength(1);
    expect(c.err()).toContain(`writing ${prefix}.csv failed: no space left on device (ENOSPC); the sweep stopped after 0 row(s)`);
  });

  it('the report\'s last write failing (the disk fills after the last row): exit 1, the error line, no page rendered', async () => {
    const prefix = path.join(tmp, 'full-last');
    const cfg = { ...resolveSweepConfig({ cells: '16:8', concurrency: '1', warmup: '0', blockSize: '4', maxSeq: '256' }), output: prefix };
    let chunks = 0;
    // The last row reaching stdout is the last thing before the report's final write: the disk fills there.
    const stdout = new Writable({
      write(_chunk, _enc, cb) {
        if (++chunks === 2) symlinkSync('/dev/full', `${prefix}.json.tmp-${process.pid}`);
        cb();
      },
    });
    let err = '';
    const e = new PassThrough();
    e.on('data', (d) => { err += String(d); });
    let paged = false;
    const io = {
      stdout, stderr: e, stderrIsTTY: false, env: {}, argv: ['node', 'bench'], handleSignals: false,
      afterSweep: async (c: number) => { paged = true; return c; },
    } as SweepIO;
    expect(await runSweep(cfg, fakeBackend(), io)).toBe(1);
    expect(chunks).toBe(2);
    expect(err).toContain(`writing ${prefix}.json failed: no space left on device (ENOSPC) (stdout has every finished row`);
    expect(paged).toBe(false);
    expect(existsSync(`${prefix}.json.tmp-${process.pid}`)).toBe(false);
  });

  it('an atomic write that fails leaves the file as it was and removes its half-written sibling', () => {
    const file = path.join(tmp, 'atomic.json');
    writeFileSync(file, 'before');
    symlinkSync('/dev/full', `${file}.tmp-${process.pid}`);
    expect(() => writeFileAtomic(file, 'after')).toThrow(/ENOSPC/);
    expect(existsSync(`${file}.tmp-${process.pid}`)).toBe(false);
    expect(readFileSync(file, 'utf8')).toBe('before');
  });
});

describe('a signal once the rows are done (the page rendering)', () => {
  it.each([['SIGTERM', 143], ['SIGINT', 130]] as const)('%s: the process leaves with %i, PREFIX.json records that status, stderr says the page was not written', async (sig, code) => {
    const prefix = path.join(tmp, `late-${sig}`);
    const cfg = { ...resolveSweepConfig({ cells: '16:8', concurrency: '1', warmup: '0', blockSize: '4', maxSeq: '256' }), output: prefix };
    let err = '';
    const e = new PassThrough();
    e.on('data', (d) => { err += String(d); });
    class Exit extends Error { constructor(readonly code: number) { super(`exit ${code}`); } }
    let pageCode: number | null = null;
    const io: SweepIO = {
      stdout: sink(), stderr: e, stderrIsTTY: false, env: {}, argv: ['node', 'bench'], handleSignals: true,
      // The signal arrives while the page renders: forced, by emitting it from there.
      afterSweep: async (c) => { pageCode = c; process.emit(sig, sig); return c; },
      exit: (c) => { throw new Exit(c); },
    };
    const listeners = process.listenerCount(sig);
    await expect(runSweep(cfg, fakeBackend(), io)).rejects.toMatchObject({ code });
    expect(pageCode).toBe(0); // the sweep itself was complete
    const rep = JSON.parse(readFileSync(`${prefix}.json`, 'utf8'));
    expect(rep.status).toBe('complete');
    expect(rep.exit_code).toBe(code);
    expect(err).toContain(`${sig}: stopped before ${prefix}.html was written (the other files are complete; \`bench report ${prefix}.json\` writes it)`);
    expect(process.listenerCount(sig)).toBe(listeners); // the handlers are gone
  });
});
