// Bad checkpoints through the real CLI: one clear line naming the file or tensor, a non-zero exit,
// never a crash (signals) or a hang.
import { execFile } from 'node:child_process';
import { readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { cleanupAllFixtures, editConfig, smallFixture } from './helpers/synth-fixture.js';

const run = promisify(execFile);
const BENCH = path.resolve('bin/bench.js');
afterAll(() => cleanupAllFixtures());

async function prompt(dir: string): Promise<{ code: number; stderr: string; signal: string | null }> {
  try {
    await run(process.execPath, [BENCH, 'prompt', '--model-path', dir, '--prompt-ids', '1,2,3', '--max-new-tokens', '1'], { timeout: 60_000 });
    return { code: 0, stderr: '', signal: null };
  } catch (err) {
    const e = err as { code?: number; stderr?: string; signal?: string | null };
    return { code: e.code ?? -1, stderr: e.stderr ?? '', signal: e.signal ?? null };
  }
}

function expectOneLineError(r: { code: number; stderr: string; signal: string | null }, mention: RegExp): void {
  expect(r.signal).toBeNull();
  expect(r.code).not.toBe(0);
  const lines = r.stderr.trim().split('\n');
  expect(lines.length, r.stderr).toBe(1);
  expect(lines[0]).toMatch(mention);
}

describe('bench prompt on bad checkpoints', () => {
  it('names config.json when it is missing', async () => {
    const f = await smallFixture();
    rmSync(path.join(f.dir, 'config.json'));
    expectOneLineError(await prompt(f.dir), /config\.json/);
  });

  it('names the missing field of a config', async () => {
    const f = await smallFixture();
    editConfig(f.dir, (c) => { delete c.text_config.hidden_size; });
    expectOneLineError(await prompt(f.dir), /hidden_size/);
  });

  it('names a truncated safetensors file', async () => {
    const f = await smallFixture();
    const file = path.join(f.dir, 'model.safetensors');
    truncateSync(file, Math.floor(readFileSync(file).length / 2));
    expectOneLineError(await prompt(f.dir), /model\.safetensors/);
  });

  it('names a tensor with the wrong shape', async () => {
    const f = await smallFixture();
    const file = path.join(f.dir, 'model.safetensors');
    const buf = readFileSync(file);
    const n = Number(buf.readBigUInt64LE(0));
    const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8')) as Record<string, { shape: number[] }>;
    const name = 'model.language_model.layers.0.mlp.up_proj.weight';
    const [rows, cols] = header[name]!.shape;
    header[name]!.shape = [cols!, rows!];  // same byte count, transposed shape
    const text = JSON.stringify(header).padEnd(n, ' ');
    expect(Buffer.byteLength(text)).toBe(n);
    writeFileSync(file, Buffer.concat([buf.subarray(0, 8), Buffer.from(text), buf.subarray(8 + n)]));
    expectOneLineError(await prompt(f.dir), /up_proj/);
  });
});
