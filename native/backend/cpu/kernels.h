#pragma once
// CPU kernel table. The kernels (isa/, one file per op family: matmul, attention, elementwise,
// gdn) are compiled once per ISA; kernels() returns the table of the ISA chosen at run time
// (core/cpu_features.h; LUMEN_ISA=avx2|avx512 in the environment forces one).
#include <cstdint>

#include <vector>

#include "backend/cpu/gdn_cpu.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/top_k.h"

namespace lumen::cpu {

// The whole-vocabulary sampler's rule for one logits row (engine/sampler.cpp): a candidate's value
// is v = x / temperature, its weight exp(v - vmax) (the kernels' vectorised exp; 0 below e^-87.3,
// where that exp stops), its bucket trunc(min(d, buckets - 1)) with d = (vmax - v) * scale, and
// the last bucket where d is NaN (0 * an infinite scale: a row whose span is one denormal).
struct BucketRule {
  float temperature;
  float vmax;   // the largest value of the row's candidates (finite)
  float scale;  // buckets per unit of value below vmax (0: one bucket)
  int buckets;
};
// A candidate of one bucket: its value, id and weight, by the rule above.
struct BucketMember {
  float value;
  int32_t id;
  float weight;
};

struct Kernels {
  // y[m*ldy + n] = dot(x[m*K ..], W[n*K ..]) for m in [0, M), n in [n0, n1). W is f32 or bf16.
  void (*matmul)(const float* x, int64_t M, int64_t K, const void* w, DType wt, int64_t n0, int64_t n1,
                 float* y, int64_t ldy);
  // Decode-sized batches over row-major f32 / bf16 weights (isa/matmul.cpp; the ISAs without the
  // packed path): y[m*ldy + n] for the rows n of panels (kPanel rows each) [p0, p1), all m < M.
  // slice > 0: rows of panels p + s * slice, s < 4, p in [p0, p1), read side by side as four
  // streams that far apart (rows past N are skipped). bf16 weights take x in split_x's order,
  // f32 weights x as it is.
  void (*split_x)(const float* x, int64_t M, int64_t K, float* out);
  void (*matmul_streams)(const float* x, int64_t M, int64_t K, const void* w, DType wt, int64_t N, int64_t p0,
                         int64_t p1, float* y, int64_t ldy, int64_t slice);
  // Prefill-sized batches over row-major f32 / bf16 weights (isa/gemm.cpp): the same product as
  // matmul, for many rows of x (weights widened into f32 panels, register-blocked).
  void (*gemm)(const float* x, int64_t M, int64_t K, const void* w, DType wt, int64_t n0, int64_t n1, float* y,
               int64_t ldy);
  // Block-quantized weights (isa/quant_matmul.cpp; layouts in core/quant_ref.h): x [M, K] quantized
  // per row as the weight type's activation type (dtype_info(wt).act) into out (M rows of
  // quant::act_row_bytes each); then y[m*ldy + n] for n in [n0, n1) from those rows and the
  // quantized weight rows, as llama.cpp's CPU backend computes it.
  void (*quantize_act)(ActQuant a, const float* x, int64_t M, int64_t K, void* out);
  void (*matmul_quant)(const void* xq, int64_t M, int64_t K, const void* w, DType wt, int64_t n0, int64_t n1, float* y,
                       int64_t ldy);
  // The same for batches of 1..3 rows, by panels of kPanel weight rows with matmul_streams'
  // meaning of p0, p1 and slice (four streams that far apart).
  void (*matmul_quant_streams)(const void* xq, int64_t M, int64_t K, const void* w, DType wt, int64_t N, int64_t p0,
                               int64_t p1, float* y, int64_t ldy, int64_t slice);
  float (*dot)(const float* a, const float* b, int64_t n);
  void (*axpy)(float a, const float* x, float* y, int64_t n);  // y += a*x
  void (*scale)(float* y, float a, int64_t n);                 // y *= a
  float (*sumsq)(const float* x, int64_t n);
  // One row of a weight matrix of any type -> f32 (embedding lookup).
  void (*row_to_f32)(const void* w, DType wt, int64_t row, int64_t cols, float* out);

  // Packed bf16 path (AVX-512 BF16 only; null elsewhere). Panels of 16 weight rows with k-pairs
  // interleaved: panel p, pair j holds (W[16p+i][2j], W[16p+i][2j+1]) for i = 0..15, the layout
  // vdpbf16ps consumes directly. K must be even; rows past N are zero.
  void (*pack_bf16)(const uint16_t* w, int64_t N, int64_t K, int64_t p0, int64_t p1, uint16_t* out);
  // y[m*ldy + n] for panels [p0, p1), all m < M; xb is x rounded to bf16 [M, K]. slice > 0: for
  // panels p + s * slice, s < S, p in [p0, p1), read side by side as S streams that far apart;
  // S = 3 for M in 7..16 (the 8-row tile spans 3 panels), else 4. p1 - 1 + (S - 1) slice must
  // be a panel of the matrix.
  void (*matmul_packed)(const uint16_t* xb, int64_t M, int64_t K, const uint16_t* packed, int64_t N, int64_t p0,
                        int64_t p1, float* y, int64_t ldy, int64_t slice);
  void (*to_bf16)(const float* x, uint16_t* out, int64_t n);
  // Block-quantized matrices repacked into panels of kPanel rows (isa/quant_panels.cpp; the types
  // packs_quant_panels names: Q4_K and Q8_0, on both tables):
  // pack_quant_panels writes panels [p0, p1) of the N x K matrix (quant_panel_bytes each; rows
  // past N zero); quant_panel_row reads row `row` of them back as f32 (false, and nothing read,
  // for the types whose panels it cannot read back); matmul_quant_panels is matmul_quant for them,
  // for the rows of panels [p0, p1), with matmul_packed's meaning of slice (four streams, 1..3
  // rows of x). xa: panel_act's side of the quantized activations (panel_act_bytes of it; none
  // when that is 0), computed once per product for all its pieces. Q4_K: the same bits as
  // matmul_quant on the rows they were packed from; Q8_0: per block the integer sum, one f32 fma
  // per block and output (quant_ref's vec_dot, bit for bit).
  bool (*packs_quant_panels)(DType t);
  size_t (*quant_panel_bytes)(DType t, int64_t K);
  void (*pack_quant_panels)(DType t, const void* w, int64_t N, int64_t K, int64_t p0, int64_t p1, void* out);
  bool (*quant_panel_row)(DType t, const void* packed, int64_t K, int64_t row, float* out);
  size_t (*panel_act_bytes)(ActQuant a, int64_t M, int64_t K);
  void (*panel_act)(ActQuant a, const void* xq, int64_t M, int64_t K, void* out);
  // quantize_act into xq and, with xa, panel_act into xa: the same bytes, in one pass over x where
  // the table has one (q8_0). K is a multiple of the activation type's block, as for quantize_act.
  void (*quantize_act_panels)(ActQuant a, const float* x, int64_t M, int64_t K, void* xq, void* xa);
  void (*matmul_quant_panels)(DType t, const void* xq, const void* xa, int64_t M, int64_t K, const void* packed, int64_t N,
                              int64_t p0, int64_t p1, float* y, int64_t ldy, int64_t slice);
  // Gated DeltaNet core for one value head (isa/gdn.cpp): the token recurrence, and the chunked
  // (WY) form over blocks of `block` tokens (kGdnBlock; scratch grows as needed); gdn_chunked_128
  // is that form for dk = dv = 128 and kGdnBlock with its products as GEMMs, the same bits.
  void (*gdn_recurrent)(float* S, const GdnHeadIO& io, int n, int dk, int dv);
  void (*gdn_chunked)(float* S, const GdnHeadIO& io, int n, int dk, int dv, int block, std::vector<float>& scratch);
  void (*gdn_chunked_128)(float* S, const GdnHeadIO& io, int n, std::vector<float>& scratch);
  // Elementwise ops with a vectorised exp (within 2 ulp of std::exp).
  void (*swiglu)(const float* gate, const float* up, float* out, int64_t n);  // silu(gate) * up
  // Causal depthwise conv (kc <= 8 taps) then SiLU for one sequence's T rows (row strides xs, os),
  // channels [c0, c1): channel c of row t from x[t xs + c], written to out[t os + c - c0]. wT is
  // tap-major [kc][cd]; state [kc-1][cd] holds the previous inputs and is advanced by T rows.
  void (*conv_silu)(const float* x, int64_t xs, int T, float* state, const float* wT, int kc, int64_t cd, int64_t c0,
                    int64_t c1, float* out, int64_t os);
  // o = o / rms(o) * w * silu(z) over n elements.
  void (*gated_rmsnorm)(float* o, const float* z, const float* w, int64_t n, float eps);
  // Same result as core/argmax.h's argmax_scalar (first index of the maximum; -1 when a value is
  // NaN or infinite).
  int32_t (*argmax)(const float* x, int64_t n);
  // The largest of x[0, n): what std::max over the elements in order gives (NaN never taken; -inf
  // for n = 0 or all NaN), the same value in any order (±0 aside, equal for every use here).
  float (*max_value)(const float* x, int64_t n);
  // x[i] = exp(x[i] - shift) in place; returns the sum (softmax numerators).
  float (*exp_shift_sum)(float* x, int64_t n, float shift);
  // Attention for the nq query heads of one GQA group over a paged run of rows: rows j < ctx in
  // order, row j at blk[j / bs] + (j % bs) * n (n floats; a KV head's rows in a block contiguous).
  // Each row is read once for all heads, several blocks side by side; the blocks after those, and
  // then next[0 .. n_next), are prefetched a line per line consumed (next: what the caller reads
  // after this run, e.g. the first value blocks after the keys; may be null). n_next < 0: the rows
  // are in cache already (read moments ago), prefetch nothing.
  //   attn_scores: out[h * out_stride + j] = scale * q_h · row_j
  //   attn_values: o_h += Σ_j w[h * w_stride + j] * row_j
  void (*attn_scores)(const float* q, int64_t q_stride, int nq, const float* const* blk, int bs, int ctx, int64_t n,
                      float scale, float* out, int64_t out_stride, const float* const* next, int n_next);
  void (*attn_values)(const float* w, int64_t w_stride, int nq, const float* const* blk, int bs, int ctx, int64_t n,
                      float* o, int64_t o_stride, const float* const* next, int n_next);
  // A prefill tile's causal attention in one call: nr query rows q[i] (n floats each) over keys and
  // values j < ctx[i] (paged as above, the rows of kblk / vblk), o[i] = softmax(scale * q_i · k_j)
  // · v_j (o[i] written, not added to). The queries are transposed so every key is read once for
  // all of them, and every sum keeps an order that does not depend on nr or on which rows share
  // the call: a score over the n elements in order, the softmax's max and sum and each output
  // element over the keys in order (a token's result is the same in any tile or prefill chunk).
  // scratch: the caller's, grown as needed to (n + max ctx + 2) * round_up(nr, vector width) floats.
  void (*attn_tile)(const float* const* q, const int32_t* ctx, int nr, const float* const* kblk,
                    const float* const* vblk, int bs, int64_t n, float scale, float* const* o,
                    std::vector<float>& scratch);
  // The same three over an f16 KV cache (rows of n IEEE half values, widened to f32 as they are
  // read; every sum in the same order, in f32, as the f32 kernels'), and the rounding that fills
  // it: out[i] = x[i] to nearest-even f16 (F16C's vcvtps2ph).
  void (*attn_scores_f16)(const float* q, int64_t q_stride, int nq, const uint16_t* const* blk, int bs, int ctx,
                          int64_t n, float scale, float* out, int64_t out_stride, const uint16_t* const* next, int n_next);
  void (*attn_values_f16)(const float* w, int64_t w_stride, int nq, const uint16_t* const* blk, int bs, int ctx,
                          int64_t n, float* o, int64_t o_stride, const uint16_t* const* next, int n_next);
  void (*attn_tile_f16)(const float* const* q, const int32_t* ctx, int nr, const uint16_t* const* kblk,
                        const uint16_t* const* vblk, int bs, int64_t n, float scale, float* const* o,
                        std::vector<float>& scratch);
  void (*to_f16)(const float* x, uint16_t* out, int64_t n);
  void (*mul_sigmoid)(float* o, const float* gate, int64_t n);  // o *= sigmoid(gate)
  // The whole-vocabulary sampler's passes over a piece x[0, n) of a logits row whose first id is
  // id0 (isa/sample.cpp; BucketRule above): row_bounds writes the smallest and the largest value of
  // x and returns true, or returns false (nothing written) when one is NaN or infinite (n = 0: true,
  // +inf and -inf); bucket_mass adds each candidate's weight, in double, to mass[its bucket];
  // bucket_members appends the candidates of bucket b to out, in id order.
  bool (*row_bounds)(const float* x, int64_t n, float* lo, float* hi);
  void (*bucket_mass)(const float* x, int64_t n, const BucketRule& rule, double* mass);
  void (*bucket_members)(const float* x, int64_t n, int32_t id0, const BucketRule& rule, int b,
                         std::vector<BucketMember>& out);
  // Log-softmax's passes over a logits row (engine/sampler.cpp, row_logprobs; isa/sample.cpp):
  // exp_sum returns the sum of exp(x[i] - shift) in double, each term the vectorised exp of x[i] -
  // shift in f32 (0 below e^-87.3); top_values writes the k largest of x[0, n) to vals and their
  // ids to ids, largest first and of equal values the lower id first (what offering each value in
  // order, kept when it beats the k-th, gives), and returns how many (min(k, n)).
  double (*exp_sum)(const float* x, int64_t n, float shift);
  int (*top_values)(const float* x, int64_t n, int k, int32_t* ids, float* vals);
  // A top-k pick (isa/sample.cpp): the k best candidates of the row x[0, n) (value x / t) in
  // core/top_k.h's top_candidates order and values, bit for bit, written to out (min(k, n) of them,
  // returned); when a value of the row is NaN or infinite, out[0].id is -1 (and only out[0] is
  // meaningful). k >= 1. scratch: the caller's, grown as needed (about 2 k candidates).
  int (*top_candidates)(const float* x, int64_t n, int k, float t, PickCandidate* out, std::vector<PickCandidate>& scratch);
};

constexpr int kPanel = 16;
inline int64_t packed_elems(int64_t N, int64_t K) { return (N + kPanel - 1) / kPanel * kPanel * K; }
// Row `row` of a matrix in pack_bf16's panels, read back as f32 (the embedding's lookup of a
// packed table): one k-pair per 64-byte line of the row's panel, the panel read in order.
inline void packed_bf16_row(const uint16_t* packed, int64_t K, int64_t row, float* out) {
  const uint16_t* p = packed + row / kPanel * kPanel * K + row % kPanel * 2;
  for (int64_t j = 0; j < K / 2; ++j) {
    out[2 * j] = bf16_to_f32(p[j * kPanel * 2]);
    out[2 * j + 1] = bf16_to_f32(p[j * kPanel * 2 + 1]);
  }
}
// Whether a matrix of this type and row length is kept in vdpbf16ps panels (the tables with
// pack_bf16; K even): the backend's choice at load (weights.cpp), which kernelBench mirrors.
inline bool packs_bf16(const Kernels& k, DType t, int64_t cols) {
  return k.pack_bf16 != nullptr && t == DType::bf16 && cols % 2 == 0;
}
// The weight streams a decode-sized product reads side by side (matmul_packed's and the stream
// kernels' slice): 3 for packed bf16 panels at 7..16 rows (the 8-row tile spans 3 panels), else 4;
// on AMX, packed panels at 1..6 rows read as one stream (measured: docs/performance.md,
// forty-seventh session).
inline int decode_streams(bool packed, int64_t rows) {
  if (packed && rows <= 6 && amx_enabled()) return 1;
  return packed && rows > 6 ? 3 : 4;
}

const Kernels& kernels();

namespace avx2 { extern const Kernels table; }
namespace avx512 { extern const Kernels table; }

}  // namespace lumen::cpu
