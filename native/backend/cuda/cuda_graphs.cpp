// Capture and replay of decode-step graphs (see cuda_graphs.h).
//
// Compiled only into builds with the CUDA backend (the addon's source glob also sees this file in
// CPU-only builds, where it is empty).
#if defined(LUMEN_WITH_CUDA)
#include "backend/cuda/cuda_graphs.h"

#include "backend/cuda/cuda_common.h"
#include "core/clock.h"

namespace lumen::cuda {

void StepGraphs::replay(cudaStream_t stream, int bucket, const std::function<void()>& body,
                        const std::function<void()>& abandon) {
  auto it = graphs_.find(bucket);
  if (it == graphs_.end()) {
    const int64_t t0 = now_ns();
    LUMEN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    cudaGraph_t graph = nullptr;
    try {
      body();
    } catch (...) {
      abandon();
      (void)cudaStreamEndCapture(stream, &graph);
      if (graph) (void)cudaGraphDestroy(graph);
      (void)cudaGetLastError();
      throw;
    }
    LUMEN_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    GraphExec ge;
    const cudaError_t e = cudaGraphInstantiate(ge.out(), graph, 0);
    (void)cudaGraphDestroy(graph);
    if (e != cudaSuccess) throw_cuda(e, "cudaGraphInstantiate", __FILE__, __LINE__);
    it = graphs_.emplace(bucket, std::move(ge)).first;
    stats_.misses++;
    stats_.capture_ms += ns_to_ms(now_ns() - t0);
  } else {
    stats_.hits++;
  }
  LUMEN_CUDA_CHECK(cudaGraphLaunch(it->second.get(), stream));
}

}  // namespace lumen::cuda

#endif  // LUMEN_WITH_CUDA
