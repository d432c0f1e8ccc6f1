#pragma once
// The layer binding every backend shares: HostWeights' tensors into BWeights, through the
// backend's own binders for a matrix (reference, repack or upload) and for a vector. The layer
// fields and the numbering of KV and DeltaNet layers are written here once.
#include <functional>

#include "backend/backend.h"

namespace lumen {

struct WeightBinders {
  std::function<WMat(const HostMat&)> mat;
  std::function<const float*(const HostVec&)> vec;
};

// Binds in a fixed order (embedding, head, final norm, then each layer's tensors as BLayer lists
// them), so a backend that uploads allocates in the same order every time.
void bind_host_weights(const HostWeights& w, const WeightBinders& bind, BWeights& out);

}  // namespace lumen
