// A mutated file of a checkpoint directory, and the damage any file (or any JSON file) can take.
import { deleteBytes, flipBits, overwriteBytes, truncate, type Mutated } from './bytes.js';
import { mutateJsonDoc, mutateJsonText, type JsonPath } from './json-mutations.js';
import type { CaseRng } from './random.js';

/** One file of the case: its new bytes (null: the file is removed), and what was done. */
export interface Change { family: string; desc: string; file: string; bytes: Buffer | null }

export const json = (b: Buffer): unknown => JSON.parse(b.toString('utf8'));
export const buf = (s: string) => Buffer.from(s, 'utf8');

export function fromMutated(family: string, file: string, m: Mutated): Change {
  return { family, desc: m.desc, file, bytes: m.bytes };
}

/** Generic damage any file can take. */
export function genericChange(file: string, bytes: Buffer, rng: CaseRng): Change {
  const kind = rng.weighted([['bitflip', 3], ['overwrite', 2], ['truncate', 2], ['delete-bytes', 1], ['remove-file', 0.5]] as const);
  switch (kind) {
    case 'bitflip': return fromMutated(kind, file, flipBits(bytes, rng));
    case 'overwrite': return fromMutated(kind, file, overwriteBytes(bytes, rng));
    case 'truncate': return fromMutated(kind, file, truncate(bytes, rng.int(bytes.length), 'random point'));
    case 'delete-bytes': return fromMutated(kind, file, deleteBytes(bytes, rng));
    case 'remove-file': return { family: kind, desc: 'remove the file', file, bytes: null };
  }
}

/** JSON-document damage: structural edits of the parsed document or text-level damage. */
export function jsonChange(file: string, bytes: Buffer, rng: CaseRng, indent: number, paths?: readonly JsonPath[]): Change {
  if (rng.chance(0.5)) {
    const m = mutateJsonDoc(json(bytes), rng, indent, paths);
    return { family: 'json-doc', desc: m.desc, file, bytes: buf(m.text) };
  }
  return fromMutated('json-text', file, mutateJsonText(bytes, rng));
}
