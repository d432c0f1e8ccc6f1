#pragma once
// Launchers of the CUDA kernels (defined in the k_*.cu files), callable from host C++.
// Every launcher checks its launch; all work goes on the given stream (graph capture safe: no
// allocation, no synchronisation, no host reads inside a launcher).
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/top_k.h"

namespace lumen::cuda {

// Device pointers into one step's metadata (int32 arrays, uploaded by begin_step).
// Rows are the step's tokens (padded to the graph bucket on decode replays); segments are the
// sequences' shares of the step, padded rows being one-token segments of their own.
struct StepMeta {
  const int* tokens = nullptr;      // [rows]
  const int* positions = nullptr;   // [rows]
  const int* row_seg = nullptr;     // [rows] segment of each row
  const int* logit_rows = nullptr;  // rows whose logits are wanted
  const int* seg_start = nullptr;   // [segs]
  const int* seg_len = nullptr;
  const int* seg_pos0 = nullptr;
  const int* seg_slot = nullptr;
  const int* seg_toff = nullptr;    // offset of the segment's block table in `tables`
  const int* tables = nullptr;
  const int* attn_items = nullptr;  // (segment, first query) pairs for the prefill attention
  const int* gdn_blocks = nullptr;  // (segment, first token) of each 64-token block of the chunked DeltaNet
  const int* long_segs = nullptr;   // segments that use the chunked DeltaNet
  const int* long_block0 = nullptr; // index in gdn_blocks of each long segment's first block
};

// ---- elementwise / norms (k_misc.cu)
void launch_embed(const void* table, bool bf16, int dim, const int* tokens, int rows, float* x, cudaStream_t s);
// y = rmsnorm(x (+= add, when add is not null)) * w, per row of `dim`.
void launch_rmsnorm(float* x, const float* add, const float* w, float* y, int rows, int dim, float eps,
                    cudaStream_t s);
void launch_add(float* y, const float* x, int64_t n, cudaStream_t s);
void launch_swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t s);
void launch_gather_rows(const float* x, const int* rows, int first, int count, float* y, int dim, cudaStream_t s);
void launch_to_bf16(const float* x, uint16_t* y, int64_t n, cudaStream_t s);
// x = hi + lo with hi = bf16(x), lo = bf16(x - hi): products against bf16 weights then keep about
// 16 mantissa bits of x (the precise GEMM mode).
void launch_to_bf16_split(const float* x, uint16_t* hi, uint16_t* lo, int64_t n, cudaStream_t s);

// ---- matrix products (k_matmul.cu): y[m][n] = sum_k x[m][k] * W[n][k]
struct GemvSeg {
  const void* w = nullptr;
  float* y = nullptr;
  int n = 0;  // rows of W (output features)
};
struct GemvArgs {
  const float* x = nullptr;
  int K = 0;
  int m_real = 0;  // rows of x that exist (reads clamp to them; stores stop there)
  bool bf16 = true;
  int nseg = 0;
  GemvSeg seg[4];
  // Fused SwiGLU: seg[0] = gate, seg[1] = up (same n, even); out = silu(gate) * up, and the gate
  // and up outputs are still written (gate only when out is another buffer).
  float* swiglu_out = nullptr;
};
// Memory-bound product for few rows (m_pad = 1, 2, 4, 8 or 16 >= m_real): streams each weight row
// once for all rows of x, 16-byte loads.
void launch_gemv(const GemvArgs& a, int m_pad, cudaStream_t s);
// Tensor-core product (mma.sync m16n8k16 bf16, fp32 accumulate) for many rows; x given in bf16.
// Needs K % 8 == 0. With accumulate, y += x Wᵀ.
void launch_gemm_bf16(const uint16_t* xb, int M, int K, const uint16_t* w, int N, float* y, cudaStream_t s,
                      bool accumulate = false);
// Plain fp32 tiled product (f32 weights, or shapes the tensor-core path does not take).
void launch_gemm_simt(const float* x, int M, int K, const void* w, bool bf16, int N, float* y, cudaStream_t s);

// ---- products and rows of block-quantized weights in their GGUF layout (k_quant.cu)
// The quantized types the GPU kernels implement; every other one runs on the CPU backend only.
inline bool gpu_quant_type(DType t) {
  return t == DType::q8_0 || t == DType::q5_0 || t == DType::q4_K || t == DType::q6_K;
}
// Few rows (m_pad = 1, 2, 4, 8 or 16 >= m_real), every segment of type t (K a multiple of its
// block); fp32 activations and accumulation. No fused SwiGLU (a.swiglu_out must be null).
void launch_gemv_quant(const GemvArgs& a, DType t, int m_pad, cudaStream_t s);
// Many rows: fp32 tiles over weights decoded to fp32 in shared memory.
void launch_gemm_quant(const float* x, int M, int K, const void* w, DType t, int N, float* y, cudaStream_t s);
// x[r] = decoded row tokens[r] of a quantized table [*, dim].
void launch_embed_quant(const void* table, DType t, int dim, const int* tokens, int rows, float* x, cudaStream_t s);

// ---- full attention (k_attn.cu)
struct AttnArgs {
  float* qg = nullptr;        // [rows][nh*2*hd], query|gate per head; normalised + rotated in place
  float* k = nullptr;         // [rows][nkv*hd]
  const float* v = nullptr;   // [rows][nkv*hd]
  float* out = nullptr;       // [rows][nh*hd]
  void* kc = nullptr;         // this layer's K cache [blocks][bs][nkv][hd]: float, or f16 bits with kv_f16
  void* vc = nullptr;
  bool kv_f16 = false;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  const double* inv_freq = nullptr;  // [rot/2]
  int nh = 0, nkv = 0, hd = 0, rot = 0, bs = 0;
  float eps = 1e-6f, scale = 1.f;
  StepMeta m;
  int rows = 0;
};
void launch_qk_rope_kv(const AttnArgs& a, cudaStream_t s);
// Decode rows (one-token segments, row r = segment r): split over the context, then combined.
// `part` holds rows*nh*splits*(hd+2) floats.
void launch_attn_decode(const AttnArgs& a, int splits, float* part, cudaStream_t s);
// Causal attention of every segment (flash-style tiles through the block tables).
void launch_attn_prefill(const AttnArgs& a, int n_items, cudaStream_t s);
int attn_prefill_rows_per_item(int group);  // query rows per prefill work item

// ---- Gated DeltaNet (k_gdn.cu)
struct GdnArgs {
  const float* qkv = nullptr;  // [rows][cd]
  const float* z = nullptr;    // [rows][nv*dv]
  const float* b = nullptr;    // [rows][nv]
  const float* a = nullptr;    // [rows][nv]
  float* out = nullptr;        // [rows][nv*dv]
  float* conv_out = nullptr;   // [rows][cd] scratch
  float* beta = nullptr;       // [rows][nv] scratch
  float* gdec = nullptr;       // [rows][nv] scratch
  float* state = nullptr;      // slot 0's state of this layer; slot s at state + s*slot_stride
  int64_t slot_stride = 0;     // floats
  const float* conv_w = nullptr;  // [cd][kc]
  const float* dt_bias = nullptr;
  const float* neg_exp_a = nullptr;
  const float* norm_w = nullptr;  // [dv]
  int cd = 0, kc = 0, nk = 0, nv = 0, dk = 0, dv = 0;
  bool tiled = false;  // value heads in llama.cpp's tiled order (ModelConfig::v_heads_tiled)
  float eps = 1e-6f;
  int gdn_chunk_min = 16;  // segments of at least this many tokens take the chunked form
  StepMeta m;
  int rows = 0, nsegs = 0;
  float* gdn_block_scratch = nullptr;  // per (DeltaNet block, value head): see k_gdn.cu
};
constexpr int kGdnBlock = 64;  // tokens per block of the chunked (WY) DeltaNet
size_t gdn_block_scratch_floats_per_head();  // per block and value head
void launch_gdn_conv(const GdnArgs& a, cudaStream_t s);
// Conv-window update of every segment, and the token recurrence + gated norm of the short ones.
void launch_gdn_recurrent(const GdnArgs& a, cudaStream_t s);
// Chunked form for the long segments: per-block preparation, the carried-state scan, gated norm.
void launch_gdn_chunked(const GdnArgs& a, int n_blocks, int n_long, cudaStream_t s);

// Raises the dynamic shared-memory limits of the kernels that need more than 48 KiB; throws when
// the device cannot give them.
// ---- sampling picks (k_sample.cu): per row of `logits` ([n, vocab]), mode 1 writes the argmax
// to ids[row], mode 2 the k best of logit / temperature to cands + out (core/top_k.h's order),
// mode 0 nothing. k <= 1024.
struct PickArgs {
  int mode = 0;
  int k = 0;
  float temperature = 1.f;
  int out = 0;
};
void launch_pick(const float* logits, int n, int vocab, const PickArgs* rows, int32_t* ids, PickCandidate* cands,
                 cudaStream_t s);

void kernels_init(int device);

}  // namespace lumen::cuda
