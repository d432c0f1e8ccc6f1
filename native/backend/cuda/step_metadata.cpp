// The step metadata's layout and the per-step fill (see step_metadata.h).
//
// Compiled only into builds with the CUDA backend (the addon's source glob also sees this file in
// CPU-only builds, where it is empty).
#if defined(LUMEN_WITH_CUDA)
#include "backend/cuda/step_metadata.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace lumen::cuda {

void StepMetadata::init(DeviceAllocator& alloc, cudaStream_t stream, int max_tokens, int graph_rows, int seg_cap,
                        int min_tables, std::function<void()> on_tables_moved) {
  alloc_ = &alloc;
  on_tables_moved_ = std::move(on_tables_moved);
  max_tokens_ = max_tokens;
  seg_cap_ = seg_cap;
  const int rc = max_tokens + graph_rows;
  rows_cap_ = rc;
  attn_cap_ = rc + seg_cap_;
  gdn_block_cap_ = rc / kGdnBlock + seg_cap_ + 1;
  int off = 0;
  auto take = [&](int n) {
    const int o = off;
    off += n;
    return o;
  };
  off_.tokens = take(rc);
  off_.positions = take(rc);
  off_.row_seg = take(rc);
  off_.logit_rows = take(rc);
  off_.seg_start = take(seg_cap_);
  off_.seg_len = take(seg_cap_);
  off_.seg_pos0 = take(seg_cap_);
  off_.seg_slot = take(seg_cap_);
  off_.seg_toff = take(seg_cap_);
  off_.attn_items = take(2 * attn_cap_);
  off_.gdn_blocks = take(2 * gdn_block_cap_);
  off_.long_segs = take(seg_cap_);
  off_.long_block0 = take(seg_cap_);
  n_ints_ = off;
  dev_ = alloc.alloc(static_cast<size_t>(n_ints_) * sizeof(int32_t), "step metadata");
  host_.resize(static_cast<size_t>(n_ints_) * sizeof(int32_t));
  std::memset(host_.as<int32_t>(), 0, host_.bytes());
  ensure_tables(min_tables, stream);
  const int32_t* md = dev_.as<int32_t>();
  view_.tokens = md + off_.tokens;
  view_.positions = md + off_.positions;
  view_.row_seg = md + off_.row_seg;
  view_.logit_rows = md + off_.logit_rows;
  view_.seg_start = md + off_.seg_start;
  view_.seg_len = md + off_.seg_len;
  view_.seg_pos0 = md + off_.seg_pos0;
  view_.seg_slot = md + off_.seg_slot;
  view_.seg_toff = md + off_.seg_toff;
  view_.attn_items = md + off_.attn_items;
  view_.gdn_blocks = md + off_.gdn_blocks;
  view_.long_segs = md + off_.long_segs;
  view_.long_block0 = md + off_.long_block0;
}

StepWork StepMetadata::fill(const StepBatch& b, int rows, const StepLimits& lim, cudaStream_t stream) {
  StepWork w;
  const int T = b.n_tokens;
  const int nseg = static_cast<int>(b.segs.size());
  const int pad = rows - T;
  if (nseg + pad > seg_cap_) throw std::runtime_error("CUDA backend: too many segments in one step");
  if (static_cast<int>(b.logit_rows.size()) > max_tokens_) throw std::runtime_error("CUDA backend: too many logit rows");

  int32_t* h = host_.as<int32_t>();
  // Rows.
  for (int t = 0; t < T; ++t) {
    h[off_.tokens + t] = b.tokens[t];
    h[off_.positions + t] = b.positions[t];
  }
  for (int si = 0; si < nseg; ++si) {
    const auto& s = b.segs[si];
    if (s.start < 0 || s.len <= 0 || s.start + s.len > T) throw std::runtime_error("CUDA backend: bad segment");
    for (int i = 0; i < s.len; ++i) h[off_.row_seg + s.start + i] = si;
  }
  for (int r = T; r < rows; ++r) {
    h[off_.tokens + r] = 0;
    h[off_.positions + r] = 0;
    h[off_.row_seg + r] = nseg + (r - T);
  }
  const int R = static_cast<int>(b.logit_rows.size());
  for (int i = 0; i < R; ++i) h[off_.logit_rows + i] = b.logit_rows[i];
  for (int i = R; i < rows; ++i) h[off_.logit_rows + i] = i;
  // Block tables: the step's, then the scratch block for padded rows.
  const int nt = static_cast<int>(b.block_tables.size());
  ensure_tables(nt + 1, stream);
  int32_t* th = tables_host_.as<int32_t>();
  for (int i = 0; i < nt; ++i) {
    const int blk = b.block_tables[i];
    if (blk < 0 || blk >= lim.n_blocks) throw std::runtime_error("CUDA backend: block id out of range");
    th[i] = blk;
  }
  th[nt] = lim.scratch_block;
  // Segments (real, then one per padded row).
  const int nseg_eff = nseg + pad;
  for (int si = 0; si < nseg_eff; ++si) {
    int start, len, pos0, slot, toff;
    if (si < nseg) {
      const auto& s = b.segs[si];
      start = s.start;
      len = s.len;
      pos0 = s.pos0;
      slot = s.state_slot;
      toff = s.table_offset;
      if (slot < 0 || slot >= lim.n_state_slots) throw std::runtime_error("CUDA backend: state slot out of range");
      if (lim.has_kv &&
          (toff < 0 || s.n_blocks < 0 || toff + s.n_blocks > nt || s.n_blocks * lim.block_size < pos0 + len))
        throw std::runtime_error("CUDA backend: block table does not cover the segment");
    } else {
      start = T + (si - nseg);
      len = 1;
      pos0 = 0;
      slot = lim.scratch_slot;
      toff = nt;
    }
    h[off_.seg_start + si] = start;
    h[off_.seg_len + si] = len;
    h[off_.seg_pos0 + si] = pos0;
    h[off_.seg_slot + si] = slot;
    h[off_.seg_toff + si] = toff;
  }
  w.n_segs = nseg_eff;
  // Prefill attention work items.
  if (lim.attn_rows_per_item > 0) {
    const int bq = lim.attn_rows_per_item;
    for (int si = 0; si < nseg_eff; ++si)
      for (int q0 = 0; q0 < h[off_.seg_len + si]; q0 += bq) {
        if (w.n_attn_items >= attn_cap_) throw std::runtime_error("CUDA backend: attention work list overflow");
        h[off_.attn_items + 2 * w.n_attn_items] = si;
        h[off_.attn_items + 2 * w.n_attn_items + 1] = q0;
        ++w.n_attn_items;
      }
  }
  // Chunked DeltaNet work: the 64-token blocks of segments of at least gdn_chunk_min tokens.
  for (int si = 0; si < nseg_eff; ++si) {
    const int len = h[off_.seg_len + si];
    if (len < lim.gdn_chunk_min) continue;
    h[off_.long_segs + w.n_long_segs] = si;
    h[off_.long_block0 + w.n_long_segs] = w.n_gdn_blocks;
    ++w.n_long_segs;
    for (int c0 = 0; c0 < len; c0 += kGdnBlock) {
      if (w.n_gdn_blocks >= gdn_block_cap_) throw std::runtime_error("CUDA backend: DeltaNet block work list overflow");
      h[off_.gdn_blocks + 2 * w.n_gdn_blocks] = si;
      h[off_.gdn_blocks + 2 * w.n_gdn_blocks + 1] = c0;
      ++w.n_gdn_blocks;
    }
  }
  LUMEN_CUDA_CHECK(cudaMemcpyAsync(dev_.get(), host_.as<int32_t>(),
                                   static_cast<size_t>(n_ints_) * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  LUMEN_CUDA_CHECK(cudaMemcpyAsync(tables_dev_.get(), tables_host_.as<int32_t>(), static_cast<size_t>(nt + 1) * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, stream));
  return w;
}

void StepMetadata::ensure_tables(int n, cudaStream_t stream) {
  const int have = static_cast<int>(tables_dev_.bytes() / sizeof(int32_t));
  if (tables_dev_ && have >= n) return;
  const int cap = std::max(n, have * 2);
  if (tables_dev_) {
    // An earlier copy may still read the staging buffer, and captured graphs point at the old table.
    LUMEN_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (on_tables_moved_) on_tables_moved_();
  }
  tables_dev_ = alloc_->alloc(static_cast<size_t>(cap) * sizeof(int32_t), "block tables");
  tables_host_.reset();
  tables_host_.resize(static_cast<size_t>(cap) * sizeof(int32_t));
}

}  // namespace lumen::cuda

#endif  // LUMEN_WITH_CUDA
