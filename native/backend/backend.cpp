#include "backend/backend.h"

#include <vector>

#include "core/argmax.h"

namespace lumen {

void Backend::argmax_rows(const float* logits, const int* rows, int n, int vocab, int32_t* out) {
  for (int i = 0; i < n; ++i) out[i] = argmax_scalar(logits + static_cast<int64_t>(rows[i]) * vocab, vocab);
}

void Backend::pick_rows(const float* logits, int n, int vocab, const RowPick* picks, float* host_logits, int32_t* ids,
                        PickCandidate* cands) {
  const int64_t V = vocab;
  if (!host_memory()) logits_to_host(logits, host_logits, n * V);
  std::vector<int> argmax_at;
  for (int i = 0; i < n; ++i)
    if (picks[i].mode == RowPick::kArgmax) argmax_at.push_back(i);
  if (!argmax_at.empty()) {
    std::vector<int32_t> got(argmax_at.size());
    argmax_rows(host_logits, argmax_at.data(), static_cast<int>(argmax_at.size()), vocab, got.data());
    for (size_t j = 0; j < argmax_at.size(); ++j) ids[argmax_at[j]] = got[j];
  }
  std::vector<PickCandidate> work;
  for (int i = 0; i < n; ++i) {
    if (picks[i].mode != RowPick::kTopK) continue;
    const float* row = host_logits + i * V;
    const int got = top_candidates(row, vocab, picks[i].k, picks[i].temperature, nullptr, work);
    std::copy(work.begin(), work.begin() + got, cands + picks[i].cand_offset);
    if (!row_finite(row, V)) cands[picks[i].cand_offset].id = -1;
  }
}

}  // namespace lumen
