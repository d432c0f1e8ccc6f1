#pragma once
// Gated DeltaNet core on the CPU: the per-token recurrence (decode) and the chunked form (prefill).
// Both update S in place (fp32, [dk][dv] row-major) and are mathematically equal.
#include <cstdint>
#include <vector>

namespace lumen::cpu {

// Tokens per block of the chunked (WY) form; segments of at least the backend's gdn_chunk_min
// tokens take that form, shorter ones the recurrence.
constexpr int kGdnBlock = 64;
// The general path's rows of one key head (conv output of its q, k and v channels) per span of
// tokens, at most this many bytes (whole blocks; at least one): kept in L2 from the conv through
// the rule (figures: docs/performance.md, twenty-eighth session).
constexpr int64_t kGdnSpanBytes = int64_t{384} << 10;

struct GdnHeadIO {
  const float* q;     // row i at q + i*q_stride (l2-normalised, scaled by 1/sqrt(dk))
  const float* k;     // row i at k + i*k_stride (l2-normalised)
  const float* v;     // row i at v + i*v_stride
  const float* beta;  // row i at beta[i*bg_stride]
  const float* g;     // log decay, row i at g[i*bg_stride]
  float* o;           // row i at o + i*o_stride
  int64_t q_stride, k_stride, v_stride, bg_stride, o_stride;
  // The state the caller updates next (another head's [dk][dv] S), or null: the recurrence's last
  // pass over S (from cache) asks for it row by row meanwhile (gdn_recurrent).
  const float* next_state = nullptr;
};

}  // namespace lumen::cpu
