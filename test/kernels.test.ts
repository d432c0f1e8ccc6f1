// The vectorised elementwise CPU kernels of every ISA this CPU runs (AVX2 and AVX-512 tables,
// whichever the engine would not pick at run time included) against scalar references.
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { addonPath, loadAddon } from '../src/engine/native.js';

interface TableCheck {
  argmaxCases: number; argmaxMismatches: number; argmaxNonFiniteMissed: number; maxValueMismatches: number; swigluMaxRelErr: number; swigluNanPropagates: boolean;
  convMaxRelErr: number; gatedNormMaxRelErr: number; expMaxRelErr: number; attnRowsMaxErr: number; attnTileMaxErr: number; attnTileOrderDiffs: number; attnF16Diffs: number; toF16Diffs: number; sigmoidMaxRelErr: number;
  gdnRecurrentMaxErr: number; gdnChunkedMaxErr: number; gdnGemmFormCases: number; gdnGemmFormMismatches: number; gdnSpanCases: number; gdnSpanMismatches: number;
  sampleBoundCases: number; sampleBoundMismatches: number; sampleMemberCases: number; sampleMemberMismatches: number; sampleWeightMaxRelErr: number; sampleMassMaxRelErr: number;
  logprobSumMaxRelErr: number; topValueCases: number; topValueMismatches: number; topKCases: number; topKMismatches: number; topKMarksMissed: number;
  streamSumMaxRelErr: number; rowMatmulCases: number; rowMatmulMaxErr: number; rowStreamBatchMismatches: number;
  packedMatmulCases?: number; packedMatmulMaxErr?: number; packedRowCases?: number; packedRowMismatches?: number; // AVX-512 BF16 only
  packedBatchRows?: number; packedBatchMismatches?: number;
  quant?: Record<string, QuantCheck>; // AVX2, and AVX-512 with VNNI
}

interface QuantCheck {
  dequantElements: number; dequantMismatches: number; actBytes: number; actMismatches: number;
  dotCases: number; batchRows: number; batchRowMismatches: number; refExactRows: number; refExactMismatches: number; dotMaxErr: number; refDotMaxErr: number; actBoundViolations: number; actBoundMaxRatio: number;
  panelRows: number; panelMismatches: number; // Q4_K repacked into 16-row panels
  actPanelBytes: number; actPanelMismatches: number; // quantize_act_panels against quantize_act + panel_act
}

const QUANT_TYPES = ['Q8_0', 'Q4_0', 'Q5_0', 'Q5_1', 'Q4_K', 'Q5_K', 'Q6_K', 'IQ4_NL', 'IQ4_XS'];

describe('CPU kernels against scalar references', () => {
  const addon = loadAddon() as unknown as {
    kernelCheck(): Record<string, TableCheck>; cpuInfo(): { avx2: boolean; avx512: boolean; avx512bf16: boolean; amxUsed: boolean };
  };
  const res = addon.kernelCheck();
  const info = addon.cpuInfo();

  it('checks every ISA table this CPU can run', () => {
    expect(Object.keys(res).length).toBeGreaterThan(0);
    if (info.avx2) expect(res.avx2).toBeDefined();
    if (info.avx512) expect(res.avx512).toBeDefined();
    // The packed bf16 checks run once more with AMX off where the products run on AMX tiles.
    expect(res.avx512NoAmx !== undefined).toBe(info.amxUsed && info.avx512bf16);
  });

  it('names AMX in the ISA path exactly when the products use it, and LUMEN_AMX=0 keeps them off it', () => {
    const isaWith = (amx: string | undefined) => {
      const env = { ...process.env };
      if (amx === undefined) delete env.LUMEN_AMX;
      else env.LUMEN_AMX = amx;
      const r = spawnSync(process.execPath, ['-e', 'const i = require(process.argv[1]).cpuInfo(); console.log(JSON.stringify([i.isa, i.amx, i.amxUsed]))', addonPath()],
        { env, encoding: 'utf8' });
      expect(r.status).toBe(0);
      return JSON.parse(r.stdout) as [string, boolean, boolean];
    };
    const [isa, amx, used] = isaWith(undefined);
    expect(isa.endsWith('+amx')).toBe(used);
    if (used) expect(amx).toBe(true); // the CPU's tiles, granted to the process
    const [isaOff, , usedOff] = isaWith('0');
    expect(usedOff).toBe(false);
    expect(isaOff).toBe(isa.replace('+amx', ''));
  });

  for (const isa of ['avx2', 'avx512']) {
    const why = res[isa] !== undefined ? '' : ` [skipped: this CPU cannot run the ${isa} table]`;
    it.runIf(res[isa] !== undefined)(`${isa}: argmax, SwiGLU, conv+SiLU, gated RMSNorm, softmax exp, attention rows and the sigmoid gate match${why}`, () => {
      const r = res[isa]!;
      expect(r.argmaxCases).toBeGreaterThan(30);
      expect(r.argmaxMismatches).toBe(0); // first index of the maximum, as the scalar pick
      expect(r.argmaxNonFiniteMissed).toBe(0); // -1 for a row holding a NaN or an infinity, wherever it sits
      expect(r.maxValueMismatches).toBe(0); // the largest value, NaN ignored, as std::max in order
      expect(r.swigluMaxRelErr).toBeLessThan(2e-6); // vectorised exp within a few ulp over [-100, 100]
      expect(r.swigluNanPropagates).toBe(true);
      expect(r.convMaxRelErr).toBeLessThan(1e-5);
      expect(r.gatedNormMaxRelErr).toBeLessThan(1e-5);
      expect(r.expMaxRelErr).toBeLessThan(2e-6);
      expect(r.attnRowsMaxErr).toBeLessThan(1e-5); // fp32 sums, relative to the sum of |terms|
      // A prefill tile's whole attention (scores, causal softmax, values) against double, and each
      // query row alone in a call giving the same bits as in its tile (the order does not depend on it)
      expect(r.attnTileMaxErr).toBeLessThan(1e-5);
      expect(r.attnTileOrderDiffs).toBe(0);
      // The f16 KV cache's kernels give the f32 kernels' bits on the same f16-rounded keys and
      // values (so the bounds above hold for them), and to_f16 rounds as core/dtype.h's reference.
      expect(r.attnF16Diffs).toBe(0);
      expect(r.toF16Diffs).toBe(0);
      // Gated DeltaNet against its recurrence in double (measured ~1e-6: the f32 cumulative decay)
      expect(r.gdnRecurrentMaxErr).toBeLessThan(1e-5);
      expect(r.gdnChunkedMaxErr).toBeLessThan(1e-5);
      // The Qwen3.5 head's GEMM-shaped chunked form sums in the general form's order: the same bits.
      expect(r.gdnGemmFormCases).toBe(5);
      expect(r.gdnGemmFormMismatches).toBe(0);
      // the backend's prefill spans: a chunked form called a block at a time gives one call's bits
      expect(r.gdnSpanCases).toBe(6);
      expect(r.gdnSpanMismatches).toBe(0);
      expect(r.sigmoidMaxRelErr).toBeLessThan(2e-6);
      expect(r.streamSumMaxRelErr).toBeLessThan(1e-6); // small integers: exact in fp32
    });

    it.runIf(res[isa] !== undefined)(`${isa}: the whole-vocabulary sampler's passes (a row's bounds, each bucket's weight, one bucket's candidates) follow the scalar rule${why}`, () => {
      const r = res[isa]!;
      // the smallest and largest value, and false for a row holding a NaN or an infinity anywhere
      expect(r.sampleBoundCases).toBe(160);
      expect(r.sampleBoundMismatches).toBe(0);
      // every candidate in the bucket the scalar rule gives, in id order, its value x / t bit for bit,
      // cut into pieces or not
      expect(r.sampleMemberCases).toBeGreaterThan(500000);
      expect(r.sampleMemberMismatches).toBe(0);
      expect(r.sampleWeightMaxRelErr).toBeLessThan(5e-7); // the vectorised exp: within 4 ulp of exp
      expect(r.sampleMassMaxRelErr).toBeLessThan(1e-6);
    });

    it.runIf(res[isa] !== undefined)(`${isa}: log-softmax's passes (the sum of a row's exps, its k largest values) follow the scalar code${why}`, () => {
      const r = res[isa]!;
      expect(r.logprobSumMaxRelErr).toBeLessThan(1e-6); // f32 exps summed in double, against double
      // the ids and values of the scalar insertion in order (ties: the lower id first)
      expect(r.topValueCases).toBe(96);
      expect(r.topValueMismatches).toBe(0);
    });

    it.runIf(res[isa] !== undefined)(`${isa}: a top-k pick gives top_candidates' candidates, values and order, and marks a row that is not finite${why}`, () => {
      const r = res[isa]!;
      expect(r.topKCases).toBe(7 * 7 * (5 + 3 * 2));
      expect(r.topKMismatches).toBe(0);
      expect(r.topKMarksMissed).toBe(0);
    });
  }

  // The block-quantized kernels, per type, on random valid blocks (native/testing/quant_check.cpp).
  for (const isa of ['avx2', 'avx512']) {
    const q = res[isa]?.quant;
    const why = q !== undefined ? '' : ` [skipped: this CPU cannot run the ${isa} table${isa === 'avx512' ? ' (AVX-512 with VNNI)' : ''}]`;
    it.runIf(q !== undefined).each(QUANT_TYPES)(`${isa}: %s dequantization, activation quantization and packed dot products${why}`, (type) => {
      const r = q![type]!;
      expect(r.dequantElements).toBeGreaterThan(1000);
      expect(r.dequantMismatches).toBe(0); // the table's dequantizer against the format's formula
      expect(r.actBytes).toBeGreaterThan(10000);
      expect(r.actMismatches).toBe(0); // q8_0 / q8_1 / q8_K bytes identical to the reference (ties and signs planted)
      expect(r.dotCases).toBeGreaterThan(30);
      // Integer block sums scaled in f32, against an f64 sum of the dequantized operands (relative
      // to the sum of |terms|). Q5_1 takes its min term from q8_1's f16 block sum, as llama.cpp does:
      // that sum's rounding to f16 (2^-11 relative) is in the kernel, not in the f64 reference.
      const tol = type === 'Q5_1' ? 2e-4 : 1e-6;
      expect(r.dotMaxErr).toBeLessThan(tol);
      expect(r.refDotMaxErr).toBeLessThan(tol);
      // Against the unquantized activations: within the bound the activation quantization implies.
      expect(r.actBoundViolations).toBe(0);
      expect(r.actBoundMaxRatio).toBeGreaterThan(0.01); // the activations are quantized, not exact
      // A prefill batch's rows equal the decode path's rows bit for bit (llama.cpp's order for
      // each; Q6_K's decode tiles and prefill panels both in vec_dot_q6_K_q8_K's order).
      expect(r.batchRows).toBeGreaterThan(1000);
      expect(r.batchRowMismatches).toBe(0);
      // Q4_K and Q6_K: the scalar reference follows llama.cpp's order operation for operation
      // (repacked Q4_K's gemv / gemm; vec_dot_q6_K_q8_K's 8 lanes), and the kernels give its bits.
      if (type === 'Q4_K' || type === 'Q6_K') {
        expect(r.refExactRows).toBeGreaterThan(200);
        expect(r.refExactMismatches).toBe(0);
      }
      // Q4_K and Q8_0 (both tables) are repacked at load into 16-row panels
      // (isa/quant_panels.cpp): their products at 1..41 rows, whole, a panel per call and as four
      // decode streams, equal matmul_quant's (Q4_K: the same order) or the scalar reference's
      // vec_dot (Q8_0: one f32 fma per block) bit for bit, and Q8_0's rows read back from the
      // panels (the embedding's lookup) equal the dequantized rows. The other types have no panels.
      if (type === 'Q4_K' || type === 'Q8_0') expect(r.panelRows).toBeGreaterThan(10000);
      else expect(r.panelRows).toBe(0);
      expect(r.panelMismatches).toBe(0);
      // The decode products quantize x and build the panels' side of it in one pass
      // (quantize_act_panels): the same bytes as quantize_act then panel_act, and rows equal to
      // the reference's (Q8_0 takes the one-pass form; Q4_K's q8_K activations have no side).
      if (type === 'Q4_K' || type === 'Q8_0') expect(r.actPanelBytes).toBeGreaterThan(10000);
      expect(r.actPanelMismatches).toBe(0);
    });
  }

  // The row-major f32 / bf16 products of the ISAs without packed panels (AVX2; AVX-512 without BF16).
  for (const isa of ['avx2', 'avx512']) {
    const why = res[isa] !== undefined ? '' : ` [skipped: this CPU cannot run the ${isa} table]`;
    it.runIf(res[isa] !== undefined)(`${isa}: the decode stream tiles and the prefill GEMM over row-major f32 / bf16 weights match${why}`, () => {
      const r = res[isa]!;
      expect(r.rowMatmulCases).toBeGreaterThan(500);
      expect(r.rowMatmulMaxErr).toBeLessThan(1e-5); // fp32 sums of exact products, relative to the sum of |terms|
      // Batch invariance: each row of a 2..16-row batch (AVX2: 2-row tiles, a 1-row tile for an odd
      // last row) has the bits of the same row computed alone.
      expect(r.rowStreamBatchMismatches).toBe(0);
    });
  }

  // Packed panels exist only with vdpbf16ps; without it the bf16 path widens to f32 (no packing).
  // Where the process may use AMX tiles the products run on them (avx512), and are checked again
  // with them switched off (avx512NoAmx: the vdpbf16ps tiles of every other AVX-512 BF16 CPU).
  for (const isa of ['avx512', 'avx512NoAmx']) {
    const run = info.avx512bf16 && res[isa] !== undefined;
    const why = run ? '' : isa === 'avx512NoAmx' ? ' [skipped: no AMX tiles here, so the avx512 check above ran the vdpbf16ps tiles]' : ' [skipped: this CPU has no AVX-512 BF16]';
    it.runIf(run)(`${isa}: the packed bf16 matmul matches for whole, cut and sliced panel ranges, each row of a batch has the bits of the row alone, and rows read back from the panels are the stored ones${why}`, () => {
      const r = res[isa]!;
      expect(r.packedMatmulCases).toBeGreaterThan(300);
      expect(r.packedMatmulMaxErr).toBeLessThan(1e-5); // fp32 sums of exact bf16 products, relative to the sum of |terms|
      // Batch invariance: every row of a 2..23-row product, whole and in the decode streams, has
      // the bits of the same row alone (whole and streamed). On AMX the tile unit's sums are not
      // vdpbf16ps's, so every batch size (one row included) must run on it.
      expect(r.packedBatchRows).toBeGreaterThan(3000);
      expect(r.packedBatchMismatches).toBe(0);
      // Rows read back from the panels (a packed embedding's lookup): the stored values, bit for bit.
      expect(r.packedRowCases).toBe(3 * (5 + 16 + 72 + 200));
      expect(r.packedRowMismatches).toBe(0);
    });
  }
});
