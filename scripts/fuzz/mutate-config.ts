// Mutations of config.json: hostile numbers and types in the size fields, eps / theta / rotary
// factor, layer lists that disagree with the weights, tie flags, mRoPE sections, and JSON damage.
import type { BaseDir } from './base.js';
import { buf, genericChange, json, jsonChange, type Change } from './change.js';
import { BAD_VALUES, pathStr, renderWith, renderWithout, type JsonPath } from './json-mutations.js';
import type { CaseRng } from './random.js';

const INT_FIELDS = [
  'hidden_size', 'num_hidden_layers', 'intermediate_size', 'num_attention_heads', 'num_key_value_heads', 'head_dim',
  'linear_num_key_heads', 'linear_num_value_heads', 'linear_key_head_dim', 'linear_value_head_dim', 'linear_conv_kernel_dim',
  'vocab_size', 'max_position_embeddings', 'eos_token_id', 'mtp_num_hidden_layers', 'full_attention_interval',
];
const FLOAT_FIELDS: JsonPath[] = [
  ['text_config', 'rms_norm_eps'], ['text_config', 'rope_parameters', 'rope_theta'], ['text_config', 'rope_parameters', 'partial_rotary_factor'],
];
const NUMBERS: ReadonlyArray<readonly [string, string]> = [
  ['0', '0'], ['-1', '-1'], ['1', '1'], ['2', '2'], ['0.3', '0.3'], ['1.5', '1.5'], ['1e300', '1e300'], ['1e39 (beyond float32)', '1e39'],
  ['2^31', '2147483648'], ['2^31 - 1', '2147483647'], ['1e9', '1000000000'], ['1e15', '1000000000000000'], ['NaN', 'NaN'],
  ['Infinity', 'Infinity'], ['1e400 (parses as Infinity)', '1e400'], ['"64"', '"64"'], ['null', 'null'], ['true', 'true'], ['[64]', '[64]'],
];

export function configChange(dir: BaseDir, rng: CaseRng): Change {
  const file = 'config.json';
  const bytes = dir.files.get(file)!;
  const doc = json(bytes) as { text_config: Record<string, unknown> };
  const family = rng.weighted([
    ['int-field', 3], ['float-field', 2], ['delete-field', 1], ['layers', 2], ['tie', 1], ['text_config', 0.5], ['mrope', 1],
    ['json-doc', 2], ['json-text', 2], ['generic', 1],
  ] as const);
  const out = (desc: string, t: string): Change => ({ family, desc, file, bytes: buf(t) });
  switch (family) {
    case 'int-field': {
      const key = rng.pick(INT_FIELDS);
      const [what, raw] = rng.pick(NUMBERS);
      return out(`set text_config.${key} to ${what}`, renderWith(doc, ['text_config', key], raw, 2));
    }
    case 'float-field': {
      const p = rng.pick(FLOAT_FIELDS);
      const [what, raw] = rng.pick(NUMBERS);
      return out(`set ${pathStr(p)} to ${what}`, renderWith(doc, p, raw, 2));
    }
    case 'delete-field': {
      const key = rng.pick([...INT_FIELDS, 'layer_types', 'rope_parameters', 'rms_norm_eps', 'tie_word_embeddings']);
      return out(`delete text_config.${key}`, renderWithout(doc, ['text_config', key], 2));
    }
    case 'layers': {
      const tc = structuredClone(doc.text_config);
      const n = tc.num_hidden_layers as number;
      const lt = tc.layer_types as string[];
      const choice = rng.pick(['fewer', 'more', 'type', 'interval', 'huge-no-types', 'types-short'] as const);
      let desc: string;
      switch (choice) {
        case 'fewer': tc.num_hidden_layers = n - 1; tc.layer_types = lt.slice(0, n - 1); desc = `num_hidden_layers ${n - 1} with matching layer_types`; break;
        case 'more': tc.num_hidden_layers = n + 1; tc.layer_types = [...lt, 'linear_attention']; desc = `num_hidden_layers ${n + 1} with matching layer_types`; break;
        case 'type': { const i = rng.int(n); lt[i] = rng.pick(['full_attention', 'linear_attention', 'mamba', '', 'FULL_ATTENTION']); tc.layer_types = lt; desc = `layer_types[${i}] = ${JSON.stringify(lt[i])}`; break; }
        case 'interval': { delete tc.layer_types; tc.full_attention_interval = rng.pick([0, 1, 2, 3, 5, -1, 1e9, 0.5]); desc = `no layer_types, full_attention_interval ${tc.full_attention_interval as number}`; break; }
        case 'huge-no-types': { delete tc.layer_types; tc.num_hidden_layers = rng.pick([1e9, 2 ** 31 - 1, 1e15, 100_000]); desc = `no layer_types, num_hidden_layers ${tc.num_hidden_layers as number}`; break; }
        case 'types-short': tc.layer_types = lt.slice(0, rng.int(n)); desc = `layer_types with ${(tc.layer_types as string[]).length} of ${n} entries`; break;
      }
      return out(desc, JSON.stringify({ ...doc, text_config: tc }, null, 2));
    }
    case 'tie': {
      const where = rng.pick([['tie_word_embeddings'], ['text_config', 'tie_word_embeddings']] as JsonPath[]);
      const [what, raw] = rng.pick([['false', 'false'], ['true', 'true'], ['"yes"', '"yes"'], ['1', '1'], ['null', 'null']] as const);
      return out(`set ${pathStr(where)} to ${what}`, renderWith(doc, where, raw, 2));
    }
    case 'text_config': {
      const [what, raw] = rng.pick(BAD_VALUES);
      return out(`set text_config to ${what}`, renderWith(doc, ['text_config'], raw, 2));
    }
    case 'mrope': {
      const [what, raw] = rng.pick([['[]', '[]'], ['[-1, 11, 10]', '[-1, 11, 10]'], ['[11, 11, 10, 0, 0]', '[11, 11, 10, 0, 0]'],
        ['[1.5]', '[1.5]'], ['[2147483648]', '[2147483648]'], ['"11,11,10"', '"11,11,10"'], ['[[11]]', '[[11]]']] as const);
      return out(`set text_config.rope_parameters.mrope_section to ${what}`, renderWith(doc, ['text_config', 'rope_parameters', 'mrope_section'], raw, 2));
    }
    case 'json-doc':
    case 'json-text': {
      const c = jsonChange(file, bytes, rng, 2);
      return { ...c, family };
    }
    case 'generic': return genericChange(file, bytes, rng);
  }
}
