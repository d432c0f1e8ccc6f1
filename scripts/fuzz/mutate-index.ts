// Mutations of model.safetensors.index.json: shard names that leave the directory, name missing or
// wrong files, entries for tensors no shard has, a broken weight_map, a shard removed from disk.
import type { BaseDir, BaseSet } from './base.js';
import { buf, genericChange, json, jsonChange, type Change } from './change.js';
import { BAD_VALUES, renderWith, renderWithout } from './json-mutations.js';
import type { CaseRng } from './random.js';

export function indexChange(dir: BaseDir, base: BaseSet, rng: CaseRng): Change {
  const file = 'model.safetensors.index.json';
  const bytes = dir.files.get(file)!;
  const doc = json(bytes) as { weight_map: Record<string, string> };
  const names = [...base.shardOf.keys()];
  const shards = [...new Set(base.shardOf.values())].sort();
  const family = rng.weighted([
    ['shard-path', 4], ['extra-entry', 1], ['drop-entry', 1], ['weight_map', 1], ['missing-shard', 1], ['json-doc', 1], ['json-text', 1], ['generic', 1],
  ] as const);
  const out = (desc: string, t: string): Change => ({ family, desc, file, bytes: buf(t) });
  switch (family) {
    case 'shard-path': {
      const name = rng.pick(names);
      const own = base.shardOf.get(name)!;
      const other = shards.find((s) => s !== own)!;
      const [what, raw] = rng.pick([
        ['a path escaping the directory', JSON.stringify(`../${own}`)],
        ['an absolute path', '"/etc/passwd"'],
        ['".."', '".."'], ['"."', '"."'], ['an empty name', '""'],
        ['a file that does not exist', '"model-00003-of-00002.safetensors"'],
        ['config.json (not a safetensors file)', '"config.json"'],
        ['tokenizer.json (not a safetensors file)', '"tokenizer.json"'],
        ['a name with a NUL byte', JSON.stringify(`${own}\u0000x`)],
        ['a subdirectory path', JSON.stringify(`sub/${own}`)],
        ['the other shard (wrong shard)', JSON.stringify(other)],
        ['the name with a newline', JSON.stringify(`${own}\n`)],
        ['5', '5'], ['null', 'null'], ['[]', '[]'], ['a 1 MiB string', JSON.stringify('x'.repeat(1 << 20))],
      ] as const);
      return out(`weight_map entry of ${name} set to ${what}`, renderWith(doc, ['weight_map', name], raw, 2));
    }
    case 'extra-entry': {
      const ghost = rng.pick(['model.language_model.layers.0.ghost.weight', 'model.language_model.layers.9.mlp.up_proj.weight', 'not_a_tensor', '']);
      const wm = { ...doc.weight_map, [ghost]: rng.pick(shards) };
      return out(`weight_map lists a tensor no shard has (${JSON.stringify(ghost)})`, JSON.stringify({ ...doc, weight_map: wm }, null, 2));
    }
    case 'drop-entry': {
      const name = rng.pick(names);
      return out(`weight_map entry of ${name} removed`, renderWithout(doc, ['weight_map', name], 2));
    }
    case 'weight_map': {
      if (rng.chance(0.2)) return out('weight_map removed', renderWithout(doc, ['weight_map'], 2));
      const [what, raw] = rng.pick(BAD_VALUES);
      return out(`weight_map set to ${what}`, renderWith(doc, ['weight_map'], raw, 2));
    }
    case 'missing-shard': {
      const shard = rng.pick(shards);
      return { family, desc: `(index unchanged) shard ${shard} removed from the directory`, file: shard, bytes: null };
    }
    case 'json-doc':
    case 'json-text': return { ...jsonChange(file, bytes, rng, 2), family };
    case 'generic': return genericChange(file, bytes, rng);
  }
}
