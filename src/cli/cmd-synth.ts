// `bench synth`: write a synthetic Qwen3.5 checkpoint (real layout, random weights).
import { readdirSync } from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { UsageError } from '../util/usage-error.js';
import { errnoText } from '../util/errno-text.js';
import { ensureWritableDir } from '../util/output-dir.js';
import { oneOf, parseCount } from './flag-values.js';
import { isPresetName, PRESET_NAMES } from '../model/presets.js';
import { DEFAULT_SYNTH_SEED, isCheckpointFile, MAX_SYNTH_SEED, resolveSynthConfig, synthTensorCount, writeSynthCheckpoint, type SynthDType } from '../model/synth.js';
import { CheckpointError, type TextConfig } from '../model/types.js';

interface SynthFlags {
  preset?: string;
  out?: string;
  dtype: string;
  seed: string;
  shards: string;
  mtp?: boolean;
  vision: boolean;
  force?: boolean;
  layers?: string;
  hidden?: string;
  intermediate?: string;
  heads?: string;
  kvHeads?: string;
  linearKeyHeads?: string;
  linearValueHeads?: string;
  untied?: boolean;
  tied?: boolean;
  flatPrefix?: boolean;
  flatConfig?: boolean;
  thinking?: string;
}

/** Override flags by the config key they set (error messages name the flag). */
const FLAG_OF_KEY: Record<string, string> = {
  num_hidden_layers: '--layers',
  hidden_size: '--hidden',
  intermediate_size: '--intermediate',
  num_attention_heads: '--heads',
  num_key_value_heads: '--kv-heads',
  linear_num_key_heads: '--linear-key-heads',
  linear_num_value_heads: '--linear-value-heads',
};

function intFlag(flag: string, v: string | undefined, min: number, max?: number): number | undefined {
  return v === undefined ? undefined : parseCount(flag, v, min, max);
}

function fmtBytes(n: number): string {
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)} GB`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)} MB`;
  return `${(n / 1e3).toFixed(1)} kB`;
}

function fmtParams(n: number): string {
  return n >= 1e9 ? `${(n / 1e9).toFixed(2)}B` : `${(n / 1e6).toFixed(1)}M`;
}

export function registerSynth(program: Command, setResult: (code: number) => void): void {
  program
    .command('synth')
    .description('Write a synthetic Qwen3.5 checkpoint (real layout and tokenizer, seeded random weights)')
    .option('--preset <name>', `model size: ${PRESET_NAMES.join(' | ')}`)
    .option('--out <dir>', 'output directory')
    .option('--dtype <dtype>', 'weight dtype: bf16 | f32', 'bf16')
    .option('--seed <n>', 'random seed', String(DEFAULT_SYNTH_SEED))
    .option('--shards <n>', 'number of safetensors shards', '1')
    .option('--mtp', 'also write the MTP head (mtp.* tensors)')
    .option('--no-vision', 'omit the model.visual.* stub tensors')
    .option('--force', 'write into a directory that already holds a checkpoint')
    .option('--layers <n>', 'override num_hidden_layers (layer types re-derived: every 4th is full attention)')
    .option('--hidden <n>', 'override hidden_size')
    .option('--intermediate <n>', 'override intermediate_size')
    .option('--heads <n>', 'override num_attention_heads')
    .option('--kv-heads <n>', 'override num_key_value_heads')
    .option('--linear-key-heads <n>', 'override linear_num_key_heads')
    .option('--linear-value-heads <n>', 'override linear_num_value_heads (2 x key heads = the 4B/9B layout)')
    .option('--untied', 'untied output head (writes lm_head.weight)')
    .option('--tied', 'tied output head (no lm_head.weight)')
    .option('--flat-prefix', "name weights model.* instead of model.language_model.*")
    .option('--flat-config', 'write text keys at the top level of config.json instead of text_config')
    .option('--thinking <on|off>', "chat template's default for enable_thinking (default: on for 4b/9b, off otherwise)")
    .action(async (raw: SynthFlags) => {
      if (!raw.preset) throw new UsageError('--preset is required (tiny | 0.8b | 2b | 4b | 9b)');
      // Any case, as `--model-path synthetic:<preset>` takes it.
      const preset = raw.preset.toLowerCase();
      if (!isPresetName(preset)) throw new UsageError(`--preset: unknown preset ${JSON.stringify(raw.preset)} (expected ${PRESET_NAMES.join(', ')})`);
      if (!raw.out) throw new UsageError('--out is required');
      const dtype: SynthDType = oneOf('--dtype', raw.dtype, ['bf16', 'f32'] as const);
      // 32 bits, as every other --seed: the generator's seeding folds the bits above into the low 32,
      // so a larger seed would give the weights of a smaller one.
      const seed = intFlag('--seed', raw.seed, 0, MAX_SYNTH_SEED)!;
      const shards = intFlag('--shards', raw.shards, 1, 99999)!;
      if (raw.untied && raw.tied) throw new UsageError('--tied and --untied are mutually exclusive');
      let thinkingDefault: boolean | undefined;
      if (raw.thinking !== undefined) {
        thinkingDefault = oneOf('--thinking', raw.thinking, ['on', 'off'] as const) === 'on';
      }

      const overrides: Partial<TextConfig> = {};
      const set = <K extends keyof TextConfig>(k: K, v: TextConfig[K] | undefined) => { if (v !== undefined) overrides[k] = v; };
      set('numLayers', intFlag('--layers', raw.layers, 1, 1024));
      set('hiddenSize', intFlag('--hidden', raw.hidden, 1, 1 << 16));
      set('intermediateSize', intFlag('--intermediate', raw.intermediate, 1, 1 << 18));
      set('numHeads', intFlag('--heads', raw.heads, 1, 1024));
      set('numKvHeads', intFlag('--kv-heads', raw.kvHeads, 1, 1024));
      set('linearNumKeyHeads', intFlag('--linear-key-heads', raw.linearKeyHeads, 1, 1024));
      set('linearNumValueHeads', intFlag('--linear-value-heads', raw.linearValueHeads, 1, 1024));
      if (raw.untied) overrides.tieWordEmbeddings = false;
      if (raw.tied) overrides.tieWordEmbeddings = true;
      let config: TextConfig;
      try {
        config = resolveSynthConfig(preset, overrides);
      } catch (err) {
        if (err instanceof CheckpointError) {
          // e.g. "synth config (preset tiny): text_config.num_attention_heads (3) must be a multiple of ..."
          let msg = err.message.replace(/^synth config \(preset [^)]*\): /, '');
          for (const [key, flag] of Object.entries(FLAG_OF_KEY)) msg = msg.split(`text_config.${key}`).join(`${flag} (${key})`).split(` ${key} `).join(` ${flag} `);
          throw new UsageError(`invalid override: ${msg}`);
        }
        throw err;
      }

      // Every shard holds a tensor: checked before --out is made or its weights removed.
      const tensors = synthTensorCount(config, { mtp: !!raw.mtp, vision: raw.vision });
      if (shards > tensors) {
        throw new UsageError(`--shards: ${shards} shards, but this checkpoint has only ${tensors} tensors (at most one shard per tensor)`);
      }

      const out = path.resolve(raw.out);
      ensureWritableDir('--out', out); // tried for new files: root passes every permission check, /sys does not take them
      {
        // Any file a loader reads from the directory (a chat_template.jinja left there would replace the template written).
        const present = readdirSync(out).filter(isCheckpointFile);
        if (present.length > 0 && !raw.force) {
          throw new UsageError(`--out: ${out} already holds a checkpoint (${present[0]}); pass --force to overwrite`);
        }
      }

      let r;
      try {
        r = await writeSynthCheckpoint({
          preset, out, dtype, seed, shards, overrides, mtp: !!raw.mtp, vision: raw.vision,
          prefix: raw.flatPrefix ? 'model.' : 'model.language_model.', flatConfig: !!raw.flatConfig, thinkingDefault,
        });
      } catch (err) {
        const why = errnoText(err);
        if (why === null) throw err;
        // A full disk, a file that cannot be replaced: one line naming the flag and the errno (exit 1, as convert's).
        process.stderr.write(`bench synth: --out ${out}: writing failed: ${why}\n`);
        setResult(1);
        return;
      }
      const mtp = r.mtpParamCount ? ` + ${fmtParams(r.mtpParamCount)} MTP` : '';
      process.stderr.write(
        `synth: ${preset} ${dtype} -> ${r.dir} (${fmtParams(r.paramCount)} params${mtp}, ${fmtBytes(r.bytes)}, ${r.seconds.toFixed(1)} s)\n`,
      );
      setResult(0);
    });
}
