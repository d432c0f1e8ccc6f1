// `bench convert` through the compiled CLI (bin/bench.js, so the quantizer worker threads of dist/ run):
// how it ends on bad input. Every error is one line naming the flag, file or field, exit status 2,
// and the process exits (a quantizer pool left running kept it alive for ever).
import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeSynthCheckpoint } from '../src/model/synth.js';

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const BENCH = join(ROOT, 'bin', 'bench.js');
/** A small tokenizer and vocabulary: the checkpoint is ~1 MB and converts in a moment. */
const BPE = 479;
const SMALL = { vocabSize: BPE + 33, eosTokenId: BPE };

let work: string;
let base: string;

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'lumen-convert-cli-'));
  base = join(work, 'base');
  await writeSynthCheckpoint({ preset: 'tiny', out: base, dtype: 'f32', seed: 3, tokenizerBpeVocab: BPE, vision: false, overrides: SMALL });
}, 60_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

let copies = 0;
/** A fresh copy of the checkpoint, to damage. */
function copy(): string {
  const dir = join(work, `ckpt-${copies++}`);
  cpSync(base, dir, { recursive: true });
  return dir;
}

interface Run { code: number | null; signal: NodeJS.Signals | null; stderr: string }

/**
 * `bench convert ARGS`. The timeout only ends a run that would never end (the defect tested
 * below); a run that ends does so by itself, long before it.
 */
function convert(args: string[]): Promise<Run> {
  return new Promise((done) => {
    execFile(process.execPath, [BENCH, 'convert', ...args], { cwd: ROOT, timeout: 60_000, killSignal: 'SIGKILL' }, (err, _stdout, stderr) => {
      const e = err as (Error & { code?: number | string; signal?: NodeJS.Signals | null }) | null;
      done({ code: e ? (typeof e.code === 'number' ? e.code : null) : 0, signal: e?.signal ?? null, stderr });
    });
  });
}

/** The run ended by itself with exit status 2 and one line on stderr; returns that line. */
function usageLine(r: Run): string {
  expect(r.signal, 'killed: the run did not end by itself').toBeNull();
  expect(r.code, r.stderr).toBe(2);
  const lines = r.stderr.trim().split('\n');
  expect(lines, r.stderr).toHaveLength(1);
  return lines[0]!;
}

describe('bench convert with quantizer threads: an error before the first tensor', () => {
  it('ends the run at once (exit 2): --mtp without mtp.* tensors, tokenizer.json missing', async () => {
    const out = join(work, 'hang.gguf');
    const mtp = await convert(['--model-path', base, '--out', out, '--dtype', 'q8_0', '--threads', '2', '--mtp']);
    expect(usageLine(mtp)).toMatch(/^bench: .*--mtp asked for, but the checkpoint has no mtp\.\* tensors$/);
    const noTok = copy();
    rmSync(join(noTok, 'tokenizer.json'));
    const tok = await convert(['--model-path', noTok, '--out', out, '--dtype', 'q4_k_m', '--threads', '2']);
    expect(usageLine(tok)).toMatch(/tokenizer\.json/);
  }, 150_000);
});

describe('bench convert --out that cannot be written', () => {
  it('a directory that takes no files, or a temporary name too long: a usage error naming --out and the errno code', async () => {
    for (const threads of ['1', '2']) {
      const sys = await convert(['--model-path', base, '--out', '/sys/x.gguf', '--threads', threads]);
      expect(usageLine(sys)).toMatch(/^bench: --out: cannot create files in \/sys \((EACCES|EROFS|EPERM)\)$/);
      // The directory takes files (the up-front check passes), but ".NAME.PID.partial" is past NAME_MAX.
      const long = join(work, `${'a'.repeat(250)}.gguf`);
      const r = await convert(['--model-path', base, '--out', long, '--threads', threads]);
      expect(usageLine(r)).toBe(`bench: --out ${long}: cannot create the temporary file ${join(work, `.${'a'.repeat(250)}.gguf.`)}${/\.(\d+)\.partial/.exec(r.stderr)?.[1]}.partial (ENAMETOOLONG)`);
    }
  }, 60_000);
});
