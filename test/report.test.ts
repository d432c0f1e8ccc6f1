// The HTML report and `bench compare` on real sweeps of the embedded tiny model, through the compiled
// CLI. The page is opened in headless Chromium (Debian's `chromium`, driven by playwright-core): no
// console error, no request leaves the file, one mark per plotted row carrying the JSON's exact value,
// marks placed by their value. No assertion reads a time or a rate: the verdicts of `bench compare`
// are forced by editing a recorded report by a factor chosen above the run's own spread.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeOpenAI, type FakeServer } from './helpers/fake-openai.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const BENCH = path.join(ROOT, 'bin', 'bench.js');
/** Where CI's Chromium is (.ci/run installs Debian's package when it is missing). */
const CHROMIUM = process.env.LUMEN_CHROMIUM ?? '/usr/bin/chromium';
const ARTIFACTS = path.join(ROOT, 'test', 'artifacts');

const tmp = mkdtempSync(path.join(os.tmpdir(), 'bench-report-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

interface Run { code: number | null; stdout: string; stderr: string }

function bench(args: string[]): Promise<Run> {
  const child = spawn(process.execPath, [BENCH, ...args], { cwd: ROOT, env: { ...process.env, NO_COLOR: '1' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => { stdout += d.toString(); });
  child.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}

type Json = Record<string, any>;
const readJson = (f: string): Json => JSON.parse(readFileSync(f, 'utf8')) as Json;

// 2000:8 does not fit --max-seq 1024: an error cell, to be shown in the table and not plotted.
const SWEEP = ['--cells', '16:8,32:8,2000:8', '--concurrency', '1,2', '--warmup', '1', '--max-seq', '1024', '-q'];
const sweep = (prefix: string, iters: number) => bench([...SWEEP, '--iters', String(iters), '--output', prefix]);

/** What each chart must plot, read from a report row by this test's own paths (not the report's table). */
const SERIES: Record<string, Record<string, (r: Json) => unknown>> = {
  throughput: { decode_tok_s: (r) => r.decode_tok_s, per_user_tok_s: (r) => r.distributions.request_decode_tok_s.mean },
  ttft: { ttft_p50_ms: (r) => r.distributions.ttft_ms.p50, ttft_p99_ms: (r) => r.distributions.ttft_ms.p99 },
  itl: { itl_p50_ms: (r) => r.itl_p50_ms, itl_p99_ms: (r) => r.itl_p99_ms },
  efficiency: { batching_efficiency: (r) => r.batching_efficiency },
};
const rowName = (r: Json) => `${r.isl}:${r.osl} c=${r.concurrency}`;

/** The aria-labels a chart's marks must carry, one per plotted row (and series). */
function expectedLabels(chartId: string, rows: Json[]): string[] {
  const at = chartId.indexOf(':');
  const id = at < 0 ? chartId : chartId.slice(0, at);
  const cell = at < 0 ? null : chartId.slice(at + 1);
  const ok = rows.filter((r) => r.status === 'ok');
  if (id === 'frontier') {
    return ok.map((r) => `${rowName(r)} decode_tok_s=${r.decode_tok_s} per_user_tok_s=${r.distributions.request_decode_tok_s.mean}`);
  }
  const out: string[] = [];
  for (const r of ok.filter((x) => `${x.isl}:${x.osl}` === cell)) {
    for (const [name, get] of Object.entries(SERIES[id]!)) {
      const v = get(r);
      if (typeof v === 'number') out.push(`${rowName(r)} ${name}=${v}`);
    }
  }
  return out;
}

interface Mark { label: string; x: number; y: number }
interface PageView { charts: Record<string, Mark[]>; rows: Array<{ row: string; cls: string; text: string }>; title: string; body: string }

/** Opens a page in the browser and reads what a person would see: the charts' marks, the table, the text. */
async function view(browser: Browser, file: string, shot: string | null): Promise<{ page: PageView; errors: string[]; external: string[] }> {
  const page = await browser.newPage({ viewport: { width: 1500, height: 1000 } });
  const errors: string[] = [];
  const external: string[] = [];
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') errors.push(`${m.type()}: ${m.text()}`); });
  page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
  page.on('request', (r) => { if (!r.url().startsWith('file:')) external.push(r.url()); });
  await page.goto(pathToFileURL(file).href, { waitUntil: 'load' });
  const seen = await page.evaluate(() => {
    const charts: Record<string, Array<{ label: string; x: number; y: number }>> = {};
    for (const fig of Array.from(document.querySelectorAll('figure[data-chart]'))) {
      charts[fig.getAttribute('data-chart')!] = Array.from(fig.querySelectorAll('g.rows_marks path')).map((p) => {
        const m = /translate\(([-\d.e]+),([-\d.e]+)\)/.exec(p.getAttribute('transform') ?? '');
        return { label: p.getAttribute('aria-label') ?? '', x: m ? Number(m[1]) : NaN, y: m ? Number(m[2]) : NaN };
      });
    }
    const rows = Array.from(document.querySelectorAll('#rows tbody tr')).map((tr) => ({ row: tr.getAttribute('data-row') ?? '', cls: tr.className, text: (tr as HTMLElement).innerText }));
    return { charts, rows, title: document.querySelector('h1')?.textContent ?? '', body: document.body.innerText };
  });
  if (shot) {
    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: path.join(ARTIFACTS, shot), fullPage: true });
  }
  await page.close();
  return { page: seen, errors, external };
}

/** Positions are a linear function of the plotted value: fit on the extremes, every mark within a pixel. */
function expectLinear(points: Array<{ v: number; p: number }>, direction: 1 | -1, what: string): void {
  const distinct = [...new Set(points.map((q) => q.v))];
  if (distinct.length < 2) return;
  const lo = points.reduce((a, b) => (b.v < a.v ? b : a));
  const hi = points.reduce((a, b) => (b.v > a.v ? b : a));
  const slope = (hi.p - lo.p) / (hi.v - lo.v);
  expect(Math.sign(slope), `${what}: larger values ${direction > 0 ? 'right' : 'up'}`).toBe(direction);
  for (const q of points) expect(Math.abs(lo.p + slope * (q.v - lo.v) - q.p), `${what}: mark at ${q.v}`).toBeLessThan(1);
}

let browser: Browser;
const A = path.join(tmp, 'a');
const B = path.join(tmp, 'b');
const ONE = path.join(tmp, 'one');

beforeAll(async () => {
  for (const [prefix, iters] of [[A, 3], [B, 3], [ONE, 1]] as const) {
    const r = await sweep(prefix, iters);
    expect(r.code, r.stderr).toBe(3); // the 2000:8 rows are error rows
  }
}, 300_000);

describe('PREFIX.html', () => {
  // Not skipped when Chromium is missing: these tests fail, saying where it was looked for.
  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) {
      throw new Error(`Chromium not found at ${CHROMIUM}: the browser test needs it (apt-get install chromium; .ci/run installs it; LUMEN_CHROMIUM names another binary)`);
    }
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu'] });
  }, 60_000);
  afterAll(async () => { await browser?.close(); });

  it('is written by --output and renders in Chromium: no console error, nothing fetched, one mark per plotted row with the JSON\'s values', async () => {
    const rep = readJson(`${A}.json`);
    const html = readFileSync(`${A}.html`, 'utf8');
    expect(html).not.toMatch(/<script|<link|@import|url\(http|src="http/i);
    const { page, errors, external } = await view(browser, `${A}.html`, 'report-engine.png');
    expect(errors).toEqual([]);
    expect(external).toEqual([]);
    expect(page.title).toContain('embedded model');
    expect(page.body).toContain('the in-process engine');
    expect(page.body).toContain(rep.tool.git_commit);
    expect(page.body).toContain(rep.machine.cpu_model);

    const cells = ['16:8', '32:8', '2000:8'];
    const ids = [...cells.flatMap((c) => Object.keys(SERIES).map((id) => `${id}:${c}`)), 'frontier'];
    expect(Object.keys(page.charts).sort()).toEqual(ids.sort());
    let plotted = 0;
    for (const id of ids) {
      const marks = page.charts[id]!;
      const want = expectedLabels(id, rep.rows);
      expect(marks.map((m) => m.label).sort(), id).toEqual(want.sort());
      plotted += marks.length;
      if (id.startsWith('frontier')) {
        const parse = (m: Mark) => Object.fromEntries(m.label.split(' ').slice(2).map((kv) => kv.split('=')).map(([k, v]) => [k, Number(v)]));
        expectLinear(marks.map((m) => ({ v: parse(m).decode_tok_s!, p: m.x })), 1, `${id} x`);
        expectLinear(marks.map((m) => ({ v: parse(m).per_user_tok_s!, p: m.y })), -1, `${id} y`);
      } else {
        const value = (m: Mark) => Number(m.label.split('=').pop());
        const conc = (m: Mark) => Number(/ c=(\d+) /.exec(m.label)![1]);
        expectLinear(marks.map((m) => ({ v: value(m), p: m.y })), -1, `${id} y`);
        expectLinear(marks.map((m) => ({ v: conc(m), p: m.x })), 1, `${id} x`);
      }
    }
    // 2 ok cells x 2 concurrencies: 7 series points each, plus the frontier's 4; the error cell plots nothing.
    expect(plotted).toBe(4 * 7 + 4);
    expect(page.charts['throughput:2000:8']).toEqual([]);

    // Every row in the table, in order, error rows in place with their reason.
    expect(page.rows.map((r) => r.row)).toEqual(rep.rows.map(rowName));
    for (const [i, r] of rep.rows.entries()) {
      expect(page.rows[i]!.cls).toBe(r.status);
      if (r.status === 'error') expect(page.rows[i]!.text).toContain('exceeds --max-seq 1024');
    }
    expect(existsSync(path.join(ARTIFACTS, 'report-engine.png'))).toBe(true);
  });

  it('covers an endpoint sweep: the header names the endpoint, the charts plot its rows', async () => {
    let server: FakeServer | null = null;
    try {
      server = await startFakeOpenAI({});
      const prefix = path.join(tmp, 'ep');
      const r = await bench(['--endpoint', server.url, '--cells', '24:6', '--concurrency', '1,2', '--iters', '2', '--warmup', '0', '-q', '--output', prefix]);
      expect(r.code, r.stderr).toBe(0);
      const rep = readJson(`${prefix}.json`);
      const { page, errors, external } = await view(browser, `${prefix}.html`, 'report-endpoint.png');
      expect(errors).toEqual([]);
      expect(external).toEqual([]);
      expect(page.title).toContain(`endpoint ${server.url}`);
      expect(page.body).toContain('an OpenAI-compatible endpoint over HTTP');
      for (const id of ['throughput:24:6', 'ttft:24:6', 'itl:24:6', 'efficiency:24:6', 'frontier']) {
        expect(page.charts[id]!.map((m) => m.label).sort(), id).toEqual(expectedLabels(id, rep.rows).sort());
      }
    } finally {
      await server?.close();
    }
  });
});

describe('bench report', () => {
  it('bench report re-renders the same page from the saved JSON', async () => {
    const out = path.join(tmp, 'again.html');
    const r = await bench(['report', `${A}.json`, '--out', out]);
    expect(r.code, r.stderr).toBe(0);
    expect(readFileSync(out, 'utf8')).toBe(readFileSync(`${A}.html`, 'utf8'));
    const missing = await bench(['report', path.join(tmp, 'nope.json')]);
    expect(missing.code).toBe(2);
    expect(missing.stderr.trim()).toBe(`bench: ${path.join(tmp, 'nope.json')}: no such file`);
    const notReport = path.join(tmp, 'not-report.json');
    writeFileSync(notReport, JSON.stringify({ schema_version: 1, rows: [{ isl: 1 }] }));
    const bad = await bench(['report', notReport]);
    expect(bad.code).toBe(2);
    expect(bad.stderr.trim().split('\n')).toHaveLength(1);
    expect(bad.stderr).toContain('rows[0].osl is not an integer');
    // A missing directory is made (out/run.html on a fresh clone); a file in the way is named.
    const noDir = await bench(['report', `${A}.json`, '--out', path.join(tmp, 'no-dir', 'x.html')]);
    expect(noDir.code, noDir.stderr).toBe(0);
    expect(readFileSync(path.join(tmp, 'no-dir', 'x.html'), 'utf8')).toBe(readFileSync(`${A}.html`, 'utf8'));
    const inTheWay = await bench(['report', `${A}.json`, '--out', path.join(notReport, 'x.html')]);
    expect(inTheWay.code).toBe(2);
    expect(inTheWay.stderr.trim()).toBe(`bench: --out: ${notReport} is a file, not a directory`);
  });
});

/** A recorded report as if no other process had run beside it (cpu_other_share null in every row). */
function quiet(rep: Json): Json {
  const out = structuredClone(rep);
  for (const r of out.rows) r.cpu_other_share = null;
  return out;
}

/** A recorded report with decode slowed by `f`: rates divided, inter-token gaps multiplied, TTFT untouched. */
function slowDecode(rep: Json, f: number): Json {
  const out = structuredClone(rep);
  for (const r of out.rows) {
    if (r.status !== 'ok') continue;
    r.decode_tok_s /= f;
    for (const k of ['mean', 'p50', 'p90', 'p99', 'min', 'max']) r.distributions.request_decode_tok_s[k] /= f;
    r.itl_p50_ms *= f;
    r.itl_p99_ms *= f;
    r.samples.decode_tok_s = r.samples.decode_tok_s.map((v: number | null) => (v === null ? null : v / f));
    for (const k of ['itl_p50_ms', 'itl_p99_ms']) r.samples[k] = r.samples[k].map((v: number | null) => (v === null ? null : v * f));
    const shift = Math.round(Math.log2(f) * r.samples.itl_bins_per_octave);
    r.samples.itl_gap_bins = r.samples.itl_gap_bins.map((h: Array<[number, number]>) => h.map(([b, c]) => [b + shift, c]));
  }
  return out;
}

/**
 * A factor beyond every noise floor of a comparison of `file` with a copy of itself slowed by it. The
 * floors are taken on the log scale, so they do not depend on the scale of the figures: those of the
 * file against itself are the same (to the ITL bins' rounding), read from `bench compare`'s JSON. (A
 * bound from the samples' spread alone, its 16th power, became ~1e48 once the ITL floors were drawn
 * from every gap, and a figure divided by it is no measurement.)
 */
async function factorBeyondFloors(file: string): Promise<number> {
  const r = await bench(['compare', file, file, '--format', 'json', '--threshold', '1000000']);
  let floor = 0;
  for (const row of (JSON.parse(r.stdout) as Json).rows) for (const f of row.figures ?? []) if (typeof f.floor === 'number') floor = Math.max(floor, f.floor);
  return 1.5 * Math.exp(floor);
}

/** The figures a slower decode moves: ITL p99 is not judged (21 gaps or fewer in these rows: a p99 is judged from 500). */
const SLOWED = ['decode_tok_s', 'per_user_tok_s', 'itl_p50_ms'];

describe('bench compare', () => {
  it('keeps per-request samples in the JSON: one entry per timed request, passes numbered from 0', () => {
    for (const r of readJson(`${A}.json`).rows) {
      if (r.status !== 'ok') { expect(r.samples).toBeNull(); continue; }
      expect(r.samples.pass).toEqual(Array.from({ length: 3 * r.concurrency }, (_, i) => Math.floor(i / r.concurrency)));
      for (const k of ['ttft_ms', 'decode_tok_s', 'itl_p50_ms', 'itl_p99_ms']) expect(r.samples[k]).toHaveLength(3 * r.concurrency);
      expect(Math.max(...r.samples.ttft_ms)).toBe(r.distributions.ttft_ms.max);
      // Each pass's decode gaps, binned: as many as the row pools, and the pooled percentiles read off
      // the bins within half a bin (0.27 %) of the row's own.
      expect(r.samples.itl_bins_per_octave).toBe(128);
      const hist = r.samples.itl_gap_bins as Array<Array<[number, number]>>;
      expect(hist).toHaveLength(3);
      const pooled = hist.flat().sort((x, y) => x[0] - y[0]);
      const n = pooled.reduce((a, [, c]) => a + c, 0);
      expect(n).toBe(r.distributions.itl_ms.n);
      for (const [p, figure] of [[50, r.itl_p50_ms], [99, r.itl_p99_ms]] as const) {
        const rank = Math.min(n, Math.max(1, Math.ceil((p / 100) * n)));
        let c = 0;
        const bin = pooled.find(([, k]) => (c += k) >= rank)![0];
        expect(Math.abs(Math.log(2 ** (bin / 128) / figure)), `p${p}`).toBeLessThanOrEqual(Math.log(2) / 256 + 1e-12);
      }
    }
  });

  it('a report against itself: no change beyond noise, exit 0', async () => {
    const r = await bench(['compare', `${A}.json`, `${A}.json`]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe(`bench compare: warning: BASE and NEW are the same file (${A}.json): nothing can have changed\n`);
    expect(r.stdout).toContain('**Provenance**: no difference');
    expect(r.stdout).toContain('**No change beyond noise** (threshold 5%)');
    expect(r.stdout).not.toMatch(/▼|▲/); // no figure flagged either way (the footnote and a contention note may say "regression")
    // The error rows are matched too, and say so.
    expect(r.stdout).toContain('| 2000:8 c=1 engine | failed in both:');
  });

  it('two sweeps of the same build: rows matched, no provenance difference, every floor known', async () => {
    const r = await bench(['compare', `${A}.json`, `${B}.json`, '--format', 'json', '--threshold', '1000000']);
    const c = JSON.parse(r.stdout) as Json;
    expect(c.provenance).toEqual([]);
    expect(c.only_in_base).toEqual([]);
    expect(c.only_in_next).toEqual([]);
    expect(c.rows.map((x: Json) => `${x.key}:${x.row}`)).toEqual(readJson(`${A}.json`).rows.map((x: Json) => `${rowName(x)} engine:${x.status === 'ok' ? 'compared' : 'failed in both'}`));
    for (const row of c.rows.filter((x: Json) => x.row === 'compared')) {
      for (const f of row.figures) {
        expect(f.floor_unknown, `${row.key} ${f.figure}`).toBeNull();
        // The p99s of these rows (6 requests at most, 7 gaps each) are not judged; every other floor is known.
        if (f.figure.endsWith('p99_ms')) expect(f.verdict).toBe('not judged');
        else expect(f.band).toEqual([Math.exp(-f.floor), Math.exp(f.floor)]);
      }
    }
    expect(r.code).toBe(0);
    // Two runs on a shared machine may differ by whatever contention does, so the threshold is set just
    // above the largest change this pair shows: the verdict then follows from the rule, not the machine.
    const ratios = c.rows.flatMap((x: Json) => x.figures).map((f: Json) => Math.abs(f.ratio - 1) * 100);
    const threshold = String(Math.ceil(Math.max(...ratios)) + 1);
    const md = await bench(['compare', `${A}.json`, `${B}.json`, '--threshold', threshold]);
    expect(md.code, md.stdout).toBe(0);
    expect(md.stdout).toContain(`**No change beyond noise** (threshold ${threshold}%).`);
    expect(md.stdout).toContain('**Provenance**: no difference');
  });

  it('decode slowed by a known factor: exactly the decode figures flagged, in every row, exit 5', async () => {
    // This machine may be shared: a row measured beside another process is "under contention", and a
    // move there fails the gate as not a pass, not as a regression. The pair here is made quiet.
    const base = quiet(readJson(`${A}.json`));
    const quietA = path.join(tmp, 'a-quiet.json');
    writeFileSync(quietA, JSON.stringify(base));
    const f = await factorBeyondFloors(quietA);
    const slowed = path.join(tmp, 'slowed.json');
    writeFileSync(slowed, JSON.stringify(slowDecode(base, f)));
    const md = await bench(['compare', quietA, slowed]);
    expect(md.code, md.stderr).toBe(5);
    expect(md.stdout).toContain('**12 regressions** beyond both the noise floor and the 5% threshold (exit 5)');
    const js = await bench(['compare', quietA, slowed, '--format', 'json']);
    expect(js.code).toBe(5);
    const c = JSON.parse(js.stdout) as Json;
    for (const row of c.rows.filter((x: Json) => x.row === 'compared')) {
      const flagged = row.figures.filter((x: Json) => x.verdict === 'regression').map((x: Json) => x.figure);
      expect(flagged, row.key).toEqual(SLOWED);
      const ttft = row.figures.find((x: Json) => x.figure === 'ttft_mean_ms');
      expect(ttft.ratio).toBe(1);
      expect(ttft.verdict).toBe('below threshold');
    }
    const csv = await bench(['compare', quietA, slowed, '--format', 'csv']);
    expect(csv.code).toBe(5);
    const lines = csv.stdout.trim().split('\n');
    expect(lines[0]).toBe('isl,osl,concurrency,target,row,figure,base,new,ratio,noise_lo,noise_hi,verdict,note');
    expect(lines.filter((l) => l.includes(',regression,'))).toHaveLength(12);
    // The other way round, the same figures are improvements, and nothing regressed.
    const back = await bench(['compare', slowed, quietA]);
    expect(back.code).toBe(0);
    expect(back.stdout).toContain('**No regression beyond noise** (threshold 5%); 12 improvements beyond noise.');
  });

  it('one timed pass: the floor is unknown, said so, and nothing is flagged', async () => {
    const base = readJson(`${ONE}.json`);
    const slowed = path.join(tmp, 'one-slowed.json');
    writeFileSync(slowed, JSON.stringify(slowDecode(base, 4)));
    const r = await bench(['compare', `${ONE}.json`, slowed]);
    expect(r.code, r.stderr).toBe(0);
    // 5 figures a row have no floor (the p99s are not judged: too few samples).
    expect(r.stdout).toContain('The noise floor is unknown for 20 figures (noise ?; BASE: one timed pass');
    expect(r.stdout).toContain('12 of them moved beyond the threshold and are not flagged. Run both sweeps with `--iters 3` or more.');
    const c = JSON.parse((await bench(['compare', `${ONE}.json`, slowed, '--format', 'json'])).stdout) as Json;
    const unknown = c.rows.flatMap((x: Json) => x.figures).filter((x: Json) => x.verdict === 'floor unknown');
    expect(unknown).toHaveLength(12);
    expect(unknown[0].floor_unknown).toMatch(/^BASE: one timed pass/);
  });

  it('a row that fails in NEW is a regression; provenance differences come first', async () => {
    const base = readJson(`${A}.json`);
    const next = structuredClone(base);
    next.engine.threads = 1;
    next.tool.git_commit = '0'.repeat(40);
    const row = next.rows.find((r: Json) => r.status === 'ok');
    Object.assign(row, { status: 'error', reason: 'engine error: out of KV blocks', decode_tok_s: null });
    const file = path.join(tmp, 'failed.json');
    writeFileSync(file, JSON.stringify(next));
    const r = await bench(['compare', `${A}.json`, file]);
    expect(r.code).toBe(5);
    const provenanceAt = r.stdout.indexOf('**Provenance differences**');
    expect(provenanceAt).toBeGreaterThan(0);
    expect(provenanceAt).toBeLessThan(r.stdout.indexOf('regression'));
    expect(r.stdout).toContain(`| engine.threads | ${base.engine.threads} | 1 |`);
    expect(r.stdout).toContain(`| tool.git_commit | ${base.tool.git_commit} | ${'0'.repeat(40)} |`);
    expect(r.stdout).toContain(`| ${rowName(row)} engine | **▼ failed in NEW**: engine error: out of KV blocks |`);
  });

  it('bad input is a one-line usage error naming the file or flag, exit 2', async () => {
    const cases: Array<[string[], string]> = [
      [['compare', `${A}.json`, path.join(tmp, 'missing.json')], `${path.join(tmp, 'missing.json')}: no such file`],
      [['compare', `${A}.json`, `${A}.csv`], `${A}.csv: not valid JSON`],
      [['compare', `${A}.json`, `${A}.json`, '--threshold', 'x'], "--threshold: 'x' is not a number"],
      [['compare', `${A}.json`, `${A}.json`, '--threshold', '-1'], '--threshold: -1 is out of range'],
      [['compare', `${A}.json`, `${A}.json`, '--format', 'xml'], "--format: 'xml' is not one of md, csv, json"],
    ];
    for (const [args, msg] of cases) {
      const r = await bench(args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toContain(msg);
      expect(r.stderr.trim().split('\n'), args.join(' ')).toHaveLength(1);
      expect(r.stdout).toBe('');
    }
  });
});
