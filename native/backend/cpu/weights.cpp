// CPU weight binding: the layers through the shared binding (backend/weight_binding.h), with bf16
// matrices repacked into vdpbf16ps panels when the ISA has them (prefill and decode then read only
// the packed copy) and Q4_K / Q8_0 ones into 16-row panels when it has their kernels (the same), else
// the matrices copied as they are (the other block-quantized types; f32 / bf16, which the exact
// reference path reads as f32), all of them into the huge-page weight arena; and the DeltaNet conv
// taps copied tap-major for the conv kernel.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "backend/weight_binding.h"

namespace lumen::cpu {

void CpuBackend::bind_weights(const HostWeights& w, BWeights& out) {
  const bool pack = kernels_.pack_bf16 != nullptr;
  auto M = [&](const HostMat& m) {
    WMat r{m.data, m.dtype, m.rows, m.cols, nullptr};
    const int64_t panels = (m.rows + kPanel - 1) / kPanel;
    if (packs_bf16(kernels_, m.dtype, m.cols)) {
      auto it = packed_weights_.find(m.data);
      if (it == packed_weights_.end()) {
        auto* dst = static_cast<uint16_t*>(weight_memory_.alloc(packed_elems(m.rows, m.cols) * 2));
        const uint16_t* src = static_cast<const uint16_t*>(m.data);
        pool_.parallel_for(panels, [&](int64_t p0, int64_t p1) { kernels_.pack_bf16(src, m.rows, m.cols, p0, p1, dst); });
        // Every product reads the panels, and the embedding's lookup reads its rows back from
        // them (cpu_backend.cpp), so the mapping's pages go back: resident memory stays one copy.
        // (A bf16 matrix in a group with block-quantized ones is read row-major through the
        // mapping, matmul.cpp; its pages then come back from the file on that first read.)
        w.release_mapped(m.data, m.bytes());
        it = packed_weights_.emplace(m.data, dst).first;
      }
      r.aux = it->second;
    } else if (kernels_.packs_quant_panels(m.dtype)) {
      // Q4_K and Q8_0 in 16-row panels (isa/quant_panels.cpp): every
      // product then reads only the panels. The mapping's pages go back, except the embedding's
      // where its lookup cannot read its rows back from the panels (Q4_K).
      auto it = packed_weights_.find(m.data);
      if (it == packed_weights_.end()) {
        void* dst = weight_memory_.alloc(static_cast<size_t>(panels) * kernels_.quant_panel_bytes(m.dtype, m.cols));
        pool_.parallel_for(panels, [&](int64_t p0, int64_t p1) {
          kernels_.pack_quant_panels(m.dtype, m.data, m.rows, m.cols, p0, p1, dst);
        });
        if (m.data != w.embed().data || kernels_.quant_panel_row(m.dtype, nullptr, m.cols, 0, nullptr))
          w.release_mapped(m.data, m.bytes());
        it = packed_weights_.emplace(m.data, dst).first;
      }
      r.aux = it->second;
    } else if (is_quant(m.dtype) || !pack) {
      // Matrices read row-major in place by the kernels (the other block-quantized types; f32 /
      // bf16 without the packed kernels): from a copy in huge-page memory instead of the file's
      // mapping (4 KiB pages, a TLB miss every 64 lines of a weight stream). The mapping's pages
      // of the matrix are handed back (memory HostWeights owns is not), so resident memory stays
      // one copy; the embedding's lookup reads the copy too.
      auto it = resident_weights_.find(m.data);
      if (it == resident_weights_.end()) {
        const size_t bytes = m.bytes();
        auto* dst = static_cast<unsigned char*>(weight_memory_.alloc(bytes));
        const auto* src = static_cast<const unsigned char*>(m.data);
        constexpr int64_t kPiece = int64_t{1} << 20;  // both cores take the page faults of the copy
        pool_.parallel_for((static_cast<int64_t>(bytes) + kPiece - 1) / kPiece, [&](int64_t i0, int64_t i1) {
          const size_t lo = static_cast<size_t>(i0 * kPiece), hi = std::min(bytes, static_cast<size_t>(i1 * kPiece));
          std::memcpy(dst + lo, src + lo, hi - lo);
        });
        w.release_mapped(m.data, bytes);
        it = resident_weights_.emplace(m.data, dst).first;
      }
      r.ptr = it->second;
    }
    return r;
  };
  bind_host_weights(w, {M, [](const HostVec& v) { return v.data; }}, out);
  head_ptr_ = out.head.ptr;
  for (const BLayer& b : out.layers) {
    if (b.is_full) continue;
    // Tap-major copy [kc][cd] of the [cd][kc] conv weights: the conv kernel vectorises over channels.
    if (!conv_taps_.count(b.conv)) {
      const int64_t cd = w.config().conv_dim(), kc = w.config().conv_kernel;
      if (kc < 1 || kc > 8)
        throw std::runtime_error("linear_attn.conv1d.weight: kernel size " + std::to_string(kc) + " is not supported (1..8)");
      auto t = std::make_unique<AlignedBuffer>(static_cast<size_t>(cd * kc) * sizeof(float), false);
      for (int64_t ch = 0; ch < cd; ++ch)
        for (int64_t r = 0; r < kc; ++r) t->as<float>()[r * cd + ch] = b.conv[ch * kc + r];
      conv_taps_.emplace(b.conv, std::move(t));
    }
  }
}

}  // namespace lumen::cpu
