#pragma once
// A step's metadata on the device: tokens, positions, each row's segment, the wanted logit rows,
// the segments (start, length, first position, state slot, block-table offset), the work lists of
// the prefill attention and of the chunked DeltaNet, and the block tables. The layout is fixed at
// init (a captured graph keeps pointing at it); begin_step writes one step into the pinned staging
// copy and uploads it on the stream.
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>

#include "backend/backend.h"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_kernels.h"

namespace lumen::cuda {

// What one step needs beyond the batch: the cache's bounds and the padding targets.
struct StepLimits {
  int n_blocks = 0;        // KV pool blocks (ids must be below)
  int block_size = 16;
  bool has_kv = false;     // the model has full-attention layers: block tables must cover segments
  int n_state_slots = 0;   // state slots (slot ids must be below)
  int scratch_block = 0;   // the block padded rows read and write
  int scratch_slot = 0;    // the state slot padded rows use
  int attn_rows_per_item = 0;  // > 0: list the prefill attention items, this many query rows each
  int gdn_chunk_min = 16;  // segments of at least this many tokens take the chunked DeltaNet
};

// The work one step's launches are sized by.
struct StepWork {
  int n_segs = 0;          // segments including one per padded row
  int n_attn_items = 0;    // prefill attention items
  int n_gdn_blocks = 0;    // chunked DeltaNet items: (segment, first token of a 64-token block)
  int n_long_segs = 0;     // segments that take the chunked DeltaNet
};

class StepMetadata {
 public:
  // Lays out steps of up to max_tokens + graph_rows rows (graph padding) and seg_cap segments,
  // with block tables for at least min_tables ids. on_tables_moved runs whenever the device table
  // is reallocated after the first time (graphs captured before point at the old one).
  void init(DeviceAllocator& alloc, cudaStream_t stream, int max_tokens, int graph_rows, int seg_cap, int min_tables,
            std::function<void()> on_tables_moved);
  bool ready() const { return static_cast<bool>(dev_); }
  int row_capacity() const { return rows_cap_; }          // rows of the largest step, padding included
  int gdn_block_capacity() const { return gdn_block_cap_; }
  int seg_capacity() const { return seg_cap_; }

  // Writes step b, padded to `rows` rows (rows > b.n_tokens only for graph replays: each padded
  // row is a one-token segment of its own on the scratch block and slot), and uploads it. Throws
  // on ids or tables out of range.
  StepWork fill(const StepBatch& b, int rows, const StepLimits& lim, cudaStream_t stream);

  // Device pointers into the metadata, the block tables included.
  StepMeta device() const {
    StepMeta m = view_;
    m.tables = tables_dev_.as<int32_t>();
    return m;
  }

 private:
  void ensure_tables(int n, cudaStream_t stream);

  DeviceAllocator* alloc_ = nullptr;
  std::function<void()> on_tables_moved_;
  // Offsets (in ints) of each array in the layout.
  struct Offsets {
    int tokens, positions, row_seg, logit_rows, seg_start, seg_len, seg_pos0, seg_slot, seg_toff, attn_items,
        gdn_blocks, long_segs, long_block0;
  } off_{};
  int n_ints_ = 0, max_tokens_ = 0, rows_cap_ = 0, seg_cap_ = 0, attn_cap_ = 0, gdn_block_cap_ = 0;
  DeviceBuffer dev_, tables_dev_;
  PinnedBuffer host_, tables_host_;
  StepMeta view_;  // without tables
};

}  // namespace lumen::cuda
