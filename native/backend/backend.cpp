#include "backend/backend.h"

#include "core/argmax.h"

namespace lumen {

void Backend::argmax_rows(const float* logits, const int* rows, int n, int vocab, int32_t* out) {
  for (int i = 0; i < n; ++i) out[i] = argmax_scalar(logits + static_cast<int64_t>(rows[i]) * vocab, vocab);
}

}  // namespace lumen
