// The CPU backend's front: the pool and per-thread scratch, cache and snapshot memory, the small
// ops (embedding rows, RMSNorm, residual add, SwiGLU, row gather) and the greedy picks.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/cpu_features.h"

namespace lumen {
namespace cpu {

CpuBackend::CpuBackend(int n_threads) : pool_(n_threads), kernels_(kernels()) {
  per_thread_.resize(pool_.size());
  shadows_.resize(static_cast<size_t>(pool_.size()));
}

std::string CpuBackend::device_desc() const { return active_isa_name(); }

size_t CpuBackend::init_caches(const CacheSpec& spec, int max_step_tokens, int max_logit_rows) {
  spec_ = spec;
  kv_layer_elems_ = static_cast<size_t>(spec.n_blocks) * spec.block_size * spec.n_kv_heads * spec.head_dim;
  if (spec.kv_dtype != DType::f32 && spec.kv_dtype != DType::f16)
    throw std::runtime_error(std::string("KV cache dtype ") + dtype_name(spec.kv_dtype) + " is not supported (f32 or f16)");
  const size_t elem = dtype_size(spec.kv_dtype);
  k_cache_.resize(kv_layer_elems_ * spec.n_kv_layers * elem);
  v_cache_.resize(kv_layer_elems_ * spec.n_kv_layers * elem);
  layer_state_elems_ = static_cast<size_t>(spec.conv_rows) * spec.conv_dim + spec.ssm_elems;
  slot_elems_ = layer_state_elems_ * spec.n_gdn_layers;
  state_.resize(slot_elems_ * spec.n_state_slots * sizeof(float));
  return k_cache_.size() + v_cache_.size() + state_.size();
}

void CpuBackend::reset_state(int slot) {
  std::fill(slot_ptr(slot), slot_ptr(slot) + slot_elems_, 0.f);
}

size_t CpuBackend::init_snapshots(int n) {
  snapshots_.resize(slot_elems_ * static_cast<size_t>(n) * sizeof(float));
  n_snapshots_ = n;
  return snapshots_.size();
}
void CpuBackend::save_state(int slot, int snap) {
  std::copy(slot_ptr(slot), slot_ptr(slot) + slot_elems_, snapshots_.as<float>() + snap * slot_elems_);
}
void CpuBackend::load_state(int snap, int slot) {
  const float* s = snapshots_.as<float>() + snap * slot_elems_;
  std::copy(s, s + slot_elems_, slot_ptr(slot));
}

void CpuBackend::embed(const WMat& table, float* x) {
  ScopedOp op(profiling_, stats_, "embed", "embed");
  const StepBatch& b = *step_;
  // A table repacked into panels whose rows the panels give back (bf16 vdpbf16ps panels; the
  // quantized panels that can): read from them (the file's rows were handed back at load,
  // weights.cpp; and a row from a 4 KiB page of the mapping not read for a while costs far more
  // than its bytes: docs/performance.md, twenty-fourth session).
  const bool from_bf16 = table.aux && packs_bf16(kernels_, table.dtype, table.cols);
  const bool from_quant = table.aux && is_quant(table.dtype) && kernels_.quant_panel_row(table.dtype, nullptr, table.cols, 0, nullptr);
  for (int t = 0; t < b.n_tokens; ++t) {
    float* row = x + t * table.cols;
    if (from_bf16)
      packed_bf16_row(static_cast<const uint16_t*>(table.aux), table.cols, b.tokens[t], row);
    else if (from_quant)
      kernels_.quant_panel_row(table.dtype, table.aux, table.cols, b.tokens[t], row);
    else
      kernels_.row_to_f32(table.ptr, table.dtype, b.tokens[t], table.cols, row);
  }
}

void CpuBackend::rmsnorm(const float* x, const float* w, float* y, int rows, int dim, float eps) {
  ScopedOp op(profiling_, stats_, "rmsnorm", "norm");
  pool_.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) rms_row(x + r * dim, w, y + r * dim, dim, eps);
  }, 8);
}

void CpuBackend::add(float* y, const float* x, int64_t n) {
  ScopedOp op(profiling_, stats_, "add", "elementwise");
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void CpuBackend::swiglu(const float* gate, const float* up, float* out, int64_t n) {
  ScopedOp op(profiling_, stats_, "swiglu", "elementwise");
  pool_.parallel_for(n, [&](int64_t i0, int64_t i1) {
    kernels_.swiglu(gate + i0, up + i0, out + i0, i1 - i0);
  }, 4096);
}

void CpuBackend::gather_rows(const float* x, int first, int count, float* y, int dim) {
  const StepBatch& b = *step_;
  for (int i = 0; i < count; ++i) {
    const int64_t r = b.logit_rows[first + i];
    std::copy(x + r * dim, x + (r + 1) * dim, y + static_cast<int64_t>(i) * dim);
  }
}

void CpuBackend::argmax_rows(const float* logits, const int* rows, int n, int vocab, int32_t* out) {
  pool_.parallel_for(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = kernels_.argmax(logits + static_cast<int64_t>(rows[i]) * vocab, vocab);
  });
}

void CpuBackend::pick_rows(const float* logits, int n, int vocab, const RowPick* picks, float* host_logits, int32_t* ids,
                           PickCandidate* cands) {
  ScopedOp op(profiling_, stats_, "pick", "sample");
  // Host memory: the head wrote the rows into host_logits (logits is the same buffer).
  (void)logits;
  const int64_t V = vocab;
  pool_.parallel_dealt(n, 1, [&](int tid, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const RowPick& p = picks[i];
      const float* row = host_logits + i * V;
      if (p.mode == RowPick::kArgmax) ids[i] = kernels_.argmax(row, V);
      if (p.mode == RowPick::kTopK)
        kernels_.top_candidates(row, V, p.k, p.temperature, cands + p.cand_offset, per_thread_[static_cast<size_t>(tid)].pick);
    }
  });
}

void CpuBackend::host_parallel(int n, const std::function<void(int)>& fn) {
  // One row a claim from a shared counter: a draw costs a fraction of a millisecond, and a core
  // shared with another process claims fewer.
  pool_.parallel_each(n, [&](int64_t i) { fn(static_cast<int>(i)); });
}

float* CpuBackend::scratch(size_t n) {
  scratch_.push_back(std::make_unique<AlignedBuffer>(n * sizeof(float)));
  return scratch_.back()->as<float>();
}

}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend(int n_threads) { return std::make_unique<cpu::CpuBackend>(n_threads); }

}  // namespace lumen
