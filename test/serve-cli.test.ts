// `bench serve` as a process: flag errors before anything loads (exit 2), the sweep's header and the
// URL on stderr, a warning when bound beyond loopback without a key, -v request lines, and SIGTERM /
// SIGINT: stop accepting, cancel what is in flight, exit 0 (the process gives itself 1.8 s).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../src/util/version.js';
import { readSse } from './helpers/serve-fixture.js';

const BENCH = path.join(REPO_ROOT, 'bin', 'bench.js');

interface Served {
  child: ChildProcess;
  stderr: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Spawns `bench serve ARGS` and resolves once `ready(stderr)` returns a URL. */
async function serve(args: string[], ready: (stderr: string) => string | null): Promise<Served & { url: string }> {
  const child = spawn(process.execPath, [BENCH, 'serve', '--port', '0', '--device', 'cpu', '--threads', '2', '--max-seq', '1024', ...args], {
    env: { ...process.env, NO_COLOR: '1' }, stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('exit', (code, signal) => resolve({ code, signal }));
  });
  const url = await new Promise<string>((resolve, reject) => {
    child.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
      const u = ready(err);
      if (u) resolve(u);
    });
    void exited.then((e) => reject(new Error(`bench serve exited (${e.code}) before it was ready:\n${err}`)));
  });
  return { child, url, stderr: () => err, exited };
}

function usage(args: string[]): { code: number | null; stderr: string } {
  const r = spawnSync(process.execPath, [BENCH, 'serve', ...args], { encoding: 'utf8', env: { ...process.env, NO_COLOR: '1', LUMEN_CACHE_DIR: '/nonexistent-cache-dir-for-usage-tests' } });
  return { code: r.status, stderr: r.stderr };
}

describe('bench serve (process)', () => {
  it.each([
    [['--port', '70000'], /--port: 70000 is too large \(at most 65535\)/],
    [['--max-seqs', '0'], /--max-seqs: 0 is below the minimum of 1/],
    [['--kvcache', 'flat'], /--kvcache: 'flat' is not one of paged, continuous/],
    [['--max-seqs', '64', '--step-token-budget', '32'], /--step-token-budget 32 must be at least --max-seqs 64/],
    [['--api-key', 'a', '--api-key-env', 'B'], /cannot be used with/],
    [['--api-key-env', 'LUMEN_SURELY_UNSET_VAR'], /LUMEN_SURELY_UNSET_VAR is not set/],
    [['--model-path', '/nonexistent/model'], /--model-path: \/nonexistent\/model does not exist/],
    [['-q', '-v'], /-q and -v contradict/],
    [['--kv-memory', '2.0'], /--kv-memory: the fraction 2\.0 is not in \(0, 1\]/],
    [['--kv-memory', '8XB'], /--kv-memory: 'XB' is not a unit/],
    [['--kv-cache-dtype', 'bf16'], /--kv-cache-dtype: 'bf16' is not one of f32, f16/],
    [['--host', '0.0.0.0.0'], /--host: cannot resolve '0\.0\.0\.0\.0'/],
    [['--tokenizer-workers', '65'], /--tokenizer-workers: 65 is too large \(at most 64\)/],
    [['--tokenizer-workers', '1.5'], /--tokenizer-workers: /],
  ])('%j exits 2 naming the flag, before any model is loaded', (args, message) => {
    const r = usage(args as string[]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(message as RegExp);
  });

  it('prints the sweep\'s header and the URL; warns when bound beyond loopback without a key; SIGINT exits 0', async () => {
    const s = await serve(['--host', '0.0.0.0'], (e) => /URL\s+(http:\/\/\S+)/.exec(e)?.[1] ?? null);
    const err = s.stderr();
    expect(err).toMatch(/lumen-bench v\d/);
    expect(err).toMatch(/CPU\s+.+\(\d+ logical cores/);
    expect(err).toMatch(/Engine threads\s+2\n/);
    expect(err).toMatch(/Model path\s+.*embedded-tiny-v2 \(embedded synthetic tiny model\)/);
    expect(err).toMatch(/Model loaded\s+[\d.]+s \(backend: cpu/);
    expect(err).toMatch(/Engine\s+paged KV, block 16, \d+ blocks, prefill chunk 512, step budget 2048, max-seq 1024, 8 seqs, prefix cache on/);
    expect(err).toMatch(/KV pool\s+\d+ blocks x [\d.]+ KiB = [\d.]+ MiB \(max-seq x max-seqs tokens\)/);
    expect(err).toMatch(/Tokenizing\s+prompts over 1024 characters or 64 messages on 2 worker threads\n/);
    expect(err).toMatch(/warning:.*without an API key/);
    expect(err).not.toMatch(/\x1b\[/); // no escape codes off a TTY
    const port = new URL(s.url).port;
    const h = await fetch(`http://127.0.0.1:${port}/health`);
    expect(await h.json()).toEqual({ status: 'ok' });
    s.child.kill('SIGINT');
    const e = await s.exited;
    expect(e.code).toBe(0);
  });

  it('-v: one JSON line per request; SIGTERM mid-stream cancels it and exits 0', async () => {
    const s = await serve(['-v'], (e) => {
      for (const line of e.split('\n')) {
        if (!line.startsWith('{')) continue;
        const j = JSON.parse(line) as { event?: string; url?: string };
        if (j.event === 'listening') return j.url!;
      }
      return null;
    });
    const r = await fetch(`${s.url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'the sea', max_tokens: 5, temperature: 0, ignore_eos: true }),
    });
    expect(r.status).toBe(200);
    await r.json();
    // A streamed request that completes: logged once, by its stream, with its figures.
    const full = await fetch(`${s.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, temperature: 0, ignore_eos: true, stream: true }),
    });
    await readSse(full);
    // A stream that would run for 900 tokens: SIGTERM after its first chunk.
    const res = await fetch(`${s.url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'the sea', max_tokens: 900, temperature: 0, ignore_eos: true, stream: true }),
    });
    let signalled = false;
    const events = await readSse(res, () => {
      if (!signalled) {
        signalled = true;
        s.child.kill('SIGTERM');
      }
    }).catch(() => null);
    // The process exits by itself (a hang fails on the test's timeout; no wall-clock deadline here).
    const e = await s.exited;
    expect(e.code).toBe(0);
    if (events) expect(events.length).toBeLessThan(900);
    const lines = s.stderr().split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>);
    const reqs = lines.filter((l) => l.event === 'request');
    expect(reqs[0]).toMatchObject({ route: '/v1/completions', status: 200, output_tokens: 5, finish_reason: 'length' });
    for (const k of ['id', 'prompt_tokens', 'cached_tokens', 'ttft_ms', 'duration_ms']) expect(reqs[0]).toHaveProperty(k);
    expect(typeof reqs[0]!.ttft_ms).toBe('number');
    // One line per request (the stream cut by SIGTERM included), none with empty figures.
    expect(reqs.map((l) => l.route)).toEqual(['/v1/completions', '/v1/chat/completions', '/v1/completions']);
    expect(reqs[1]).toMatchObject({ status: 200, output_tokens: 3, finish_reason: 'length' });
    // (abort, the API's word for a cancelled request, or length on a host slow to deliver the signal:
    // which one is the scheduler's, not the test's)
    expect(typeof reqs[2]!.prompt_tokens).toBe('number');
    expect(['abort', 'length']).toContain(reqs[2]!.finish_reason);
    // Every stderr line is JSON under -v, the shutdown's too.
    expect(s.stderr().trim().split('\n').every((l) => l.startsWith('{'))).toBe(true);
    expect(lines.find((l) => l.event === 'shutdown')).toMatchObject({ signal: 'SIGTERM' });
  });
});
