#pragma once
// CUDA graphs of decode steps, one per shape bucket (the step's rows padded to a power of two):
// the first step of a bucket is captured and instantiated, later ones replay it. A captured graph
// holds the launches' arguments, so anything they point at (step metadata, block tables, work
// buffers) stays where it was, and whatever changes them (the DeltaNet chunk threshold, a larger
// block table) drops the graphs.
#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <utility>

#include "backend/backend.h"

namespace lumen::cuda {

// One instantiated graph (move-only; destroys the executable graph).
class GraphExec {
 public:
  GraphExec() = default;
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  GraphExec(GraphExec&& o) noexcept : exec_(o.exec_) { o.exec_ = nullptr; }
  GraphExec& operator=(GraphExec&& o) noexcept {
    std::swap(exec_, o.exec_);
    return *this;
  }
  ~GraphExec() {
    if (exec_) (void)cudaGraphExecDestroy(exec_);
  }
  cudaGraphExec_t* out() { return &exec_; }
  cudaGraphExec_t get() const { return exec_; }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

class StepGraphs {
 public:
  bool enabled() const { return on_; }
  void set_enabled(bool on) {
    if (!on) clear();
    on_ = on;
  }
  void clear() { graphs_.clear(); }

  // A step that runs without a graph.
  void count_eager() { stats_.eager_steps++; }
  // Launches bucket's graph on `stream`, first capturing it from `body` (which must enqueue the
  // whole step) when there is none. If `body` throws during a capture, the capture is ended and
  // dropped, `abandon` resets the caller's deferred launches, and the exception goes on.
  void replay(cudaStream_t stream, int bucket, const std::function<void()>& body, const std::function<void()>& abandon);

  // The counters; `enabled` says whether graphs are in use now (not while profiling).
  GraphStats stats(bool profiling) const {
    GraphStats g = stats_;
    g.enabled = on_ && !profiling;
    g.graphs = static_cast<int>(graphs_.size());
    return g;
  }

 private:
  bool on_ = true;
  std::map<int, GraphExec> graphs_;
  GraphStats stats_;
};

}  // namespace lumen::cuda
