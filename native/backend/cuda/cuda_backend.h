#pragma once
// CUDA-only extras beyond the Backend interface: device probing, CUDA-graph switch and counters,
// and the device allocator's counters. Available when the build defines LUMEN_WITH_CUDA.
#include <cstdint>
#include <string>

#include "backend/backend.h"

namespace lumen {

struct CudaMemStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;   // high-water mark of the device allocator
  uint64_t num_allocs = 0;  // cudaMalloc calls made by the backend
};

// What the logit rows cost in device-to-host copies (Backend::pick_rows).
struct CudaCopyStats {
  uint64_t logit_rows = 0;     // rows copied whole (logits, logprobs, top-k 0 sampling)
  uint64_t picked_rows = 0;    // rows reduced on the device to an id or k candidates
  uint64_t bytes_to_host = 0;  // bytes those rows copied back
};

// Number of visible CUDA devices; 0 when there is no driver or no device.
int cuda_device_count();

// Free and total memory of the current device (for sizing the KV pool as a fraction of what is
// free after the weights are bound); false when it cannot be queried.
bool cuda_mem_info(size_t* free_bytes, size_t* total_bytes);

// These act on a backend made by make_cuda_backend and return false for any other backend.
bool cuda_set_graphs(Backend& be, bool on);
bool cuda_mem_stats(const Backend& be, CudaMemStats* out);
bool cuda_copy_stats(const Backend& be, CudaCopyStats* out);

}  // namespace lumen
