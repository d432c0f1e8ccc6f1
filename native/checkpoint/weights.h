#pragma once
// Host-side weights of a Qwen3.5 checkpoint, bound from the manifest the TypeScript loader built.
// Matrices whose dtype fits (bf16, f32, and the block-quantized GGUF types, which stay quantized)
// point into memory-mapped safetensors / GGUF files; f16 matrices are widened to f32 (and with
// WeightPolicy f32 / bf16 every matrix is converted, quantized ones dequantized); every vector (norms, gates, conv taps) is converted to f32 with the
// checkpoint conventions folded in: (1 + w) for zero-centred norms, -exp(A_log) for the decay.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/aligned.h"
#include "core/dtype.h"
#include "core/mapped_file.h"
#include "checkpoint/config.h"

namespace lumen {

// A row-major matrix [rows = out features, cols = in features] in host memory.
struct HostMat {
  const void* data = nullptr;
  DType dtype = DType::f32;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t bytes() const { return static_cast<size_t>(rows) * row_bytes(dtype, cols); }
};

struct HostVec {
  const float* data = nullptr;
  int64_t n = 0;
};

struct HostLayer {
  bool is_full = false;
  HostVec in_norm, post_norm;  // (1 + w) folded
  HostMat gate, up, down;
  // full attention
  HostMat q, k, v, o;
  HostVec q_norm, k_norm;  // (1 + w) folded
  // Gated DeltaNet
  HostMat qkv, z, b, a, out;
  HostVec conv;        // [conv_dim * K], channel-major
  HostVec dt_bias;     // [nv]
  HostVec neg_exp_a;   // [nv] = -exp(A_log)
  HostVec gdn_norm;    // [dv], plain multiplicative weight
};

// How stored values become the forward pass's values (src/model/tensor-roles.ts, `fold`).
enum class Fold { none, plus_one, neg_exp };

// One tensor of the manifest: where its bytes are, and the role it fills (the role ids and folds
// come from the tensor-role table, src/model/tensor-roles.ts; `name` is only for messages).
struct TensorEntry {
  std::string name;
  std::string role;
  int layer = -1;  // decoder layer, -1 outside them
  Fold fold = Fold::none;
  std::string file;
  uint64_t offset = 0;
  uint64_t nbytes = 0;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
};

enum class WeightPolicy { keep, f32, bf16 };  // keep = bf16/f32/quantized as stored (f16 -> f32)

class HostWeights {
 public:
  // Binds every tensor; throws std::runtime_error naming the tensor or file at fault.
  HostWeights(const ModelConfig& cfg, const std::vector<TensorEntry>& tensors, WeightPolicy policy,
              const std::function<void(int, int)>& on_layer = nullptr);
  // Random weights of the real shapes, generated in memory (no files), for synthetic models.
  // With store_f32, values are rounded as for `dtype` but stored as f32 (to compare kernel paths on
  // identical weights).
  static std::unique_ptr<HostWeights> synthetic(const ModelConfig& cfg, DType dtype, uint64_t seed,
                                                bool store_f32 = false);

  const ModelConfig& config() const { return cfg_; }
  const HostMat& embed() const { return embed_; }
  const HostMat& head() const { return head_; }
  const HostVec& final_norm() const { return final_norm_; }
  const std::vector<HostLayer>& layers() const { return layers_; }
  size_t matrix_bytes() const { return matrix_bytes_; }
  size_t total_bytes() const;
  // The matrices' element types, the one holding the most bytes first, joined by '+' ("bf16",
  // "q8_0", "q6_k+q4_k" for the 0.8B's Q4_K_M file, whose Q6_K embedding is its largest matrix; larger
  // models' Q4_K_M files read "q4_k+q6_k"): what the engine reports its weights run in.
  std::string dtype_label() const;
  // A backend that keeps its own copy of a tensor's bytes hands the file pages back: pages of
  // [p, p + n) inside a checkpoint file's mapping leave the resident set. Memory this object owns
  // (converted or synthetic weights) is left alone, as other backends may still bind it.
  void release_mapped(const void* p, size_t n) const;

 private:
  HostWeights(const ModelConfig& cfg) : cfg_(cfg) {}
  HostMat bind_mat(const TensorEntry& t, WeightPolicy policy, int64_t rows, int64_t cols);
  HostVec bind_vec(const TensorEntry& t, int64_t n);
  const unsigned char* tensor_bytes(const TensorEntry& t);
  float* new_f32(size_t n);

  ModelConfig cfg_;
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::vector<std::unique_ptr<AlignedBuffer>> owned_;
  HostMat embed_, head_;
  HostVec final_norm_;
  std::vector<HostLayer> layers_;
  size_t matrix_bytes_ = 0;
  size_t owned_bytes_ = 0;
  size_t vec_bytes_ = 0;
};

}  // namespace lumen
