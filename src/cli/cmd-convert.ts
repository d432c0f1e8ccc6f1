// `bench convert`: Hugging Face Qwen3.5 checkpoint -> GGUF that llama.cpp loads as arch `qwen35`.
import { existsSync, rmSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { Command } from 'commander';
import { ConvertError, ConvertIoError, ConvertOutputError, OUT_DTYPES, partialFileOf, writeGgufParallel, type OutDtype } from '../convert/convert.js';
import { QUANT_DTYPES, QUANT_SCHEMES } from '../convert/quant-mix.js';
import { loadCheckpoint } from '../model/checkpoint.js';
import { isSyntheticModelPath } from '../model/synthetic-model.js';
import { CheckpointError, loadedModelNotes, type DType } from '../model/types.js';
import { checkNamesFile, checkWritableFile } from '../util/output-dir.js';
import { UsageError } from '../util/usage-error.js';
import { usableCpus } from '../engine/native.js';
import { EXIT_INTERRUPTED, EXIT_TERMINATED } from '../bench/sweep-signals.js';
import { oneOf, parseCount } from './flag-values.js';

interface RawConvertOptions {
  modelPath?: string;
  out?: string;
  dtype?: string;
  mtp?: boolean;
  threads?: string;
  quiet?: boolean;
}

const FROM_SOURCE: Record<DType, OutDtype> = { BF16: 'bf16', F16: 'f16', F32: 'f32' };

export function convertCommand(setResult: (code: number) => void): Command {
  return new Command('convert')
    .summary('convert a checkpoint to GGUF (llama.cpp arch qwen35)')
    .description(
      'Write a GGUF v3 file that llama.cpp loads as arch qwen35: metadata, tokenizer, and tensors renamed and ' +
      "transformed the way llama.cpp's converter does it (norms +1, ssm_a = -exp(A_log), value heads re-tiled). " +
      '1-D tensors and ssm_conv1d are always F32. The quantized dtypes write what llama-quantize writes from the ' +
      "same weights (its per-tensor rules and reference quantizers, byte for byte; docs/quantization.md):\n" +
      QUANT_DTYPES.map((d) => `  ${d.padEnd(7)} ${QUANT_SCHEMES[d].summary}`).join('\n') +
      '\nRows whose length the type\'s block does not divide fall back as llama-quantize does: Q4_K -> Q5_0, ' +
      'Q5_K -> Q5_1, Q6_K -> Q8_0, IQ4_XS -> IQ4_NL, and F16 when 32 does not divide either. Tensors are streamed; the file appears ' +
      'only once complete. Exit status: 0 written, 1 a read or write failed (a full disk), 2 usage error, 130 SIGINT / ' +
      '143 SIGTERM (the unfinished file is removed).',
    )
    .option('--model-path <dir>', 'checkpoint directory (config.json, *.safetensors, tokenizer.json)')
    .option('--out <file>', 'output GGUF file')
    .option('--dtype <dtype>', `weight type: ${OUT_DTYPES.join(' | ')} (default: the checkpoint's dtype)`)
    .option('--mtp', 'also write the MTP block (nextn tensors at layer num_hidden_layers)')
    .option('--threads <n>', 'quantizer threads for the block types, at most the usable CPUs (the bytes do not depend on it) (default: the usable CPUs)')
    .option('-q, --quiet', 'no progress or summary on stderr')
    .action(async (raw: RawConvertOptions) => {
      if (!raw.modelPath) throw new UsageError('convert: --model-path <dir> is required');
      if (!raw.out) throw new UsageError('convert: --out <file> is required');
      if (isSyntheticModelPath(raw.modelPath)) {
        throw new UsageError(`--model-path ${raw.modelPath}: synthetic weights exist only in the engine's memory; write a checkpoint with \`bench synth --preset P --out DIR\` and convert that`);
      }
      const dir = resolve(raw.modelPath);
      if (!existsSync(dir)) throw new UsageError(`--model-path ${raw.modelPath}: no such directory`);
      if (!statSync(dir).isDirectory()) {
        throw new UsageError(`--model-path ${raw.modelPath}: a file, not a directory (convert reads a safetensors checkpoint directory${dir.toLowerCase().endsWith('.gguf') ? '; a GGUF is already converted' : ''})`);
      }
      checkNamesFile('--out', raw.out);
      const out = resolve(raw.out);
      checkWritableFile('--out', out, { replaced: true }); // written beside it, renamed over it
      let dtype: OutDtype | undefined;
      if (raw.dtype !== undefined) dtype = oneOf('--dtype', raw.dtype.toLowerCase(), OUT_DTYPES);
      const threads = raw.threads !== undefined ? parseCount('--threads', raw.threads, 1, 1024) : undefined;
      // More CPU-bound workers than CPUs only add memory (each its own heap, two pieces in flight).
      const cpus = usableCpus();
      const maxThreads = Math.min(threads ?? cpus, cpus);

      const progress = !raw.quiet && process.stderr.isTTY === true;
      let lastPct = -1;
      // SIGINT / SIGTERM: nothing is worth finishing; remove the unfinished file and leave at once,
      // 130 or 143 as the sweep (src/bench/sweep-signals.ts). The writer yields between pieces, so
      // this runs mid-conversion. The writer awaits nothing after its rename (its quantizer workers
      // end before it), so this handler cannot run once the complete file is in place: it is
      // removed before the event loop runs again.
      const partial = partialFileOf(out);
      const onSignal = (sig: NodeJS.Signals) => {
        let removed = false;
        try {
          removed = existsSync(partial);
          rmSync(partial, { force: true });
        } catch { /* leave at once all the same */ }
        if (progress) process.stderr.write('\n');
        process.stderr.write(`bench convert: ${sig}: stopped${removed ? `; removed the unfinished ${partial}` : ''}\n`);
        process.exit(sig === 'SIGTERM' ? EXIT_TERMINATED : EXIT_INTERRUPTED);
      };
      process.on('SIGINT', onSignal);
      process.on('SIGTERM', onSignal);
      try {
        const ckpt = loadCheckpoint(dir, { mtp: raw.mtp ?? false });
        const resolved = dtype ?? FROM_SOURCE[ckpt.dtype];
        const res = await writeGgufParallel(ckpt, out, {
          dtype: resolved,
          mtp: raw.mtp ?? false,
          threads: maxThreads,
          onProgress: progress
            ? (done, total) => {
              const pct = Math.floor((100 * done) / Math.max(1, total));
              if (pct !== lastPct) {
                lastPct = pct;
                process.stderr.write(`\rconvert: ${pct}%`);
              }
            }
            : undefined,
        });
        if (progress) process.stderr.write('\r\x1b[K');
        if (!raw.quiet) {
          const counts = new Map<string, number>();
          for (const t of res.tensorTypes.values()) counts.set(t, (counts.get(t) ?? 0) + 1);
          const types = [...counts].map(([t, n]) => `${n} ${t}`).join(', ');
          const notes: string[] = [];
          // How many quantizer threads ran (none for a float type, which has nothing to quantize), and
          // a --threads cap only where threads ran.
          if (res.quantizerThreads > 0) notes.push(`${res.quantizerThreads} quantizer thread${res.quantizerThreads === 1 ? '' : 's'}`);
          if (res.quantizerThreads > 0 && threads !== undefined && threads > cpus) notes.push(`--threads ${threads} capped at the ${cpus} usable CPUs`);
          process.stderr.write(
            `convert: wrote ${out} (${res.dtype}; ${res.tensorCount} tensors: ${types}; ` +
            `${(res.fileBytes / 2 ** 20).toFixed(1)} MiB) in ${res.seconds.toFixed(1)} s` +
            `${notes.length > 0 ? ` (${notes.join('; ')})` : ''}\n`,
          );
          // What the loader left out or decided (vision or MTP tensors not written, the embeddings' tie).
          for (const n of loadedModelNotes(ckpt)) process.stderr.write(`convert: ${n}\n`);
        }
        setResult(0);
      } catch (err) {
        if (progress) process.stderr.write('\n');
        if (err instanceof ConvertIoError) {
          // The temporary file was removed on the way out; say so only if it is still there.
          const left = existsSync(partial) ? `; the unfinished ${partial} could not be removed` : '';
          process.stderr.write(`bench convert: ${err.message}${left}\n`);
          setResult(1);
          return;
        }
        if (err instanceof ConvertOutputError) throw new UsageError(`--out ${raw.out}: ${err.message}`);
        if (err instanceof CheckpointError || err instanceof ConvertError) throw new UsageError(err.message);
        throw err;
      } finally {
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
      }
    });
}

export function registerConvert(program: Command, setResult: (code: number) => void): void {
  const cmd = convertCommand(setResult);
  cmd.copyInheritedSettings(program);
  program.addCommand(cmd);
}
