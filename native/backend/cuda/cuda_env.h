#pragma once
// The CUDA backend's environment switches and device probing, out of the backend's way:
//   LUMEN_CUDA_GRAPHS=0|1         capture and replay decode steps (default on)
//   LUMEN_CUDA_PRECISE_GEMM=0|1   bf16 hi + lo activations in the tensor-core GEMMs (default off)
//   LUMEN_CUDA_STATS_FILE=path    append one JSON line of graph and memory counters at close
#include <cstddef>
#include <string>

#include "backend/cuda/cuda_backend.h"

namespace lumen::cuda {

// A boolean environment switch: 0/off/false/no or 1/on/true/yes; anything else (or unset) is def.
bool env_flag(const char* name, bool def);

struct DeviceInfo {
  std::string name;
  size_t total_memory = 0;
};
// Makes `device` current and checks it can run the backend (compute capability 8.0 or newer);
// throws with the reason otherwise.
DeviceInfo open_device(int device);

// Appends the backend's counters to $LUMEN_CUDA_STATS_FILE, when it is set.
void write_stats_file(const std::string& device, const GraphStats& g, const CudaMemStats& m, const CudaCopyStats& c);

}  // namespace lumen::cuda
