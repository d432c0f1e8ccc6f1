// Worker thread of EncodePool (quant-pool.ts): encodes f32 chunks as a ggml type with the same
// code as the main thread (ggml-codec.ts), so the bytes do not depend on where a chunk ran.
import { parentPort } from 'node:worker_threads';
import { encodeAs } from './ggml-codec.js';
import type { GgmlType } from './gguf-writer.js';

export interface EncodeRequest { id: number; type: GgmlType; vals: Float32Array }
export type EncodeReply = { id: number; out: Uint8Array } | { id: number; error: string };

parentPort?.on('message', (req: EncodeRequest) => {
  try {
    const out = encodeAs(req.type, req.vals);
    // A copy when encodeAs returned a view of the input (F32): the reply owns its buffer.
    const owned = out.buffer === req.vals.buffer ? out.slice() : out;
    parentPort!.postMessage({ id: req.id, out: owned } satisfies EncodeReply, [owned.buffer as ArrayBuffer]);
  } catch (err) {
    parentPort!.postMessage({ id: req.id, error: err instanceof Error ? err.message : String(err) } satisfies EncodeReply);
  }
});
