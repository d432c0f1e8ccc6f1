// The sweep through the real CLI: `node bin/bench.js` (dist/ built by `npm ci`) on the embedded tiny model,
// stdout parsed with a CSV parser. Small cells keep each run to seconds on two cores.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'csv-parse/sync';
import { afterAll, describe, expect, it } from 'vitest';
import { fmt } from '../src/bench/render.js';
import { bytesText } from '../src/util/bytes-text.js';
import { cleanupAllFixtures, SMALL_VOCAB, smallFixture } from './helpers/synth-fixture.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const BENCH = path.join(ROOT, 'bin', 'bench.js');
const HEADER = 'isl,osl,concurrency,first_call_ms,ttft_ms,prefill_tok_s,itl_p50_ms,itl_p99_ms,prefill_chunk_ms_p50,prefill_chunk_ms_max,decode_tok_s,speedup_vs_c1,batching_efficiency,admitted_tok,retires,peak_active_bytes,num_allocs,num_inflight_park_waits,status,reason,notes';

const tmp = mkdtempSync(path.join(os.tmpdir(), 'bench-sweep-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

function start(args: string[], env: NodeJS.ProcessEnv = {}): { child: ChildProcess; done: Promise<Run> } {
  const child = spawn(process.execPath, [BENCH, ...args], {
    cwd: ROOT,
    env: { ...process.env, NO_COLOR: undefined, FORCE_COLOR: undefined, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => { stdout += d.toString(); });
  child.stderr!.on('data', (d: Buffer) => { stderr += d.toString(); });
  const done = new Promise<Run>((resolve) => {
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
  return { child, done };
}

const bench = (args: string[], env?: NodeJS.ProcessEnv) => start(args, env).done;

type Row = Record<string, string>;
function rowsOf(csv: string): Row[] {
  expect(csv.split('\n')[0]).toBe(HEADER);
  return parse(csv, { columns: true, skip_empty_lines: true }) as Row[];
}

async function waitFor(cond: () => boolean, ms: number): Promise<void> {
  const t0 = performance.now();
  while (!cond()) {
    if (performance.now() - t0 > ms) throw new Error(`condition not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function csvRowsOnDisk(file: string): number {
  if (!existsSync(file)) return 0;
  return readFileSync(file, 'utf8').split('\n').filter((l) => l.length > 0).length - 1;
}

it('dist/ is built (the tests run the compiled CLI)', () => {
  expect(existsSync(path.join(ROOT, 'dist', 'src', 'cli', 'main.js')), 'dist/ missing: run `npm run build`').toBe(true);
});

describe('bench sweep on the embedded tiny model', () => {
  it('prints the 21-column CSV, one row per cell x concurrency, with consistent figures and files', async () => {
    const prefix = path.join(tmp, 'ok');
    const r = await bench(['--cells', '16:8,32:8', '--concurrency', '2,1', '--warmup', '1', '--output', prefix]);
    expect(r.stderr).toContain('embedded synthetic tiny model');
    expect(r.code, r.stderr).toBe(0);
    const rows = rowsOf(r.stdout);
    expect(rows.map((x) => `${x.isl}:${x.osl}:${x.concurrency}`)).toEqual(['16:8:1', '16:8:2', '32:8:1', '32:8:2']);
    for (const row of rows) {
      expect(row.status, row.reason).toBe('ok');
      expect(row.reason).toBe('');
      const n = (k: string) => Number(row[k]);
      const c = n('concurrency');
      for (const k of ['first_call_ms', 'ttft_ms', 'prefill_tok_s', 'itl_p50_ms', 'itl_p99_ms', 'decode_tok_s', 'speedup_vs_c1', 'batching_efficiency', 'prefill_chunk_ms_p50', 'prefill_chunk_ms_max']) {
        expect(row[k], k).not.toBe('');
        expect(n(k), k).toBeGreaterThan(0);
      }
      expect(n('itl_p99_ms')).toBeGreaterThanOrEqual(n('itl_p50_ms'));
      expect(n('prefill_chunk_ms_max')).toBeGreaterThanOrEqual(n('prefill_chunk_ms_p50'));
      if (c === 1) expect(row.speedup_vs_c1).toBe('1');
      expect(n('batching_efficiency')).toBe(n('speedup_vs_c1') / c);
      expect(n('prefill_tok_s')).toBeCloseTo((n('isl') * 1000) / n('ttft_ms'), 6);
      expect(n('retires')).toBe(c); // one timed pass: one request per session
      expect(n('peak_active_bytes')).toBeGreaterThan(0);
      expect(Number.isInteger(n('num_allocs'))).toBe(true);
      expect(Number.isInteger(n('num_inflight_park_waits'))).toBe(true);
      expect(row.notes).toMatch(/^prompts=cold \(a fresh prompt every iteration; prefill_tok_s prices prompt ingest\)/);
    }
    // speedup is the row's decode rate over the same cell's c=1 rate
    expect(Number(rows[1]!.speedup_vs_c1)).toBe(Number(rows[1]!.decode_tok_s) / Number(rows[0]!.decode_tok_s));

    expect(readFileSync(`${prefix}.csv`, 'utf8')).toBe(r.stdout);
    const report = JSON.parse(readFileSync(`${prefix}.json`, 'utf8'));
    expect(report.schema_version).toBe(1);
    expect(report.status).toBe('complete');
    expect(report.tool.version).toMatch(/^\d+\.\d+\.\d+/);
    expect(report.command_line.argv.slice(2)).toEqual(['--cells', '16:8,32:8', '--concurrency', '2,1', '--warmup', '1', '--output', prefix]);
    expect(report.engine.backend).toBe('cpu');
    expect(report.engine.block_size).toBe(16);
    expect(report.model.config_sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(report.model.param_count).toBeGreaterThan(0);
    expect(report.rows.length).toBe(4);
    expect(report.rows[0].distributions.itl_ms.n).toBe(7);
    expect(report.latency.time_to_first_token_ms).toBe(Number(rows[0]!.ttft_ms));
    expect(report.latency.num_tokens_generated).toBe(8);
    const jsonl = readFileSync(`${prefix}.jsonl`, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    expect(jsonl.length).toBe(1 + 2 + 1 + 2);
    // The timed pass from 0 (after --warmup 1), in both files.
    expect(jsonl.map((q) => q.pass)).toEqual(report.rows.flatMap((x: { samples: { pass: number[] } }) => x.samples.pass));
    expect(new Set(jsonl.map((q) => q.pass))).toEqual(new Set([0]));
    for (const q of jsonl) {
      expect(q.generated_tokens).toBe(8);
      expect(q.itl_ms.length).toBe(7);
      expect(q.ttft_ms).toBeGreaterThan(0);
    }
    // stderr is not a TTY here: plain lines, not a single escape code.
    expect(r.stderr).not.toMatch(/\x1b/);
    // The weights' bytes in binary units, as every byte count the header prints.
    expect(r.stderr).toContain(`(backend: cpu, ${bytesText(report.model_load.weight_bytes)})`);
    expect(r.stderr).toMatch(/Model loaded\s+[\d.]+s \(backend: cpu, [\d.]+ MiB\)/);
    expect(r.stderr).toContain('Benchmark results');
    // The summary table's TTFT and Prefill tok/s are the CSV's figures, row for row.
    const table = r.stderr.slice(r.stderr.indexOf('Benchmark results')).split('\n');
    for (const row of rows) {
      const cols = table.map((l) => l.trim().split(/\s+/)).find((c) => c[0] === `${row.isl}:${row.osl}` && c[1] === row.concurrency)!;
      expect(cols[4]).toBe(Number(row.ttft_ms).toFixed(1));
      expect(cols[5]).toBe(fmt.rate(Number(row.prefill_tok_s)));
    }
  });

  it('turns an impossible cell into an error row, keeps the others ok, and exits 3', async () => {
    const r = await bench(['--cells', '16:8,300:8,16:4', '--concurrency', '1', '--warmup', '0', '--max-seq', '256']);
    expect(r.code, r.stderr).toBe(3);
    const rows = rowsOf(r.stdout);
    expect(rows.map((x) => x.status)).toEqual(['ok', 'error', 'ok']);
    expect(rows[1]!.reason).toMatch(/isl\+osl = 308 tokens exceeds --max-seq 256/);
    expect(rows[1]!.decode_tok_s).toBe('');
  });

  it('-v puts JSON lines on stderr and leaves stdout pure CSV', async () => {
    const r = await bench(['-v', '--cells', '16:4', '--concurrency', '1', '--warmup', '1']);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stderr.split('\n').filter((l) => l.length > 0);
    const events = lines.map((l) => JSON.parse(l) as { event?: string; level: string });
    expect(events.map((e) => e.event)).toEqual(expect.arrayContaining(['start', 'model_path', 'load_stage', 'model_loaded', 'cell_start', 'cell_end', 'summary']));
    const end = events.find((e) => e.event === 'cell_end') as unknown as Record<string, unknown>;
    expect(end.decode_tok_s).toBeGreaterThan(0);
    expect(rowsOf(r.stdout).length).toBe(1);
    const dbg = await bench(['-vv', '--cells', '16:4', '--concurrency', '1', '--warmup', '0']);
    const dbgEvents = dbg.stderr.split('\n').filter(Boolean).map((l) => JSON.parse(l) as { event?: string });
    expect(dbgEvents.some((e) => e.event === 'request')).toBe(true);
  });

  it('never writes escape codes to a non-TTY stderr, even when colour is forced', async () => {
    const r = await bench(['--cells', '16:4', '--concurrency', '1', '--warmup', '0'], { FORCE_COLOR: '3' });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).not.toMatch(/\x1b/);
    expect(r.stdout).not.toMatch(/\x1b/);
  });

  it('prints the JSON report, profiles and memory stages on request, and accepts the peer flags', async () => {
    const stages = path.join(tmp, 'stages.jsonl');
    const r = await bench(['--prompt-tokens', '16', '--max-output-tokens', '4', '--latency-only', '--skip-training', '--paged',
      '--warmup', '0', '--format', 'json', '--profile', '--profile-pipeline', '--memory-stages', stages]);
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report.rows.length).toBe(1);
    expect(report.rows[0].isl).toBe(16);
    expect(report.training).toBeNull();
    expect(Object.keys(report.latency)).toEqual(expect.arrayContaining(['prefill_time_ms', 'prefill_tokens_per_sec', 'time_to_first_token_ms',
      'mean_inter_token_ms', 'p50_inter_token_ms', 'p99_inter_token_ms', 'num_tokens_generated', 'decode_tokens_per_sec']));
    expect(r.stderr).toMatch(/Training benchmark: none/);
    expect(r.stderr).toMatch(/^Profiling Report Summary:$/m);
    expect(r.stderr).toMatch(/^top_ops:$/m);
    expect(r.stderr).toContain('AvgSelf(us)');
    expect(r.stderr).toMatch(/^Pipeline Profile Summary:$/m);
    const st = readFileSync(stages, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    expect(st.map((s) => s.stage)).toEqual(['weights_bound', 'warmup_forward', 'first_generation']);
    expect(st[0].checkpoint_bytes).toBe(report.model.bytes_on_disk);
    expect(st[0].device).toBe('cpu');
  });

  it('keeps every finished row on disk when killed with SIGKILL', async () => {
    const prefix = path.join(tmp, 'killed');
    // The third row (8,000 tokens: ~30 s on a quiet machine, longer on a loaded one) is still
    // running when the kill lands, milliseconds after the second row is on disk.
    const { child, done } = start(['--cells', '16:4,16:4000', '--concurrency', '1,2', '--warmup', '0', '--iters', '2', '--output', prefix]);
    await waitFor(() => csvRowsOnDisk(`${prefix}.csv`) >= 2, 60_000);
    child.kill('SIGKILL');
    const r = await done;
    expect(r.signal).toBe('SIGKILL');
    const rows = rowsOf(readFileSync(`${prefix}.csv`, 'utf8'));
    expect(rows.length).toBeGreaterThanOrEqual(2);
    expect(rows.length).toBeLessThan(4);
    expect(rows.slice(0, 2).map((x) => x.status)).toEqual(['ok', 'ok']);
    const report = JSON.parse(readFileSync(`${prefix}.json`, 'utf8'));
    // The report is rewritten before the CSV row is appended, so it holds every CSV row (and at most one more).
    expect(report.rows.length).toBeGreaterThanOrEqual(rows.length);
    expect(report.rows.length).toBeLessThanOrEqual(rows.length + 1);
    expect(report.status).toBe('running');
  });

  it('says what the prefix cache served of a shared prefix, as the engine counted it; a prefix covering the prompt makes it identical, not cold', async () => {
    const r = await bench(['--cells', '128:4,300:4', '--concurrency', '1', '--warmup', '2', '--shared-prefix', '280']);
    expect(r.code).toBe(0);
    const [a, b] = rowsOf(r.stdout);
    // 128 tokens, all shared: the same prompt every time, served up to its repeat point (112) from the
    // third run of it on (the second stops there to snapshot: docs/bench.md, --repeat-prompts).
    expect(a!.notes).toMatch(/^prompts=identical \(--shared-prefix covers the whole prompt/);
    expect(a!.notes).toContain('shared-prefix=128 (clamped from 280 to isl); the prefix cache served 112 of the 128 shared prompt tokens per timed request');
    expect(a!.notes).not.toContain('prefix-cache hits');
    // 280 of 300 shared: fresh prompts, served up to the snapshot at 256.
    expect(b!.notes).toMatch(/^prompts=cold/);
    expect(b!.notes).toContain('shared-prefix=280; the prefix cache served 256 of the 280 shared prompt tokens per timed request');
  });

  it('a closed stderr loses the diagnostics, not the run: every row on stdout, exit 0', async () => {
    const { child, done } = start(['--cells', '8:4,16:4', '--concurrency', '1,2', '--warmup', '0']);
    child.stderr!.destroy(); // before the child has written anything: its first write meets a closed pipe
    const r = await done;
    expect(r.code).toBe(0);
    expect(rowsOf(r.stdout).map((x) => `${x.isl}:${x.osl} ${x.concurrency} ${x.status}`)).toEqual(['8:4 1 ok', '8:4 2 ok', '16:4 1 ok', '16:4 2 ok']);
  });

  it('stops on SIGINT after writing what is done, prints it, and exits 130', async () => {
    const prefix = path.join(tmp, 'interrupted');
    // As above: the second row cannot finish in the moment between the first row and the signal.
    const { child, done } = start(['--cells', '16:4,16:4000', '--concurrency', '1', '--warmup', '0', '--iters', '2', '--output', prefix]);
    await waitFor(() => csvRowsOnDisk(`${prefix}.csv`) >= 1, 60_000);
    child.kill('SIGINT');
    const r = await done;
    expect(r.code).toBe(130);
    const rows = rowsOf(r.stdout);
    expect(rows.length).toBe(1);
    expect(rows[0]!.status).toBe('ok');
    expect(r.stderr).toContain('Benchmark results (interrupted');
    expect(JSON.parse(readFileSync(`${prefix}.json`, 'utf8')).status).toBe('interrupted');
  });
});

describe('usage errors', () => {
  // An empty cache directory: were a model loaded (or the embedded one generated), it would appear here.
  const cache = mkdtempSync(path.join(os.tmpdir(), 'bench-cache-'));
  afterAll(() => rmSync(cache, { recursive: true, force: true }));

  it.each([
    [['--cells', '128:abc'], /--cells.*'abc' is not a whole number/],
    [['--concurrency', '0'], /--concurrency: 0 is below the minimum of 1/],
    [['--concurrency', '1,x'], /--concurrency: 'x' is not a whole number/],
    [['--model-path', '/nonexistent/model/dir'], /--model-path: \/nonexistent\/model\/dir does not exist/],
    [['--warmup', 'two'], /--warmup: 'two' is not a whole number/],
    [['--kvcache', 'flat'], /--kvcache: 'flat' is not one of paged, continuous/],
    [['--format', 'xml'], /--format: 'xml' is not one of csv, json, md/],
    [['--no-such-flag'], /unknown option '--no-such-flag'/],
    // Past what the engine reads as a 32-bit integer: it ran --max-seq 4294967312 as 16.
    [['--max-seq', '4294967312'], /^bench: --max-seq: 4294967312 is too large \(at most 1073741824\)/],
    [['--concurrency', '-1'], /^bench: --concurrency: -1 is below the minimum of 1/],
    [['--request-rate', '1e-7'], /^bench: --request-rate: 1e-7 is below the minimum of 0\.000001/],
    [['--device', 'cpu', '--kv-memory', '1.0'], /^bench: --kv-memory: a fraction of 1 of the host's available memory .* at most 0\.95/],
    // Directories that exist but take no files, for root too (it passes every permission check).
    [['--output', '/proc/bench-out'], /^bench: --output: cannot create files in \/proc \(ENOENT\)/],
    [['--output', '/proc/new-dir/bench-out'], /^bench: --output: cannot create files in \/proc \(ENOENT\)/],
    [['--memory-stages', '/proc/stages.jsonl'], /^bench: --memory-stages: cannot create files in \/proc \(ENOENT\)/],
  ])('%j exits 2 naming the flag, before any model is loaded', async (args, message) => {
    const r = await bench(args as string[], { LUMEN_CACHE_DIR: cache });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message as RegExp);
    expect(r.stdout).toBe('');
    expect(readdirSync(cache)).toEqual([]);
  });

  describe('the positions the model was built for (max_position_embeddings 64)', () => {
    afterAll(() => cleanupAllFixtures());
    const model = () => smallFixture({ overrides: { ...SMALL_VOCAB, maxPositionEmbeddings: 64 } });
    const run = ['--concurrency', '1', '--warmup', '0', '--iters', '1'];

    it('--max-seq past them, or a cell that needs more: exit 2 naming the flag and the maximum, before the engine loads (they ran)', async () => {
      const m = await model();
      const cfgFile = path.join(m.dir, 'config.json');
      const out = path.join(tmp, 'positions-never-made');
      const maxSeq = await bench(['--model-path', m.dir, '--cells', '16:8', '--max-seq', '128', '--output', path.join(out, 'run'), ...run]);
      expect(maxSeq.code).toBe(2);
      expect(maxSeq.stderr.trim().split('\n').at(-1)).toBe(
        `bench: --max-seq 128 is more than the model's maximum of 64 positions (max_position_embeddings in ${cfgFile}); give --max-seq 64 or less`);
      expect(existsSync(out)).toBe(false);
      const cells = await bench(['--model-path', m.dir, '--cells', '16:8,60:16', '--max-seq', '64', ...run]);
      expect(cells.code).toBe(2);
      expect(cells.stderr.trim().split('\n').at(-1)).toBe(
        `bench: --cells: the cell 60:16 needs 76 positions (isl + osl), more than the model's maximum of 64 (max_position_embeddings in ${cfgFile})`);
      expect(cells.stdout).toBe('');
      const isl = await bench(['--model-path', m.dir, '--isl', '60', '--osl', '8', ...run]);
      expect(isl.code).toBe(2);
      expect(isl.stderr.trim().split('\n').at(-1)).toMatch(/^bench: --isl\/--osl: the cell 60:8 needs 68 positions \(isl \+ osl\), more than the model's maximum of 64 /);
    }, 60_000);

    it('--max-seq not given: the default lowered to the model\'s maximum, said in the notes; the engine runs with it', async () => {
      const m = await model();
      const prefix = path.join(tmp, 'positions-default');
      const r = await bench(['--model-path', m.dir, '--cells', '16:8', '--output', prefix, ...run]);
      expect(r.code, r.stderr).toBe(0);
      const note = `--max-seq 64: the model's maximum (max_position_embeddings in ${path.join(m.dir, 'config.json')}), below the default 4096`;
      expect(r.stderr).toContain(note);
      const report = JSON.parse(readFileSync(`${prefix}.json`, 'utf8')) as { engine: { max_seq: number }; model: { max_position_embeddings: number }; notes: string[] };
      expect(report.engine.max_seq).toBe(64);
      expect(report.model.max_position_embeddings).toBe(64);
      expect(report.notes).toContain(note);
    }, 60_000);
  });

  it('a --model-path refused after the usage checks (a broken config.json) leaves no --output directory behind', async () => {
    const model = path.join(tmp, 'broken-model');
    mkdirSync(model);
    writeFileSync(path.join(model, 'config.json'), '{}');
    const out = path.join(tmp, 'never-made');
    const r = await bench(['--model-path', model, '--output', path.join(out, 'run')], { LUMEN_CACHE_DIR: cache });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^bench: --model-path: .*config\.json: hidden_size is missing/m);
    expect(existsSync(out)).toBe(false);
  });
});
