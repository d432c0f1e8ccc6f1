// Side-by-side CPU benchmark: this engine against llama.cpp on the same synthetic Qwen3.5-shaped
// weights, per `--quant` type (scripts/bench-quant-model.ts): bf16 (the default) is our engine on
// the safetensors checkpoint and llama.cpp on its `bench convert --dtype bf16` GGUF; every other
// type is one GGUF, made once by the project's converter, that both engines load. Same thread
// count; after a warm-up of each, rounds are interleaved across engines and types, their order
// rotated every round (scripts/peer-rounds.ts, peerRoundOrder), so the machine's drift and a
// measurement's place in the sequence hit all alike; medians per figure, and every judged ratio (ours
// over llama.cpp, c=8 over c=1, a fraction of a roofline) taken within each round, then the median.
// llama.cpp is the native build of scripts/build-llama-native.sh when it exists (its llama-bench and
// llama-batched-bench, flash attention on), else the prebuilt library of node-llama-cpp 3.21.1; the
// header and JSON say which, and which file each engine loaded. Also measures this machine's two
// limits (read bandwidth, peak multiply-add rate) and sets each figure against its roofline
// (scripts/peer-roofline.ts); for the quantized types, issue 19's targets are judged.
// Usage: npm run bench:peer -- [--quant bf16,q8_0,q4_k_m] [--threads N] [--rounds N] [--prepare]
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { Command, Option } from 'commander';
import { steadyDecodeRate } from '../src/bench/metrics.js';
import { choiceArg, countArg } from '../src/cli/flag-values.js';
import { ConvertError, type OutDtype } from '../src/convert/convert.js';
import { isQuantDtype } from '../src/convert/quant-mix.js';
import { loadEngine } from '../src/engine/engine.js';
import { loadAddon, usableCpus } from '../src/engine/native.js';
import { KV_CACHE_DTYPES, type EngineHandle, type KvCacheDtype } from '../src/engine/types.js';
import { loadCheckpoint } from '../src/model/checkpoint.js';
import { loadGgufCheckpoint } from '../src/model/gguf-checkpoint.js';
import { PRESET_NAMES } from '../src/model/presets.js';
import { CheckpointError, type ModelCheckpoint } from '../src/model/types.js';
import { weightFormatJson, weightFormatLine } from '../src/model/weight-format.js';
import { machineInfo } from '../src/util/machine.js';
import { parseOrExitCode, UsageError } from '../src/util/usage-error.js';
import { REPO_ROOT } from '../src/util/version.js';
import { benchIds, median } from './bench-model.js';
import { DEFAULT_QUANTS, ensurePeerFiles, parseQuantList, type PeerFiles } from './bench-quant-model.js';
import { findNativeLlama, findNativeLlamaAmx, llamaBatchedDecode, llamaBench, type NativeLlama } from './llama-native.js';
import {
  DECODE_BYTES_RULE, PREFILL_FLOPS_RULE, decodeStepBytes, formatTarget, judgeTargets, prefillFlopsPerToken, type StepBytes, type TargetResult,
} from './peer-roofline.js';
import {
  higherLimit, peerRoundOrder, prefillRate, summarizeRounds, type Bandwidth, type FractionSet, type Figures, type PeerRound,
} from './peer-rounds.js';

interface Peak { peakGflops: number; peakKind: string }
type Probe = Bandwidth & Peak & { readGBs1Stream: number };
type ProbeParts = 'all' | 'bandwidth' | 'peak';
interface Probes { bandwidth(): Bandwidth; peak?: () => Peak }

const LLAMA_KINDS = ['auto', 'native', 'prebuilt'] as const;

interface Options {
  threads: number; rounds: number; isl: number; decodePrompt: number; decodeTokens: number; preset: string;
  llama: (typeof LLAMA_KINDS)[number]; quant: OutDtype[]; json?: string; prepare?: boolean; kvCacheDtype: KvCacheDtype;
}

function parseOptions(argv: string[]): Options {
  const program = new Command('peer-bench')
    .exitOverride()
    .addOption(new Option('--quant <list>', 'weight types, comma-separated: bf16 (our safetensors, llama.cpp\'s bf16 GGUF) or any `bench convert --dtype` type (one GGUF both engines load)')
      .argParser(parseQuantList).default(parseQuantList(DEFAULT_QUANTS), DEFAULT_QUANTS))
    .option('--threads <n>', 'threads for both engines', countArg('--threads', 1, 1024), 2)
    // 5 rounds by default: a round's decode fraction moves by +-10 % with the machine's bandwidth
    // (77-98 % within single runs here), so a median of 3 swung by as much between runs.
    .option('--rounds <n>', 'interleaved rounds (medians reported)', countArg('--rounds', 1, 1000), 5)
    .option('--isl <n>', 'prefill length', countArg('--isl', 1, 65536), 512)
    .option('--decode-prompt <n>', 'prompt length before decode', countArg('--decode-prompt', 1, 65536), 128)
    .option('--decode-tokens <n>', 'tokens generated per decode measurement', countArg('--decode-tokens', 2, 65536), 48)
    .option('--preset <p>', `synthetic preset: ${PRESET_NAMES.join(' | ')}`, choiceArg('--preset', PRESET_NAMES), '0.8b')
    .option('--llama <which>', 'auto (the native build when present) | native | prebuilt', choiceArg('--llama', LLAMA_KINDS), 'auto')
    // f16 by default: llama.cpp's own default cache (llama-bench's and the prebuilt library's
    // contexts here keep it), so both engines read the same KV bytes (before the thirty-fifth
    // session ours ran f32 against it: docs/performance.md).
    .option('--kv-cache-dtype <t>', 'our KV cache: f16 (as llama.cpp\'s F16 default) | f32', choiceArg('--kv-cache-dtype', KV_CACHE_DTYPES), 'f16')
    .option('--prepare', 'only make (or find) the weight files of --quant, print them and exit')
    .option('--json <file>', 'also write the results as JSON');
  program.parse(argv);
  return program.opts<Options>();
}

const log = (s: string) => process.stderr.write(`${s}\n`);

/**
 * Aggregate decode rate of streams run together, in the window where every stream decodes (so a
 * stream's own prefill, or another's, is not counted as decode time). Same rule for both engines.
 */
function decodeRate(streams: number[][]): number {
  const r = steadyDecodeRate(streams);
  if (r === null) throw new Error('the decode streams never ran together');
  return r;
}

// probes: the machine's limits now. The read bandwidth (its best pass and its sustained, median
// pass) is taken just before and just after the c=1 decode, and the higher of the two is that
// decode's limit: a single probe seconds away sometimes caught a slower moment than the decode saw,
// and put the decode above 100 % of its roofline. The same for the multiply-add peak around the
// prefill, where it is the prefill's limit (float weights): the peak probed once at the start moved
// between runs more than the code between them did (docs/performance.md, twenty-fourth session).
//
// Each timed prefill follows an untimed one of the same engine, as llama-bench's warm-up pass precedes
// its timed one in the same process: the first prefill after another process (a llama.cpp tool, or
// only `cat` of a 1.5 GB file) has run on the cores read 5-35 % slower, and the next one did not
// (docs/performance.md, twenty-ninth session).
async function oursRound(opt: Options, e: EngineHandle, round: number, probes?: Probes): Promise<Figures & { bw: Bandwidth; peakGflops: number }> {
  const ids = benchIds;
  await e.submit({ prompt: ids(opt.isl, 500 + round), maxTokens: 1, ignoreEos: true }).done;
  const peakBefore = probes?.peak?.().peakGflops ?? NaN;
  const p = await e.submit({ prompt: ids(opt.isl, 1000 + round), maxTokens: 1, ignoreEos: true }).done;
  const prefill = prefillRate(opt.isl, p.enqueueMs, p.tokenMs[0]!);
  const peakGflops = Math.max(peakBefore, probes?.peak?.().peakGflops ?? NaN);
  const unprobed: Bandwidth = { readGBs: NaN, readGBsMedian: NaN };
  const before = probes?.bandwidth() ?? unprobed;
  const one = await e.submit({ prompt: ids(opt.decodePrompt, 2000 + round), maxTokens: opt.decodeTokens, ignoreEos: true }).done;
  const after = probes?.bandwidth() ?? unprobed;
  const bw = higherLimit(before, after);
  const eight = await Promise.all(Array.from({ length: 8 }, (_, i) =>
    e.submit({ prompt: ids(opt.decodePrompt, 3000 + 10 * round + i), maxTokens: opt.decodeTokens, ignoreEos: true }).done));
  return { prefill, decode1: decodeRate([one.tokenMs]), decode8: decodeRate(eight.map((r) => r.tokenMs)), bw, peakGflops };
}

/** One weight type under test: the files, both engines, and what was measured on them. */
interface Entry {
  files: PeerFiles;
  ourModel: ModelCheckpoint;
  llamaModel: ModelCheckpoint;
  engine: EngineHandle;
  ref: Reference;
  step: StepBytes;
  prefillFlops: number;
  /** Both engines' figures and the limits probed around ours, one record a round. */
  rounds: PeerRound[];
}

const label = (q: OutDtype) => q.toUpperCase();
const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(0)} MiB`;

async function main(): Promise<void> {
  const opt = parseOrExitCode(() => parseOptions(process.argv));
  if (opt === undefined) return;
  const files = await ensurePeerFiles(REPO_ROOT, opt.preset, opt.quant, usableCpus(), log);
  if (opt.prepare) {
    for (const f of files) process.stdout.write(`${label(f.quant)}: ours ${f.ours}; llama.cpp ${f.llama}\n`);
    return;
  }
  const addon = loadAddon() as unknown as { probeMachine(t: number, parts?: ProbeParts): Probe };
  log('probing the machine (read bandwidth, peak multiply-add rate) ...');
  const machine = addon.probeMachine(opt.threads);
  const ctxLen = opt.decodePrompt + opt.decodeTokens + 8;
  const shared = await sharedLlama(opt);

  const entries: Entry[] = [];
  for (const f of files) {
    log(`loading ${label(f.quant)} ...`);
    const ourModel: ModelCheckpoint = f.quant === 'bf16' ? loadCheckpoint(f.ours) : loadGgufCheckpoint(f.ours);
    const llamaModel: ModelCheckpoint = f.llama === f.ours ? ourModel : loadGgufCheckpoint(f.llama);
    // Keep every type's engine loaded across the rounds (0.8B: bf16 1.5 GB and, where the ISA has
    // vdpbf16ps, its packed copy; Q8_0 0.8 GB and Q4_K_M 0.5 GB, mapped in place).
    const engine = await loadEngine(ourModel, {
      device: 'cpu', threads: opt.threads, blockSize: 16, kvcache: 'paged', maxSeq: Math.max(opt.isl + 8, ctxLen),
      maxSeqs: 8, prefillChunk: 512, stepTokenBudget: Math.max(512, opt.isl), prefixCache: false, kvCacheDtype: opt.kvCacheDtype,
    });
    const ref = await referenceLlama(opt, shared, f.llama, ctxLen);
    entries.push({
      files: f, ourModel, llamaModel, engine, ref, step: decodeStepBytes(ourModel), prefillFlops: prefillFlopsPerToken(ourModel), rounds: [],
    });
  }
  const cpu = machineInfo().cpuModel;
  const isa = entries[0]!.engine.info.isa;
  log(`CPU: ${cpu}; our ISA path: ${isa}; llama.cpp: ${shared.describe}`);

  log('warm-up ...');
  for (const e of entries) {
    await oursRound(opt, e.engine, 99);
    await e.ref.round(99);
  }
  const roundOrders: string[][] = [];
  for (let r = 0; r < opt.rounds; r++) {
    const order = peerRoundOrder(entries, r);
    roundOrders.push(order.map((s) => slotName(s.type.files.quant, s.engine)));
    log(`round ${r + 1}/${opt.rounds}: ${roundOrders[r]!.join(', ')}`);
    const ours = new Map<Entry, Awaited<ReturnType<typeof oursRound>>>();
    const llama = new Map<Entry, Figures>();
    for (const { type: e, engine } of order) {
      if (engine === 'llama') {
        llama.set(e, await e.ref.round(r));
        continue;
      }
      ours.set(e, await oursRound(opt, e.engine, r, {
        bandwidth: () => addon.probeMachine(opt.threads, 'bandwidth'),
        // Block-quantized prefill is set against llama.cpp, not against the peak (see report).
        ...(isQuantDtype(e.files.quant) ? {} : { peak: () => addon.probeMachine(opt.threads, 'peak') }),
      }));
    }
    for (const e of entries) {
      const o = ours.get(e)!;
      const rec: PeerRound = {
        ours: { prefill: o.prefill, decode1: o.decode1, decode8: o.decode8 }, llama: llama.get(e)!,
        readGBs: o.bw.readGBsMedian, readBestGBs: o.bw.readGBs, peakGflops: o.peakGflops,
      };
      e.rounds.push(rec);
      const peak = Number.isNaN(rec.peakGflops) ? '' : `, peak ${rec.peakGflops.toFixed(0)} GFLOP/s`;
      log(`round ${r + 1}/${opt.rounds} ${label(e.files.quant)}: read ${rec.readGBs.toFixed(1)} GB/s sustained, ${rec.readBestGBs.toFixed(1)} best pass${peak}; ours ${fmt(rec.ours)} | llama.cpp ${fmt(rec.llama)}`);
    }
  }

  const allGBs = entries.flatMap((e) => e.rounds.map((x) => x.readGBs));
  const out: string[] = [];
  out.push(`CPU: ${cpu}; our ISA path: ${isa}; llama.cpp: ${shared.describe}`);
  out.push(`machine: ${opt.threads} threads, read bandwidth ${median(allGBs).toFixed(1)} GB/s sustained (median pass of the best of 1, 4 and 8 read streams per thread, 4 passes of 1 GiB before and after each of our c=1 decodes; the median of all those limits), one stream per thread read ${machine.readGBs1Stream.toFixed(1)} at start; peak ${machine.peakGflops.toFixed(0)} GFLOP/s at start (${machine.peakKind}; float weights' prefill is set against the higher of the peaks probed just before and just after it, per round)`);
  out.push(`KV cache: ours ${entries[0]!.engine.info.kvCacheDtype}; llama.cpp F16 (its default)`);
  out.push(`rounds: ${opt.rounds}, interleaved, after one warm-up round of each; the order rotated every round (the types by one, ours or llama.cpp first alternating every ${entries.length} round${entries.length === 1 ? '' : 's'}): ${roundOrders.map((o, i) => `${i + 1}: ${o.join(', ')}`).join('; ')}`);
  out.push(`figures: medians over the rounds; ours / llama.cpp, c=8 / c=1 and every roofline fraction the median of each round's own ratio (a round above 100 % of its roofline is left out of that median, and under 2 rounds left is not judged); prefill ${opt.isl} tokens (each engine's timed prefill after an untimed one of its own), decode ${opt.decodeTokens} tokens after a ${opt.decodePrompt}-token prompt`);
  out.push(`decode bytes per step: ${DECODE_BYTES_RULE}`);
  out.push(`prefill FLOPs per token: ${PREFILL_FLOPS_RULE}`);
  const results = entries.map((e) => report(opt, e, machine, out));
  process.stdout.write(`${out.join('\n')}\n`);
  if (opt.json) {
    writeFileSync(opt.json, JSON.stringify({
      cpu, isa, llama: shared.describe, llamaKind: shared.kind, kvCache: { ours: entries[0]!.engine.info.kvCacheDtype, llama: 'f16' }, preset: opt.preset, threads: opt.threads, rounds: opt.rounds,
      isl: opt.isl, decodePrompt: opt.decodePrompt, decodeTokens: opt.decodeTokens, machine,
      decodeBytesRule: DECODE_BYTES_RULE, prefillFlopsRule: PREFILL_FLOPS_RULE, roundOrders, quants: results,
    }, null, 2));
  }
  for (const e of entries) {
    await e.engine.close();
    await e.ref.dispose();
  }
  await shared.dispose();
}

/** The printed section and the JSON object of one weight type. */
function report(opt: Options, e: Entry, machine: Probe, out: string[]): Record<string, unknown> {
  const q = e.files.quant;
  const blockQuant = isQuantDtype(q);
  const sum = summarizeRounds(e.rounds, e.step.total, e.prefillFlops, blockQuant);
  const { ours, llama, ratios: ratio, c8OverC1 } = sum;
  // Prefill: float weights run the multiply-add kernels whose peak the probe measures; the
  // block-quantized ones integer dot products (maddubs/madd, dpbusd), whose peak it does not, so
  // their prefill is set against llama.cpp (the issue's target) and its FLOP rate shown beside the
  // probed peak for scale only. Float weights: each round's prefill against the peak probed around
  // it; the roofline printed is the one at the median of those peaks.
  const gflops = (tokS: number) => (tokS * e.prefillFlops) / 1e9;
  const prefillPeak = blockQuant ? machine.peakGflops : sum.prefillPeak;
  const prefillRoof = (prefillPeak * 1e9) / e.prefillFlops;
  const same = e.files.ours === e.files.llama;
  const pct = (f: number) => `${(100 * f).toFixed(0)} %`;
  const x2 = (v: number) => v.toFixed(2);
  const roundsLine = (f: FractionSet) => `${f.rounds.map(pct).join(' / ')}${leftOutNote(f)}`;
  const roundGBs = e.rounds.map((r) => r.readGBs);

  out.push('');
  out.push(`== ${label(q)} ==`);
  out.push(`ours:      ${e.files.ours} (${weightFormatLine(e.ourModel)}; ${mib(e.ourModel.bytesOnDisk)})`);
  out.push(`llama.cpp: ${same ? 'the same file' : `${e.files.llama} (${weightFormatLine(e.llamaModel)}; ${mib(e.llamaModel.bytesOnDisk)})`}`);
  out.push(`decode reads ${(e.step.total / 1e9).toFixed(3)} GB/step (matrices ${(e.step.matrixBytes / 1e9).toFixed(3)} GB + state ${(e.step.stateBytes / 1e6).toFixed(1)} MB) -> roofline ${sum.decodeRoof.toFixed(1)} tok/s at ${sum.readGBs.toFixed(1)} GB/s (median of this type's rounds: ${roundGBs.map((x) => x.toFixed(1)).join(' / ')})`);
  out.push(`prefill ${(e.prefillFlops / 1e9).toFixed(3)} GFLOP/token -> ${blockQuant ? `ours ${gflops(ours.prefill).toFixed(0)} GFLOP/s, llama.cpp ${gflops(llama.prefill).toFixed(0)} GFLOP/s; limit: llama.cpp (integer dot products: their peak is not probed; the ${machine.peakKind} peak of ${machine.peakGflops.toFixed(0)} GFLOP/s, for scale only, would be ${prefillRoof.toFixed(0)} tok/s)` : `roofline ${prefillRoof.toFixed(0)} tok/s at the ${machine.peakKind} peak (median of the peaks probed around each round's prefill: ${e.rounds.map((r) => r.peakGflops.toFixed(0)).join(' / ')} GFLOP/s); ours ${gflops(ours.prefill).toFixed(0)} GFLOP/s`}`);
  out.push(`${'figure'.padEnd(32)}${'ours'.padStart(10)}${'llama.cpp'.padStart(12)}${'ratio'.padStart(8)}${'ours/roofline'.padStart(15)}`);
  const rows: Array<[string, keyof Figures, FractionSet | null]> = [
    [`prefill tok/s (isl ${opt.isl})`, 'prefill', sum.prefill],
    ['decode tok/s c=1', 'decode1', sum.decode],
    ['decode tok/s c=8 (aggregate)', 'decode8', null],
  ];
  for (const [name, k, frac] of rows) {
    const cell = frac === null ? '-' : frac.judged ? pct(frac.median) : 'not judged';
    out.push(`${name.padEnd(32)}${ours[k].toFixed(1).padStart(10)}${llama[k].toFixed(1).padStart(12)}${ratio[k].toFixed(2).padStart(8)}${cell.padStart(15)}`);
  }
  const r3 = sum.ratioRounds;
  out.push(`ours / llama.cpp per round: prefill ${r3.prefill.map(x2).join(' / ')}; decode c=1 ${r3.decode1.map(x2).join(' / ')}; c=8 ${r3.decode8.map(x2).join(' / ')}`);
  out.push(`c=8 / c=1, the median of each round's own ratio (ours): ${x2(c8OverC1.ours)}x (rounds ${c8OverC1.rounds.ours.map(x2).join(' / ')}); (llama.cpp): ${x2(c8OverC1.llama)}x (rounds ${c8OverC1.rounds.llama.map(x2).join(' / ')})`);
  out.push(`decode roofline fraction per round: ${roundsLine(sum.decode)}; against the best single pass instead: ${roundsLine(sum.decodeBest)} (median ${sum.decodeBest.judged ? pct(sum.decodeBest.median) : 'not judged'})`);
  if (sum.prefill !== null) out.push(`prefill peak fraction per round (each against the higher of the peaks probed just before and after it): ${roundsLine(sum.prefill)}`);
  for (const i of sum.decode.leftOut) {
    out.push(`note: round ${i}'s decode ran at ${pct(sum.decode.rounds[i - 1]!)} of the roofline its probes gave: the bandwidth changed within the round; that round's fraction is not a measurement and is left out of the median`);
  }
  let targets: TargetResult[] | null = null;
  if (blockQuant) {
    targets = judgeTargets({ isl: opt.isl, prefillRatio: ratio.prefill, decodeRatio: ratio.decode1, decodeRoof: sum.decode, c8OverC1: c8OverC1.ours });
    // The targets are stated for the 0.8B shape; another preset's verdicts are a check of the flow.
    out.push(`issue 19 targets (${label(q)})${opt.preset === '0.8b' ? '' : `, stated for the 0.8B shape: on ${opt.preset} these verdicts are not the issue's`}:`);
    for (const t of targets) out.push(`  ${formatTarget(t)}`);
  }
  const fractionJson = (f: FractionSet) => ({ median: f.judged ? f.median : null, judged: f.judged, rounds: f.rounds, leftOut: f.leftOut, validRounds: f.valid });
  return {
    quant: q,
    ours: { path: e.files.ours, weightFormat: weightFormatJson(e.ourModel), bytes: e.ourModel.bytesOnDisk, rounds: e.rounds.map((r) => r.ours), medians: ours },
    llama: { path: e.files.llama, weightFormat: weightFormatJson(e.llamaModel), bytes: e.llamaModel.bytesOnDisk, rounds: e.rounds.map((r) => r.llama), medians: llama },
    ratios: { ...ratio, rounds: sum.ratioRounds, rule: 'ours over llama.cpp: the median over the rounds of each round\'s own ratio' },
    c8OverC1: { ...c8OverC1, rule: 'the median over the rounds of each round\'s c=8 over the same round\'s c=1' },
    roundGBs, roundBestGBs: e.rounds.map((r) => r.readBestGBs),
    decodeBytes: e.step.total, decodeMatrixBytes: e.step.matrixBytes, decodeStateBytes: e.step.stateBytes,
    decodeRoof: sum.decodeRoof,
    decodeFraction: fractionJson(sum.decode), decodeBestFraction: fractionJson(sum.decodeBest),
    prefillFlops: e.prefillFlops, prefillGflops: { ours: gflops(ours.prefill), llama: gflops(llama.prefill) },
    prefillLimit: blockQuant ? 'llama.cpp (the integer kernels\' peak is not probed)' : `${machine.peakKind} peak`,
    prefillRoof: blockQuant ? null : prefillRoof, prefillFraction: sum.prefill === null ? null : fractionJson(sum.prefill),
    roundPeakGflops: blockQuant ? null : e.rounds.map((r) => r.peakGflops),
    targets,
  };
}

/** ` (round 2 left out: above 100 %)`, or nothing. */
function leftOutNote(f: FractionSet): string {
  if (f.leftOut.length === 0) return '';
  const which = `round${f.leftOut.length > 1 ? 's' : ''} ${f.leftOut.join(', ')}`;
  return ` (${which} left out: above 100 %${f.judged ? '' : `; ${f.valid} left, not judged`})`;
}

const slotName = (q: OutDtype, engine: 'ours' | 'llama') => `${label(q)} ${engine === 'ours' ? 'ours' : 'llama.cpp'}`;

interface Reference { round(r: number): Promise<Figures>; dispose(): Promise<void> }

/** The llama.cpp this run measures (--llama), before any model is loaded into it. */
interface SharedLlama {
  kind: 'native' | 'prebuilt';
  describe: string;
  native: NativeLlama | null;
  /** On an AMX CPU, the native build with AMX, the other build decode1Native measures (see findNativeLlamaAmx). */
  amxDecode: NativeLlama | null;
  prebuilt: Awaited<ReturnType<typeof import('node-llama-cpp').getLlama>> | null;
  dispose(): Promise<void>;
}

async function sharedLlama(opt: Options): Promise<SharedLlama> {
  const native = opt.llama === 'prebuilt' ? null : findNativeLlama();
  if (opt.llama === 'native' && native === null) throw new UsageError('--llama native: no native build; run `bash scripts/build-llama-native.sh` first');
  if (native !== null) {
    const amx = findNativeLlamaAmx();
    const describe = amx === null ? native.describe
      : `${native.describe}; decode c=1 the higher of that build's and the ${amx.describe}'s, run with one-token batches (-ub 1)`;
    return { kind: 'native', describe, native, amxDecode: amx, prebuilt: null, dispose: async () => {} };
  }
  const { getLlama, LlamaLogLevel } = await import('node-llama-cpp');
  const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
  return {
    kind: 'prebuilt', native: null, amxDecode: null, prebuilt: llama,
    describe: 'the prebuilt CPU library of node-llama-cpp 3.21.1 (one of its per-ISA CPU builds, chosen at load), in this process',
    dispose: async () => { await llama.dispose(); },
  };
}

/**
 * llama.cpp's c=1 decode from the native build; on an AMX CPU from both builds, the higher taken (the
 * AMX build's one-row path reads Q8_0 far faster, the main build's Q4_K a little: docs/performance.md,
 * "An Intel Xeon with AMX"), both printed.
 */
function decode1Native(opt: Options, native: NativeLlama, amxBuild: NativeLlama | null, gguf: string): number {
  const t = { prompt: 0, gen: opt.decodeTokens, depth: opt.decodePrompt };
  const main = llamaBench(native, gguf, opt.threads, t);
  if (amxBuild === null) return main;
  const amx = llamaBench(amxBuild, gguf, opt.threads, t, true);
  process.stderr.write(`  llama.cpp c=1 on ${path.basename(gguf)}: main build ${main.toFixed(2)}, AMX build ${amx.toFixed(2)} tok/s; the higher taken\n`);
  return Math.max(main, amx);
}

/** llama.cpp on one GGUF: the native build's tools, or the prebuilt library with this file loaded. */
async function referenceLlama(opt: Options, shared: SharedLlama, gguf: string, ctxLen: number): Promise<Reference> {
  const ids = benchIds;
  const native = shared.native;
  if (native !== null) {
    // Each tool run loads the (page-cached) GGUF and runs its own warm-up pass before the timed one.
    return {
      round: async () => ({
        prefill: llamaBench(native, gguf, opt.threads, { prompt: opt.isl, gen: 0, depth: 0 }),
        decode1: decode1Native(opt, native, shared.amxDecode, gguf),
        decode8: llamaBatchedDecode(native, gguf, opt.threads, opt.decodePrompt, opt.decodeTokens, 8),
      }),
      dispose: async () => {},
    };
  }
  const llama = shared.prebuilt!;
  // Loaded into the process's memory as the native tools' `-lm none` (llama-native.ts), not mapped.
  const model = await llama.loadModel({ modelPath: gguf, gpuLayers: 0, useMmap: false });
  const ctx1 = await model.createContext({ contextSize: Math.max(opt.isl + 8, ctxLen), sequences: 1, threads: opt.threads, batchSize: 512 });
  const ctx8 = await model.createContext({ contextSize: 8 * ctxLen, sequences: 8, threads: opt.threads, batchSize: 512 });

  async function genTimes(seq: ReturnType<typeof ctx8.getSequence>, prompt: number[]): Promise<number[]> {
    const times: number[] = [];
    const it = seq.evaluate(prompt as never, { temperature: 0 });
    for await (const _tok of it) {
      times.push(performance.now());
      if (times.length >= opt.decodeTokens) break;
    }
    return times;
  }
  return {
    async round(round: number): Promise<Figures> {
      const s1 = ctx1.getSequence();
      // Untimed, as ours (see oursRound) and llama-bench's own warm-up pass.
      await s1.evaluateWithoutGeneratingNewTokens(ids(opt.isl, 500 + round) as never);
      await s1.clearHistory();
      const t0 = performance.now();
      await s1.evaluateWithoutGeneratingNewTokens(ids(opt.isl, 1000 + round) as never);
      const prefill = opt.isl / ((performance.now() - t0) / 1000);
      await s1.clearHistory();
      const one = await genTimes(s1, ids(opt.decodePrompt, 2000 + round));
      s1.dispose();
      const seqs = Array.from({ length: 8 }, () => ctx8.getSequence());
      const eight = await Promise.all(seqs.map((s, i) => genTimes(s, ids(opt.decodePrompt, 3000 + 10 * round + i))));
      for (const s of seqs) s.dispose();
      return { prefill, decode1: decodeRate([one]), decode8: decodeRate(eight) };
    },
    async dispose() {
      await ctx1.dispose();
      await ctx8.dispose();
      await model.dispose();
    },
  };
}

function fmt(f: Figures): string {
  return `prefill ${f.prefill.toFixed(1)} decode1 ${f.decode1.toFixed(2)} decode8 ${f.decode8.toFixed(2)}`;
}

main().catch((err) => {
  if (err instanceof UsageError || err instanceof CheckpointError || err instanceof ConvertError) {
    process.stderr.write(`peer-bench: ${err.message}\n`);
    process.exitCode = 2;
    return;
  }
  process.stderr.write(`peer-bench: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exitCode = 1;
});
