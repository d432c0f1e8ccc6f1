// One ISA's model kernel table (kernels.h): the entry points of this folder's family files.
#include "backend/cpu/isa/entry_points.h"
#include "backend/cpu/kernels.h"

namespace lumen::cpu::LUMEN_ISA {

extern const Kernels table;
const Kernels table = {
    matmul, split_x, matmul_streams, gemm, quantize_act, matmul_quant, matmul_quant_streams, dot, axpy, scale, sumsq, row_to_f32,
#if defined(__AVX512BF16__)
    pack_bf16, matmul_packed, to_bf16,
#else
    nullptr, nullptr, nullptr,
#endif
    packs_quant_panels, quant_panel_bytes, pack_quant_panels, quant_panel_row, panel_act_bytes, panel_act, quantize_act_panels, matmul_quant_panels,
    gdn_recurrent, gdn_chunked, gdn_chunked_128, swiglu, conv_silu, gated_rmsnorm, argmax, max_value, exp_shift_sum, attn_scores, attn_values, attn_tile,
    attn_scores_f16, attn_values_f16, attn_tile_f16, to_f16, mul_sigmoid, row_bounds, bucket_mass, bucket_members, exp_sum, top_values, top_candidates};

}  // namespace lumen::cpu::LUMEN_ISA
