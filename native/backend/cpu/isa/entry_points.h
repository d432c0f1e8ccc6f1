#pragma once
// The kernels one ISA's table points at (table.cpp), defined across the family files of this
// folder; probes.cpp has its own table. Hidden: the tables are the only way in from outside.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cpu/gdn_cpu.h"
#include "backend/cpu/kernels.h"
#include "core/dtype.h"

#ifndef LUMEN_ISA
#error "LUMEN_ISA must be defined (avx2 or avx512): the kernel files are compiled once per ISA"
#endif

#pragma GCC visibility push(hidden)
namespace lumen::cpu::LUMEN_ISA {

// matmul.cpp
void matmul(const float* x, int64_t M, int64_t K, const void* w, DType wt, int64_t n0, int64_t n1, float* y,
            int64_t ldy);
void split_x(const float* x, int64_t M, int64_t K, float* out);
void matmul_streams(const float* x, int64_t M, int64_t K, const void* w, DType wt, int64_t N, int64_t p0, int64_t p1,
                    float* y, int64_t ldy, int64_t slice);
#if defined(__AVX512BF16__)
void pack_bf16(const uint16_t* w, int64_t N, int64_t K, int64_t p0, int64_t p1, uint16_t* out);
void to_bf16(const float* x, uint16_t* out, int64_t n);
void matmul_packed(const uint16_t* xb, int64_t M, int64_t K, const uint16_t* packed, int64_t N, int64_t p0, int64_t p1,
                   float* y, int64_t ldy, int64_t slice);
#endif

// gemm.cpp
void gemm(const float* x, int64_t M, int64_t K, const void* w, DType wt, int64_t n0, int64_t n1, float* y,
          int64_t ldy);

// quant_matmul.cpp
void quantize_act(ActQuant a, const float* x, int64_t M, int64_t K, void* out);
void matmul_quant(const void* xq, int64_t M, int64_t K, const void* w, DType wt, int64_t n0, int64_t n1, float* y,
                  int64_t ldy);
void matmul_quant_streams(const void* xq, int64_t M, int64_t K, const void* w, DType wt, int64_t N, int64_t p0,
                          int64_t p1, float* y, int64_t ldy, int64_t slice);

// quant_gemm.cpp: matmul_quant's batches of more than 16 rows of the types it takes (Q6_K on
// AVX-512; false for the others, which stay on quant_matmul.cpp's tiles)
bool gemm_quant(const void* xq, int64_t M, int64_t K, const void* w, DType wt, int64_t n0, int64_t n1, float* y,
                int64_t ldy);

// quant_panels.cpp: block-quantized matrices (Q4_K, Q8_0) repacked into 16-row panels, and their
// products (the panels' bytes are the table's own: Q8_0's differ between the two tables)
bool packs_quant_panels(DType t);
size_t quant_panel_bytes(DType t, int64_t K);
void pack_quant_panels(DType t, const void* w, int64_t N, int64_t K, int64_t p0, int64_t p1, void* out);
bool quant_panel_row(DType t, const void* packed, int64_t K, int64_t row, float* out);
size_t panel_act_bytes(ActQuant a, int64_t M, int64_t K);
void panel_act(ActQuant a, const void* xq, int64_t M, int64_t K, void* out);
void quantize_act_panels(ActQuant a, const float* x, int64_t M, int64_t K, void* xq, void* xa);
void matmul_quant_panels(DType t, const void* xq, const void* xa, int64_t M, int64_t K, const void* packed, int64_t N,
                         int64_t p0, int64_t p1, float* y, int64_t ldy, int64_t slice);

// elementwise.cpp
float dot(const float* a, const float* b, int64_t n);
void axpy(float a, const float* x, float* y, int64_t n);
void scale(float* y, float a, int64_t n);
float sumsq(const float* x, int64_t n);
void row_to_f32(const void* w, DType wt, int64_t row, int64_t cols, float* out);
void mul_sigmoid(float* o, const float* gate, int64_t n);
void swiglu(const float* gate, const float* up, float* out, int64_t n);
void gated_rmsnorm(float* o, const float* z, const float* w, int64_t n, float eps);
float max_value(const float* x, int64_t n);
float exp_shift_sum(float* x, int64_t n, float shift);
int32_t argmax(const float* x, int64_t n);

// attention.cpp
void attn_scores(const float* q, int64_t qs, int nq, const float* const* blk, int bs, int ctx, int64_t n, float scale,
                 float* out, int64_t os, const float* const* next, int n_next);
void attn_values(const float* w, int64_t ws, int nq, const float* const* blk, int bs, int ctx, int64_t n, float* o,
                 int64_t os, const float* const* next, int n_next);
void attn_tile(const float* const* q, const int32_t* ctx, int nr, const float* const* kblk, const float* const* vblk,
               int bs, int64_t n, float scale, float* const* o, std::vector<float>& scratch);
void attn_scores_f16(const float* q, int64_t qs, int nq, const uint16_t* const* blk, int bs, int ctx, int64_t n,
                     float scale, float* out, int64_t os, const uint16_t* const* next, int n_next);
void attn_values_f16(const float* w, int64_t ws, int nq, const uint16_t* const* blk, int bs, int ctx, int64_t n, float* o,
                     int64_t os, const uint16_t* const* next, int n_next);
void attn_tile_f16(const float* const* q, const int32_t* ctx, int nr, const uint16_t* const* kblk,
                   const uint16_t* const* vblk, int bs, int64_t n, float scale, float* const* o, std::vector<float>& scratch);
void to_f16(const float* x, uint16_t* out, int64_t n);

// gdn.cpp
void gdn_recurrent(float* S, const lumen::cpu::GdnHeadIO& io, int n, int dk, int dv);
void gdn_chunked(float* S, const lumen::cpu::GdnHeadIO& io, int n, int dk, int dv, int C,
                 std::vector<float>& scratch);
void gdn_chunked_128(float* S, const lumen::cpu::GdnHeadIO& io, int n, std::vector<float>& scratch);
void conv_silu(const float* x, int64_t xs, int T, float* state, const float* wT, int kc, int64_t cd, int64_t c0,
               int64_t c1, float* out, int64_t os);

// sample.cpp
bool row_bounds(const float* x, int64_t n, float* lo, float* hi);
void bucket_mass(const float* x, int64_t n, const lumen::cpu::BucketRule& rule, double* mass);
void bucket_members(const float* x, int64_t n, int32_t id0, const lumen::cpu::BucketRule& rule, int b,
                    std::vector<lumen::cpu::BucketMember>& out);
double exp_sum(const float* x, int64_t n, float shift);
int top_values(const float* x, int64_t n, int k, int32_t* ids, float* vals);
int top_candidates(const float* x, int64_t n, int k, float t, PickCandidate* out, std::vector<PickCandidate>& scratch);

}  // namespace lumen::cpu::LUMEN_ISA
#pragma GCC visibility pop
