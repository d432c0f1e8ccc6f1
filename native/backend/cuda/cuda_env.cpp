// Environment switches and device probing of the CUDA backend (see cuda_env.h), and the device
// queries the engine and the addon make before any backend exists.
//
// Compiled only into builds with the CUDA backend (the addon's source glob also sees this file in
// CPU-only builds, where it is empty).
#if defined(LUMEN_WITH_CUDA)
#include "backend/cuda/cuda_env.h"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "backend/cuda/cuda_common.h"

namespace lumen {
namespace cuda {

bool env_flag(const char* name, bool def) {
  const char* v = std::getenv(name);
  if (!v || !*v) return def;
  const std::string s(v);
  if (s == "0" || s == "off" || s == "false" || s == "no") return false;
  if (s == "1" || s == "on" || s == "true" || s == "yes") return true;
  return def;
}

DeviceInfo open_device(int device) {
  LUMEN_CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop{};
  LUMEN_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  if (prop.major < 8)
    throw std::runtime_error(std::string("the CUDA backend needs compute capability 8.0 or newer; ") + prop.name + " is " +
                             std::to_string(prop.major) + "." + std::to_string(prop.minor));
  return DeviceInfo{prop.name, prop.totalGlobalMem};
}

void write_stats_file(const std::string& device, const GraphStats& g, const CudaMemStats& m, const CudaCopyStats& c) {
  const char* path = std::getenv("LUMEN_CUDA_STATS_FILE");
  if (!path || !*path) return;
  FILE* f = std::fopen(path, "a");
  if (!f) return;
  std::fprintf(f,
               "{\"device\":\"%s\",\"graphs_enabled\":%s,\"graph_hits\":%llu,\"graph_misses\":%llu,\"eager_steps\":%llu,"
               "\"capture_ms\":%.3f,\"graphs\":%d,\"peak_bytes\":%lld,\"num_allocs\":%llu,\"logit_rows_to_host\":%llu,"
               "\"picked_rows\":%llu,\"logit_bytes_to_host\":%llu}\n",
               device.c_str(), g.enabled ? "true" : "false", static_cast<unsigned long long>(g.hits),
               static_cast<unsigned long long>(g.misses), static_cast<unsigned long long>(g.eager_steps), g.capture_ms,
               g.graphs, static_cast<long long>(m.peak_bytes), static_cast<unsigned long long>(m.num_allocs),
               static_cast<unsigned long long>(c.logit_rows), static_cast<unsigned long long>(c.picked_rows),
               static_cast<unsigned long long>(c.bytes_to_host));
  std::fclose(f);
}

}  // namespace cuda

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

bool cuda_mem_info(size_t* free_bytes, size_t* total_bytes) {
  size_t f = 0, t = 0;
  if (cudaMemGetInfo(&f, &t) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (free_bytes) *free_bytes = f;
  if (total_bytes) *total_bytes = t;
  return true;
}

bool cuda_available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (why) *why = std::string("no usable CUDA device (") + cudaGetErrorString(e) + ")";
    return false;
  }
  if (n <= 0) {
    if (why) *why = "no CUDA device is visible";
    return false;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    if (why) *why = "cannot query CUDA device 0";
    return false;
  }
  if (prop.major < 8) {
    if (why)
      *why = std::string(prop.name) + " has compute capability " + std::to_string(prop.major) + "." +
             std::to_string(prop.minor) + "; the CUDA backend needs 8.0 or newer";
    return false;
  }
  return true;
}

}  // namespace lumen

#endif  // LUMEN_WITH_CUDA
