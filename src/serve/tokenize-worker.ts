// Worker thread of TokenizePool (tokenize-pool.ts): builds the served model's tokenizer from a copy
// of the parts the main thread built its own from, and encodes prompt texts with the same bounded
// encode (prompt-bound.ts), so ids and refusals do not depend on where a text was tokenized.
import { parentPort, workerData } from 'node:worker_threads';
import { buildTokenizer, type TokenizerParts } from '../model/tokenizer.js';
import { boundedEncode, type BoundedIds, type PromptBound } from './prompt-bound.js';

export interface TokenizeWorkerData {
  parts: TokenizerParts;
  /** Tests only: texts of at least `minChars` characters wait until `gate[0]` is non-zero (a held tokenization). */
  hold?: { minChars: number; gate: Int32Array };
}
export interface TokenizeRequest { id: number; text: string; bound: PromptBound | null }
export type TokenizeReply = { id: number; result: BoundedIds } | { id: number; error: string };

const data = workerData as TokenizeWorkerData;
const tokenizer = buildTokenizer(data.parts);

parentPort?.on('message', (req: TokenizeRequest) => {
  try {
    if (data.hold && req.text.length >= data.hold.minChars) Atomics.wait(data.hold.gate, 0, 0);
    parentPort!.postMessage({ id: req.id, result: boundedEncode((t) => tokenizer.encode(t), req.bound, req.text) } satisfies TokenizeReply);
  } catch (err) {
    parentPort!.postMessage({ id: req.id, error: err instanceof Error ? err.message : String(err) } satisfies TokenizeReply);
  }
});
