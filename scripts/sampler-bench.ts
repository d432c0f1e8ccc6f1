// Sampler benchmark: the work the engine does on the host for each token of each sequence, on a
// logits row of the vocabulary's width, per CPU kernel table this machine runs (AVX2, AVX-512):
// the whole-vocabulary draw (top_k 0 with a temperature: the OpenAI and Anthropic defaults), the
// same draw after a sort of the whole row (the reference samplerCheck holds it to, and what the
// engine did before the forty-second session), the greedy pick, the logprobs, a top-k pick (the
// table's, as the CPU backend picks; core/top_k.h's scalar one, as it did before), and the host's
// top-k draw (the table's pick and the draw: a top-k request asking for logprobs, or one whose stop
// tokens min_tokens bans; before the forty-fourth session the scalar pick and the draw). Every measurement
// reads the next of --rows rows (a step's rows, past a core's L2 at the vocabulary's width); the
// tables alternate, their order rotated every round. Reported: medians over the rounds of each
// round's median, and the sorted draw over the draw per round (its median).
// Usage: npm run bench:sampler -- [--rounds 5] [--draws 200] [--rows 8] [--temperature 1] [--top-p 1] [--top-logprobs 5] [--json FILE]
import { writeFileSync } from 'node:fs';
import { Command } from 'commander';
import { countArg, numberArg } from '../src/cli/flag-values.js';
import { loadAddon } from '../src/engine/native.js';
import { machineInfo } from '../src/util/machine.js';
import { parseOrExitCode, UsageError } from '../src/util/usage-error.js';
import { median, pairedRatios, roundOrder } from './bench-model.js';

/** What the addon's samplerBench returns (native/addon/sampler_bench.cpp). */
interface SamplerBenchResult { isa: string; vocab: number; rows: number; draws: number; drawMs: number; sortedDrawMs: number; argmaxMs: number; logprobsMs: number; topKPickMs: number; scalarTopKPickMs: number; topKDrawMs: number }
interface SamplerBenchAddon {
  samplerBench?: (o: { vocab: number; rows: number; draws: number; temperature: number; topP: number; topLogprobs: number; topK: number; isa: string }) => SamplerBenchResult;
  cpuInfo(): { avx2: boolean; avx512: boolean; avx512bf16: boolean };
}

interface Options { rounds: number; draws: number; rows: number; vocab: number; temperature: number; topP: number; topLogprobs: number; topK: number; json?: string }

function parseOptions(argv: string[]): Options {
  const program = new Command('sampler-bench')
    .exitOverride()
    .option('--rounds <n>', 'rounds (each table measured once a round, the order rotated)', countArg('--rounds', 1, 1000), 5)
    .option('--draws <n>', 'measurements of each operation per round', countArg('--draws', 1, 100000), 200)
    .option('--rows <n>', 'logits rows the measurements cycle through', countArg('--rows', 1, 64), 8)
    .option('--vocab <n>', 'row width (the Qwen3.5 vocabulary by default)', countArg('--vocab', 1, 1 << 20), 248320)
    .option('--temperature <t>', 'the draw\'s temperature', numberArg('--temperature', 0.001, 100), 1)
    .option('--top-p <p>', 'the draw\'s top_p', numberArg('--top-p', 0, 1), 1)
    .option('--top-logprobs <n>', 'alternatives the logprobs list', countArg('--top-logprobs', 0, 20), 5)
    .option('--top-k <k>', 'the top-k pick\'s k (Qwen3.5\'s generation config: 20)', countArg('--top-k', 1, 1024), 20)
    .option('--json <file>', 'also write the results as JSON');
  program.parse(argv);
  const o = program.opts<Options>();
  // At k >= the row's width the sampler draws from the whole row: the top-k columns would time that.
  if (o.topK >= o.vocab) throw new UsageError(`--top-k ${o.topK}: must be below --vocab (${o.vocab})`);
  return o;
}

const log = (s: string) => process.stderr.write(`${s}\n`);

function main(): void {
  const opt = parseOrExitCode(() => parseOptions(process.argv));
  if (opt === undefined) return;
  const addon = loadAddon() as unknown as SamplerBenchAddon;
  const bench = addon.samplerBench;
  if (typeof bench !== 'function') throw new Error('this build of the native addon has no samplerBench: rebuild it with `npm run build:native`');
  const info = addon.cpuInfo();
  const isas = [...(info.avx2 ? ['avx2'] : []), ...(info.avx512 && info.avx512bf16 ? ['avx512'] : [])]; // the AVX-512 table needs BF16 (and VNNI)
  if (isas.length === 0) throw new Error('this CPU runs neither kernel table (AVX2 + FMA, AVX-512 BF16)');
  const runs = new Map<string, SamplerBenchResult[]>(isas.map((i) => [i, []]));
  for (let r = 0; r < opt.rounds; r++) {
    log(`round ${r + 1}/${opt.rounds} ...`);
    for (const isa of roundOrder(isas, r)) {
      runs.get(isa)!.push(bench({ vocab: opt.vocab, rows: opt.rows, draws: opt.draws, temperature: opt.temperature, topP: opt.topP, topLogprobs: opt.topLogprobs, topK: opt.topK, isa }));
    }
  }
  const cpu = machineInfo();
  const ms = (v: number) => v.toFixed(3);
  const out = [`CPU: ${cpu.cpuModel}; a row of ${opt.vocab} logits (normal, spread 3.2), ${opt.rows} rows cycled; temperature ${opt.temperature}, top_p ${opt.topP}, ` +
    `${opt.topLogprobs} top logprobs, top-k ${opt.topK}; ms per token and sequence, medians over ${opt.rounds} rounds of each round's median of ${opt.draws}`];
  out.push(['table', 'draw (top_k 0)', 'sorted draw', 'sorted ÷ draw', 'greedy pick', 'logprobs', 'top-k pick', 'scalar top-k pick', 'scalar ÷ pick', 'host top-k draw'].join('\t'));
  for (const [isa, rs] of runs) {
    const ratios = pairedRatios(rs.map((r) => r.sortedDrawMs), rs.map((r) => r.drawMs));
    out.push([isa, ms(median(rs.map((r) => r.drawMs))), ms(median(rs.map((r) => r.sortedDrawMs))), median(ratios).toFixed(2),
      ms(median(rs.map((r) => r.argmaxMs))), ms(median(rs.map((r) => r.logprobsMs))), ms(median(rs.map((r) => r.topKPickMs))),
      ms(median(rs.map((r) => r.scalarTopKPickMs))), median(pairedRatios(rs.map((r) => r.scalarTopKPickMs), rs.map((r) => r.topKPickMs))).toFixed(2),
      ms(median(rs.map((r) => r.topKDrawMs)))].join('\t'));
  }
  out.push('sorted ÷ draw, scalar ÷ pick: the medians of each round\'s own ratio; the draw and the sorted draw pick the same tokens (samplerCheck), the two top-k picks the same candidates (kernelCheck), the host top-k draw the scalar pick\'s draws (samplerCheck)');
  process.stdout.write(`${out.join('\n')}\n`);
  if (opt.json) writeFileSync(opt.json, `${JSON.stringify({ cpu, options: opt, results: Object.fromEntries(runs) }, null, 2)}\n`);
}

try {
  main();
} catch (err) {
  if (err instanceof UsageError) {
    process.stderr.write(`sampler-bench: ${err.message}\n`);
    process.exitCode = 2;
  } else {
    process.stderr.write(`sampler-bench: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  }
}
