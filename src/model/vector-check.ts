// Every vector a model reads (the norms, the conv taps, the DeltaNet gates' constants) must be
// finite: a NaN or an infinity there is a damaged file, refused when the checkpoint loads, with the
// loaders' other checks (the engine checks again as it binds them). A quantized model would not
// show it later: its matrices' inputs are quantized first, which turns a NaN into finite values
// (llama.cpp's numerics), so its logits would be finite and wrong.
import { closeSync, openSync, readSync } from 'node:fs';
import { TENSOR_ROLES } from './tensor-roles.js';
import { DTYPE_SIZE } from './safetensors.js';
import { CheckpointError, type DType, type WeightRef } from './types.js';

const VECTOR_ROLES: ReadonlySet<string> = new Set(TENSOR_ROLES.filter((r) => r.kind !== 'matrix').map((r) => r.role));

/** Per stored float type: the exponent bits that are all ones in a NaN or an infinity, and the mantissa's. */
const SPECIAL: Record<string, { exp: number; mant: number }> = {
  F32: { exp: 0x7f800000, mant: 0x007fffff },
  F16: { exp: 0x7c00, mant: 0x03ff },
  BF16: { exp: 0x7f80, mant: 0x007f },
};

/** Throws CheckpointError naming the first vector tensor (by its name in its file) that holds a NaN or an infinity. */
export function checkVectorsFinite(tensors: Iterable<Pick<WeightRef, 'name' | 'storedName' | 'file' | 'offset' | 'nbytes' | 'dtype' | 'role'>>): void {
  const fds = new Map<string, number>();
  try {
    for (const t of tensors) {
      const s = SPECIAL[t.dtype];
      if (!VECTOR_ROLES.has(t.role) || s === undefined) continue;
      const size = DTYPE_SIZE[t.dtype as DType];
      let fd = fds.get(t.file);
      if (fd === undefined) {
        fd = openSync(t.file, 'r');
        fds.set(t.file, fd);
      }
      const buf = Buffer.alloc(t.nbytes);
      let got = 0;
      while (got < t.nbytes) {
        const n = readSync(fd, buf, got, t.nbytes - got, t.offset + got);
        if (n === 0) break; // bounds were checked by the loader; a file shortened meanwhile reads as what is there
        got += n;
      }
      for (let i = 0; i + size <= got; i += size) {
        const bits = size === 4 ? buf.readUInt32LE(i) : buf.readUInt16LE(i);
        if ((bits & s.exp) !== s.exp) continue;
        throw new CheckpointError(`tensor ${t.storedName ?? t.name} in ${t.file}: element ${i / size} is ${(bits & s.mant) !== 0 ? 'NaN' : 'infinite'} (a damaged file: a vector's values are finite)`);
      }
    }
  } finally {
    for (const fd of fds.values()) closeSync(fd);
  }
}
