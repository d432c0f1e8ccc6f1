// `--model-path synthetic:tiny` through the real CLI (dist/): the sweep, `bench prompt` and `bench
// serve` load random weights generated in memory and say so in their headers and the JSON report;
// an unknown preset and --quant are usage errors (exit 2, one line) before anything loads.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../src/util/version.js';

const BENCH = path.join(REPO_ROOT, 'bin', 'bench.js');
const tmp = mkdtempSync(path.join(os.tmpdir(), 'bench-synthetic-'));
// No embedded model may be generated: the synthetic model needs no files.
const CACHE = path.join(tmp, 'cache');
const ENV = { ...process.env, NO_COLOR: '1', LUMEN_CACHE_DIR: CACHE };
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const HEADER = /Model path\s+synthetic:tiny \(random weights of the tiny shape, bf16, seed 0; generated in memory, no checkpoint\)/;
const WEIGHTS = /Weights\s+synthetic BF16: random weights of the tiny shape, seed 0, [\d.]+ MiB generated in memory \(no file, no hash\)/;

function bench(args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [BENCH, ...args], { encoding: 'utf8', env: ENV, cwd: tmp, timeout: 120_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('--model-path synthetic:tiny', () => {
  it('the sweep runs on it; header, notes and JSON provenance say synthetic (preset, dtype, seed; no file hash)', () => {
    const prefix = path.join(tmp, 'sweep');
    const r = bench(['--model-path', 'synthetic:tiny', '--cells', '16:8', '--concurrency', '1', '--warmup', '0', '--threads', '2', '--output', prefix]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(HEADER);
    expect(r.stderr).toMatch(WEIGHTS);
    const lines = r.stdout.trim().split('\n');
    expect(lines.length).toBe(2);
    expect(lines[1]).toMatch(/^16,8,1,.*,ok,/);
    const report = JSON.parse(readFileSync(`${prefix}.json`, 'utf8'));
    expect(report.status).toBe('complete');
    expect(report.model).toMatchObject({
      path: 'synthetic:tiny', embedded: false, synthetic: true, bytes_on_disk: 0, shards: 0, num_layers: 4, hidden_size: 128, dtype: 'BF16',
    });
    expect(report.model.weight_format).toMatchObject({ container: 'synthetic', synthetic: true, preset: 'tiny', dtype: 'bf16', seed: 0 });
    expect(report.model.weight_format).not.toHaveProperty('sha256');
    // What the reports give as the weights' size is what the engine holds.
    expect(report.model.weight_format.in_memory_bytes).toBe(report.model_load.weight_bytes);
    expect(report.notes).toContain('model: synthetic:tiny (random weights of the tiny shape, bf16, seed 0; generated in memory, no checkpoint)');
    expect(existsSync(CACHE)).toBe(false);
  });

  it('-v: the model_path log line carries the synthetic weights', () => {
    const r = bench(['--model-path', 'synthetic:tiny', '--cells', '8:2', '--concurrency', '1', '--warmup', '0', '--threads', '2', '-v']);
    expect(r.code, r.stderr).toBe(0);
    const events = r.stderr.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(events.find((e) => e.event === 'model_path')).toMatchObject({
      model_path: 'synthetic:tiny', embedded_model: false, synthetic: { preset: 'tiny', dtype: 'bf16', seed: 0 },
    });
  });

  it('bench prompt generates text on it and says the weights are synthetic', () => {
    const r = bench(['prompt', '--model-path', 'synthetic:tiny', 'hello', '--max-new-tokens', '4', '--threads', '2']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe('bench: --model-path synthetic:tiny (random weights of the tiny shape, bf16, seed 0; generated in memory, no checkpoint)\n');
    expect(r.stdout.trim().length).toBeGreaterThan(0);
    const ids = bench(['prompt', '--model-path', 'synthetic:tiny', '--prompt-ids', '1,2,3', '--max-new-tokens', '3', '--threads', '2']);
    expect(ids.code, ids.stderr).toBe(0);
    expect(ids.stdout).toMatch(/^\d+ \d+ \d+\n$/);
    expect(existsSync(CACHE)).toBe(false);
  });

  it('bench serve serves it: header, /v1/models', async () => {
    const child = spawn(process.execPath, [BENCH, 'serve', '--model-path', 'synthetic:tiny', '--port', '0', '--threads', '2', '--max-seq', '256'], {
      env: ENV, cwd: tmp, stdio: ['ignore', 'pipe', 'pipe'],
    });
    let err = '';
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    try {
      const url = await new Promise<string>((resolve, reject) => {
        child.stderr!.on('data', (d: Buffer) => {
          err += d.toString();
          const m = /URL\s+(http:\/\/\S+)/.exec(err);
          if (m) resolve(m[1]!);
        });
        void exited.then((code) => reject(new Error(`bench serve exited (${code}) before it was ready:\n${err}`)));
      });
      expect(err).toMatch(HEADER);
      expect(err).toMatch(WEIGHTS);
      const models = await (await fetch(`${url}/v1/models`)).json() as { data: Array<{ id: string; root: string }> };
      expect(models.data[0]).toMatchObject({ id: 'synthetic:tiny', root: 'synthetic:tiny' });
      const res = await fetch(`${url}/v1/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'synthetic:tiny', prompt: 'the sea', max_tokens: 3, temperature: 0, ignore_eos: true }),
      });
      expect(res.status).toBe(200);
      expect(((await res.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(3);
    } finally {
      child.kill('SIGINT');
      expect(await exited).toBe(0);
    }
  });
});

describe('bad synthetic:<preset> values are usage errors before anything loads', () => {
  it.each([
    [[], 'sweep'],
    [['prompt', '--prompt', 'hi'], 'prompt'],
    [['serve'], 'serve'],
  ])('%j synthetic:7b: one line listing the presets, exit 2', (cmd) => {
    const r = bench([...(cmd as string[]), '--model-path', 'synthetic:7b']);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr.trim().split('\n')).toEqual(["bench: --model-path synthetic:7b: unknown synthetic preset '7b' (one of tiny, 0.8b, 2b, 4b, 9b)"]);
  });

  it.each([[[]], [['prompt', '--prompt', 'hi']], [['serve']]])('%j synthetic:tiny --quant Q4_K_M: usage error, exit 2', (cmd) => {
    const r = bench([...(cmd as string[]), '--model-path', 'synthetic:tiny', '--quant', 'Q4_K_M']);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr.trim().split('\n')).toEqual(['bench: --quant Q4_K_M: does not apply to --model-path synthetic:tiny (synthetic weights are bf16, generated in memory)']);
  });

  it('bench convert explains that synthetic weights have no files to convert', () => {
    const r = bench(['convert', '--model-path', 'synthetic:tiny', '--out', path.join(tmp, 'x.gguf')]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/--model-path synthetic:tiny: synthetic weights exist only in the engine's memory; write a checkpoint with `bench synth/);
    expect(readdirSync(tmp)).not.toContain('x.gguf');
  });
});
