// Worker thread of TokenizePool (tokenize-pool.ts): builds the served model's tokenizer from a copy
// of the parts the main thread built its own from, encodes prompt texts with the same bounded encode
// (prompt-bound.ts) and renders long conversations with the same chat template, so ids, texts and
// refusals do not depend on where a request was prepared.
import { parentPort, workerData } from 'node:worker_threads';
import { buildTokenizer, type ChatMessage, type ChatTemplateOptions, type TokenizerParts } from '../model/tokenizer.js';
import { boundedEncode, type BoundedIds, type PromptBound } from './prompt-bound.js';

export interface TokenizeWorkerData {
  parts: TokenizerParts;
  /** Tests only: texts of at least `minChars` characters wait until `gate[0]` is non-zero (a held tokenization). */
  hold?: { minChars: number; gate: Int32Array };
}
export type TokenizeRequest =
  | { id: number; kind: 'encode'; text: string; bound: PromptBound | null }
  | { id: number; kind: 'template'; messages: ChatMessage[]; opts: ChatTemplateOptions };
export type TokenizeReply = { id: number; result: BoundedIds } | { id: number; text: string } | { id: number; error: string };

const data = workerData as TokenizeWorkerData;
const tokenizer = buildTokenizer(data.parts);

parentPort?.on('message', (req: TokenizeRequest) => {
  try {
    if (req.kind === 'template') {
      parentPort!.postMessage({ id: req.id, text: tokenizer.applyChatTemplate(req.messages, req.opts) } satisfies TokenizeReply);
      return;
    }
    if (data.hold && req.text.length >= data.hold.minChars) Atomics.wait(data.hold.gate, 0, 0);
    parentPort!.postMessage({ id: req.id, result: boundedEncode((t) => tokenizer.encode(t), req.bound, req.text) } satisfies TokenizeReply);
  } catch (err) {
    parentPort!.postMessage({ id: req.id, error: err instanceof Error ? err.message : String(err) } satisfies TokenizeReply);
  }
});
