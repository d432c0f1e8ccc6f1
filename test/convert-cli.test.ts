// `bench convert` through the compiled CLI (bin/bench.js, so the quantizer worker threads of dist/ run):
// how it ends on bad input. Every error is one line naming the flag, file or field, exit status 2,
// and the process exits (a quantizer pool left running kept it alive for ever).
import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, linkSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { convertCheckpoint, planTensors, quantizerWorkers } from '../src/convert/convert.js';
import { GGML_CODECS } from '../src/convert/ggml-codec.js';
import { usableCpus } from '../src/engine/native.js';
import { loadCheckpoint } from '../src/model/checkpoint.js';
import { parseGgufHeader } from '../src/model/gguf-reader.js';
import { loadModel, loadModelTokenizer } from '../src/model/model-path.js';
import { writeSynthCheckpoint } from '../src/model/synth.js';
import { loadTokenizer } from '../src/model/tokenizer.js';

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

  it('a path that names a directory by its form (a trailing "/", a last part "." or ".."): a usage error, no file written', async () => {
    const at = join(work, 'slash');
    mkdirSync(at);
    // "new/" does not exist: path.resolve drops the slash, and the GGUF was written as a file named "new".
    for (const out of [`${join(at, 'new')}/`, `${at}/.`, `${join(at, 'sub')}/..`]) {
      const r = await convert(['--model-path', base, '--out', out, '-q']);
      expect(usageLine(r)).toBe(`bench: --out ${out}: names a directory, not a file; give the file's name too`);
    }
    expect(readdirSync(at)).toEqual([]);
  }, 60_000);
});

/** Reads, edits and rewrites a JSON file of a checkpoint. */
function editJson(file: string, edit: (j: Record<string, any>) => void): void {
  const j = JSON.parse(readFileSync(file, 'utf8')) as Record<string, any>;
  edit(j);
  writeFileSync(file, JSON.stringify(j));
}

describe('bench convert checks the tokenizer as the loader does', () => {
  it('a tokenizer.json the loader refuses is a usage error naming the file and the field (no GGUF written)', async () => {
    const cases: Array<[(tok: Record<string, any>) => void, RegExp]> = [
      [(t) => { t.model.merges[5] = 5; }, /tokenizer\.json: model\.merges\[5\] is 5; expected a pair of token strings/],
      [(t) => { t.model.merges[5] = ['zzqq', 'yyxx']; }, /tokenizer\.json: model\.merges\[5\] \(\["zzqq", "yyxx"\]\) uses token "zzqq", which is not in model\.vocab/],
      [(t) => { t.added_tokens[0].special = 'yes'; }, /tokenizer\.json: added_tokens\[0\]\.special must be true or false/],
      [(t) => { t.model.vocab['a b'] = 5; t.model.vocab.c = 6; t.model.vocab['a bc'] = 7; t.model.merges.push(['a b', 'c']); }, /tokenizer\.json: model\.merges\[\d+\] \(\["a b", "c"\]\) has a token with a space, which a GGUF merge/],
    ];
    for (const [edit, re] of cases) {
      const dir = copy();
      editJson(join(dir, 'tokenizer.json'), edit);
      const out = join(dir, 'out.gguf');
      const r = await convert(['--model-path', dir, '--out', out]);
      expect(usageLine(r)).toMatch(re);
      expect(r.stderr).toContain(join(dir, 'tokenizer.json'));
      expect(existsSync(out)).toBe(false);
    }
  }, 120_000);

  it('a chat template in list form (tokenizer_config.json) is written as tokenizer.chat_template, the one the loader picks', async () => {
    const dir = copy();
    const tcFile = join(dir, 'tokenizer_config.json');
    const template = (JSON.parse(readFileSync(tcFile, 'utf8')) as { chat_template: string }).chat_template;
    editJson(tcFile, (c) => { c.chat_template = [{ name: 'tool_use', template: 'TOOLS {{ messages[0].content }}' }, { name: 'default', template }]; });
    const outDir = join(work, 'list-template');
    mkdirSync(outDir); // nothing beside the GGUF: its tokenizer is the one in its metadata
    const out = join(outDir, 'list.gguf');
    await convertCheckpoint(dir, out, { dtype: 'f32' });
    expect(parseGgufHeader(out).kv.get('tokenizer.chat_template')?.value).toBe(template);
    // The GGUF's own tokenizer renders what the checkpoint's does.
    const messages = [{ role: 'user', content: 'Hello' }];
    const fromGguf = await loadModelTokenizer(loadModel(out, { hash: false }));
    const fromDir = await loadTokenizer(dir);
    expect(fromGguf.applyChatTemplate(messages, { addGenerationPrompt: true })).toBe(fromDir.applyChatTemplate(messages, { addGenerationPrompt: true }));
  }, 60_000);
});

describe('bench convert --out naming one of its inputs', () => {
  it('is a usage error naming --out and the file, by path, symbolic link or hard link; the checkpoint is untouched', async () => {
    const dir = join(work, 'sharded');
    await writeSynthCheckpoint({ preset: 'tiny', out: dir, dtype: 'f32', seed: 3, shards: 2, tokenizerBpeVocab: BPE, vision: false, overrides: SMALL });
    const tc = JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8')) as { chat_template: string };
    writeFileSync(join(dir, 'chat_template.jinja'), tc.chat_template);
    const files = readdirSync(dir).sort();
    const snapshot = () => Object.fromEntries(files.map((f) => [f, createHash('sha256').update(readFileSync(join(dir, f))).digest('hex')]));
    const before = snapshot();
    const links = join(work, 'links');
    mkdirSync(links);
    symlinkSync(join(dir, 'chat_template.jinja'), join(links, 'sym.gguf'));
    symlinkSync(dir, join(links, 'dir-link'));
    linkSync(join(dir, 'tokenizer_config.json'), join(links, 'hard.gguf'));
    const cases: Array<[string, string]> = [
      [join(dir, 'model-00002-of-00002.safetensors'), join(dir, 'model-00002-of-00002.safetensors')],
      [join(dir, 'model.safetensors.index.json'), join(dir, 'model.safetensors.index.json')],
      [join(dir, 'config.json'), join(dir, 'config.json')],
      [join(dir, 'tokenizer.json'), join(dir, 'tokenizer.json')],
      [join(dir, 'generation_config.json'), join(dir, 'generation_config.json')],
      [join(links, 'sym.gguf'), join(dir, 'chat_template.jinja')],
      [join(links, 'dir-link', 'model-00001-of-00002.safetensors'), join(dir, 'model-00001-of-00002.safetensors')],
      [join(links, 'hard.gguf'), join(dir, 'tokenizer_config.json')],
    ];
    for (const [out, clash] of cases) {
      for (const threads of ['1', '2']) {
        const r = await convert(['--model-path', dir, '--out', out, '--dtype', 'q8_0', '--threads', threads]);
        expect(usageLine(r), out).toBe(`bench: --out ${out}: the same file as ${clash}, which the model is read from; choose another path`);
      }
    }
    expect(snapshot()).toEqual(before);
    expect(readdirSync(dir).sort()).toEqual(files); // no temporary file left either
  }, 120_000);
});

describe('bench convert --out naming a file the checkpoint directory would read, not there yet', () => {
  it('is a usage error naming --out and the name (by path or through a linked directory); nothing is written; another name there is fine', async () => {
    const dir = copy(); // no chat_template.jinja, no index, one model.safetensors
    const files = readdirSync(dir).sort();
    const links = join(work, 'links-missing');
    mkdirSync(links);
    symlinkSync(dir, join(links, 'dir-link'));
    const cases: Array<[string, string]> = [
      [join(dir, 'chat_template.jinja'), 'chat_template.jinja'],
      [join(dir, 'model.safetensors.index.json'), 'model.safetensors.index.json'],
      [join(dir, 'model-00001-of-00002.safetensors'), 'model-00001-of-00002.safetensors'],
      [join(links, 'dir-link', 'chat_template.jinja'), 'chat_template.jinja'],
    ];
    for (const [out, name] of cases) {
      for (const threads of ['1', '2']) {
        const r = await convert(['--model-path', dir, '--out', out, '--dtype', 'q8_0', '--threads', threads]);
        expect(usageLine(r), out).toBe(`bench: --out ${out}: ${name} in the model's directory ${dir} is a name its loader reads as part of the model; choose another name or directory`);
      }
    }
    expect(readdirSync(dir).sort()).toEqual(files);
    // A name the loader does not read: the GGUF may sit beside the checkpoint, which still loads as one.
    const ok = await convert(['--model-path', dir, '--out', join(dir, 'model.gguf'), '-q']);
    expect(ok, ok.stderr).toEqual({ code: 0, signal: null, stderr: '' });
    expect(loadModel(dir, { hash: false }).format?.container).not.toBe('gguf');
  }, 120_000);
});

describe('bench convert when a write fails part way', () => {
  // A real file-size limit (bash's `ulimit -f`, in KiB): a write past it fails with EFBIG (Node
  // ignores SIGXFSZ), as a write to a full disk fails with ENOSPC, through the same path.
  function limited(kib: number, args: string[]): Promise<Run> {
    return new Promise((done) => {
      execFile('bash', ['-c', `ulimit -f ${kib} && exec "$0" "$@"`, process.execPath, BENCH, 'convert', ...args],
        { cwd: ROOT, timeout: 60_000, killSignal: 'SIGKILL' }, (err, _stdout, stderr) => {
          const e = err as (Error & { code?: number | string; signal?: NodeJS.Signals | null }) | null;
          done({ code: e ? (typeof e.code === 'number' ? e.code : null) : 0, signal: e?.signal ?? null, stderr });
        });
    });
  }

  it('in the header or in a tensor: exit 1, one line naming the temporary file and the errno, and the file is removed', async () => {
    const ref = join(work, 'write-fail-ref.gguf');
    await convertCheckpoint(base, ref, { dtype: 'q8_0' });
    const { dataStart, fileSize } = parseGgufHeader(ref);
    const inHeader = Math.floor(dataStart / 2048); // half the header
    const inData = Math.floor(fileSize / 2048); // half the file: inside the tensor data
    expect(inHeader).toBeGreaterThan(0);
    expect(inData * 1024).toBeGreaterThan(dataStart);
    for (const kib of [inHeader, inData]) {
      for (const threads of ['1', '2']) {
        const outDir = join(work, `write-fail-${kib}-${threads}`);
        mkdirSync(outDir);
        const r = await limited(kib, ['--model-path', base, '--out', join(outDir, 'm.gguf'), '--dtype', 'q8_0', '--threads', threads]);
        expect(r.signal, r.stderr).toBeNull();
        expect(r.code, r.stderr).toBe(1);
        const pid = /\.m\.gguf\.(\d+)\.partial/.exec(r.stderr)?.[1];
        expect(r.stderr).toBe(`bench convert: writing ${join(outDir, `.m.gguf.${pid}.partial`)} failed: file too large (EFBIG)\n`);
        expect(readdirSync(outDir)).toEqual([]);
      }
    }
  }, 120_000);
});

describe('bench convert --threads', () => {
  it('starts no more quantizer workers than the usable CPUs, and none for a float dtype', async () => {
    const cpus = usableCpus();
    const out = join(work, 'threads.gguf');
    const r = await convert(['--model-path', base, '--out', out, '--dtype', 'q8_0', '--threads', '1024']);
    expect(r.code, r.stderr).toBe(0);
    const workers = quantizerWorkers(planTensors(loadCheckpoint(base), 'q8_0'), cpus);
    expect(r.stderr).toContain(`(${workers} quantizer thread${workers === 1 ? '' : 's'}; --threads 1024 capped at the ${cpus} usable CPUs)\n`);
    // A float dtype quantizes nothing: no thread count, and no cap on threads that never ran.
    const f = await convert(['--model-path', base, '--out', out, '--dtype', 'f32', '--threads', '1024']);
    expect(f.code, f.stderr).toBe(0);
    expect(f.stderr).not.toContain('quantizer thread');
    expect(f.stderr).not.toContain('capped');
  }, 60_000);

  it('no more workers than the pieces there are to quantize', () => {
    const ckpt = loadCheckpoint(base);
    const q8 = planTensors(ckpt, 'q8_0');
    // writeWithPool's pieces: about 2^20 values of whole rows each, for every block-quantized tensor.
    const pieces = q8.filter((p) => GGML_CODECS[p.type].block > 1)
      .reduce((n, p) => n + Math.ceil(p.rows / Math.max(1, Math.floor(2 ** 20 / p.rowLen))), 0);
    expect(pieces).toBeGreaterThan(1);
    expect(pieces).toBeLessThan(1024);
    expect(quantizerWorkers(q8, 1024)).toBe(pieces);
    expect(quantizerWorkers(q8, 2)).toBe(2);
    expect(quantizerWorkers(planTensors(ckpt, 'f32'), 1024)).toBe(1);
  });
});

/** The state letter of a process (/proc/PID/stat: R running, S sleeping, T stopped, ...), or null once it is gone. */
function procState(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  } catch {
    return null;
  }
}

/**
 * `bench convert` run with a hook (test/helpers/*.cjs) that stops the process itself at a chosen
 * point; resolves once it is stopped (state T), so a test's signal arrives exactly there however
 * fast the machine. `end()` sends SIGCONT and waits for the exit; `kill()` ends a child left running.
 */
async function stoppedConvert(hook: string, out: string, dtype: string, threads: string) {
  const child = spawn(process.execPath, ['--require', join(ROOT, 'test', 'helpers', hook), BENCH, 'convert',
    '--model-path', base, '--out', out, '--dtype', dtype, '--threads', threads], { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done) => child.on('exit', (c, s) => done({ code: c, signal: s })));
  // Wait until it has stopped itself (or ended: then the caller's expectations say how).
  while (child.exitCode === null && child.signalCode === null && procState(child.pid!) !== 'T') await new Promise((r) => setTimeout(r, 20));
  return {
    child,
    stderr: () => stderr,
    end: () => {
      child.kill('SIGCONT');
      return exited;
    },
    kill: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGKILL');
      await exited;
    },
  };
}

describe('bench convert stopped by a signal', () => {
  // The child stops itself right after creating its temporary file (test/helpers/stop-at-partial.cjs):
  // the conversion is in progress when the signal arrives.
  it.each([
    ['SIGINT', '1', 'q4_k_m', 130],
    ['SIGTERM', '2', 'q4_k_m', 143],
    ['SIGINT', '2', 'f32', 130], // threads, but nothing for them to quantize
  ] as const)('%s (--threads %s, --dtype %s): the unfinished file is removed, exit %i', async (sig, threads, dtype, code) => {
    const outDir = join(work, `signal-${sig}-${threads}-${dtype}`);
    mkdirSync(outDir);
    const c = await stoppedConvert('stop-at-partial.cjs', join(outDir, 'model.gguf'), dtype, threads);
    try {
      expect(procState(c.child.pid!), c.stderr()).toBe('T');
      const partial = join(outDir, `.model.gguf.${c.child.pid}.partial`);
      expect(readdirSync(outDir)).toEqual([`.model.gguf.${c.child.pid}.partial`]);
      c.child.kill(sig);
      expect(await c.end(), c.stderr()).toEqual({ code, signal: null });
      expect(c.stderr().trim()).toBe(`bench convert: ${sig}: stopped; removed the unfinished ${partial}`);
      expect(readdirSync(outDir)).toEqual([]);
    } finally {
      await c.kill();
    }
  }, 60_000);
});

describe('bench convert: a signal once the file is in place', () => {
  // The child stops itself right after the rename of its complete temporary file
  // (test/helpers/stop-after-rename.cjs).
  it.each([
    ['SIGINT', '2', 'q4_k_m'],
    ['SIGTERM', '2', 'q8_0'],
    ['SIGINT', '1', 'f32'],
  ] as const)('%s (--threads %s, --dtype %s): the conversion stands, exit 0, the file kept', async (sig, threads, dtype) => {
    const outDir = join(work, `late-${sig}-${threads}-${dtype}`);
    mkdirSync(outDir);
    const out = join(outDir, 'model.gguf');
    const c = await stoppedConvert('stop-after-rename.cjs', out, dtype, threads);
    try {
      expect(procState(c.child.pid!), c.stderr()).toBe('T');
      expect(readdirSync(outDir)).toEqual(['model.gguf']);
      c.child.kill(sig);
      expect(await c.end(), c.stderr()).toEqual({ code: 0, signal: null });
      expect(c.stderr()).toMatch(new RegExp(`^convert: wrote ${out.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} \\(${dtype}; `));
      expect(c.stderr()).not.toContain('stopped');
      expect(readdirSync(outDir)).toEqual(['model.gguf']);
      const ref = join(work, `late-ref-${dtype}.gguf`);
      if (!existsSync(ref)) await convertCheckpoint(base, ref, { dtype });
      expect(createHash('sha256').update(readFileSync(out)).digest('hex')).toBe(createHash('sha256').update(readFileSync(ref)).digest('hex'));
    } finally {
      await c.kill();
    }
  }, 60_000);
});
