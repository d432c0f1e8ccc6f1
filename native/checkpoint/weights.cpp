#include "checkpoint/weights.h"

#include "core/quant_ref.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <map>
#include <utility>

namespace lumen {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

// Element i of a tensor stored as f32, bf16 or f16 (unaligned-safe), widened to f32.
float element_f32(const unsigned char* src, DType dt, size_t i) {
  if (dt == DType::f32) {
    float v;
    std::memcpy(&v, src + 4 * i, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, src + 2 * i, 2);
  return dt == DType::bf16 ? bf16_to_f32(h) : f16_to_f32(h);
}

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

}  // namespace

float* HostWeights::new_f32(size_t n) {
  owned_.push_back(std::make_unique<AlignedBuffer>(n * sizeof(float), false));
  owned_bytes_ += n * sizeof(float);
  return owned_.back()->as<float>();
}

const unsigned char* HostWeights::tensor_bytes(const TensorEntry& t) {
  MappedFile* f = nullptr;
  for (auto& m : files_)
    if (m->path() == t.file) f = m.get();
  if (!f) {
    files_.push_back(std::make_unique<MappedFile>(t.file));
    f = files_.back().get();
  }
  const DTypeInfo& ti = dtype_info(t.dtype);
  const int64_t row_len = t.shape.empty() ? 1 : t.shape.back();
  if (row_len % ti.block != 0)
    throw std::runtime_error("tensor " + t.name + " in " + t.file + ": type " + ti.name + " needs rows of a multiple of " +
                             std::to_string(ti.block) + " elements, but its rows have " + std::to_string(row_len));
  const uint64_t expect = static_cast<uint64_t>(numel(t.shape) / ti.block) * static_cast<uint64_t>(ti.bytes);
  if (t.nbytes != expect)
    throw std::runtime_error("tensor " + t.name + " in " + t.file + ": " + std::to_string(t.nbytes) +
                             " bytes for shape " + shape_str(t.shape) + " (expected " +
                             std::to_string(expect) + ")");
  if (t.offset > f->size() || t.nbytes > f->size() - t.offset)
    throw std::runtime_error("tensor " + t.name + " in " + t.file + ": data [" + std::to_string(t.offset) +
                             ", " + std::to_string(t.offset + t.nbytes) + ") lies past the end of the file (" +
                             std::to_string(f->size()) + " bytes)");
  return f->data() + t.offset;
}

void HostWeights::release_mapped(const void* p, size_t n) const {
  for (const auto& f : files_)
    if (f->release(p, n)) return;
}

HostMat HostWeights::bind_mat(const TensorEntry& t, WeightPolicy policy, int64_t rows, int64_t cols) {
  if (numel(t.shape) != rows * cols || t.shape.empty() || t.shape[0] != rows)
    throw std::runtime_error("tensor " + t.name + ": shape " + shape_str(t.shape) + ", expected [" +
                             std::to_string(rows) + "," + std::to_string(cols) + "]");
  const unsigned char* src = tensor_bytes(t);
  DType want = t.dtype == DType::f16 ? DType::f32 : t.dtype;
  // Quantized matrices stay as stored unless a policy asks for f32 / bf16 (then dequantized).
  if (policy == WeightPolicy::f32) want = DType::f32;
  if (policy == WeightPolicy::bf16) want = DType::bf16;
  if (is_quant(t.dtype) && want != t.dtype) {
    owned_.push_back(std::make_unique<AlignedBuffer>(static_cast<size_t>(rows * cols) * dtype_size(want), false));
    owned_bytes_ += static_cast<size_t>(rows * cols) * dtype_size(want);
    void* dst = owned_.back()->data();
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      quant::dequantize_row(t.dtype, src + static_cast<size_t>(r) * row_bytes(t.dtype, cols), row.data(), cols);
      for (int64_t c = 0; c < cols; ++c) {
        if (want == DType::f32)
          static_cast<float*>(dst)[r * cols + c] = row[static_cast<size_t>(c)];
        else
          static_cast<uint16_t*>(dst)[r * cols + c] = f32_to_bf16(row[static_cast<size_t>(c)]);
      }
    }
    HostMat m{dst, want, rows, cols};
    matrix_bytes_ += m.bytes();
    return m;
  }
  if (policy == WeightPolicy::f32) want = DType::f32;
  if (policy == WeightPolicy::bf16) want = DType::bf16;
  HostMat m{src, want, rows, cols};
  const size_t n = static_cast<size_t>(rows * cols);
  if (want != t.dtype) {
    owned_.push_back(std::make_unique<AlignedBuffer>(n * dtype_size(want), false));
    owned_bytes_ += n * dtype_size(want);
    void* dst = owned_.back()->data();
    for (size_t i = 0; i < n; ++i) {
      const float v = element_f32(src, t.dtype, i);
      if (want == DType::f32)
        static_cast<float*>(dst)[i] = v;
      else
        static_cast<uint16_t*>(dst)[i] = f32_to_bf16(v);
    }
    m.data = dst;
  }
  matrix_bytes_ += m.bytes();
  return m;
}

HostVec HostWeights::bind_vec(const TensorEntry& t, int64_t n) {
  if (numel(t.shape) != n)
    throw std::runtime_error("tensor " + t.name + ": shape " + shape_str(t.shape) + " has " +
                             std::to_string(numel(t.shape)) + " elements, expected " + std::to_string(n));
  if (is_quant(t.dtype))
    throw std::runtime_error("tensor " + t.name + ": a vector stored as " + dtype_info(t.dtype).name +
                             "; vectors must be F32, F16 or BF16");
  const unsigned char* src = tensor_bytes(t);
  float* dst = new_f32(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float v = element_f32(src, t.dtype, static_cast<size_t>(i));
    // A NaN or an infinity in a vector (a norm, the conv taps, the gates' constants) is a damaged
    // file: a quantized model would not show it later (the activation quantization of a quantized
    // matrix turns a NaN into a finite value, as llama.cpp's does). The loaders refuse it first
    // (src/model/vector-check.ts); this is the engine's own check, for any other caller.
    if (!std::isfinite(v))
      throw std::runtime_error("tensor " + t.name + " in " + t.file + ": element " + std::to_string(i) + " is " +
                               (std::isnan(v) ? "NaN" : "infinite") + " (a damaged file: a vector's values are finite)");
    // Fold the checkpoint's convention in fp32, exactly as the reference computes it.
    dst[i] = t.fold == Fold::neg_exp ? -std::exp(v) : v + (t.fold == Fold::plus_one ? 1.f : 0.f);
  }
  vec_bytes_ += static_cast<size_t>(n) * sizeof(float);
  return HostVec{dst, n};
}

HostWeights::HostWeights(const ModelConfig& cfg, const std::vector<TensorEntry>& tensors, WeightPolicy policy,
                         const std::function<void(int, int)>& on_layer)
    : cfg_(cfg) {
  // Tensors by (role, layer): the roles of src/model/tensor-roles.ts.
  std::map<std::pair<std::string, int>, const TensorEntry*> by_role;
  for (const auto& t : tensors)
    if (!by_role.emplace(std::make_pair(t.role, t.layer), &t).second)
      throw std::runtime_error("tensor " + t.name + ": role " + t.role + " of layer " + std::to_string(t.layer) +
                               " is given twice");
  auto get = [&](const char* role, int layer = -1) -> const TensorEntry& {
    auto it = by_role.find({role, layer});
    if (it == by_role.end())
      throw std::runtime_error(std::string("the manifest has no tensor for role ") + role +
                               (layer >= 0 ? " of layer " + std::to_string(layer) : std::string()));
    return *it->second;
  };
  const int64_t H = cfg.hidden, I = cfg.intermediate, V = cfg.vocab;
  embed_ = bind_mat(get("embed"), policy, V, H);
  final_norm_ = bind_vec(get("final_norm"), H);
  head_ = cfg.tied ? embed_ : bind_mat(get("lm_head"), policy, V, H);
  layers_.resize(cfg.n_layers);
  for (int i = 0; i < cfg.n_layers; ++i) {
    HostLayer& L = layers_[i];
    L.is_full = cfg.is_full[i];
    L.in_norm = bind_vec(get("in_norm", i), H);
    L.post_norm = bind_vec(get("post_norm", i), H);
    L.gate = bind_mat(get("mlp_gate", i), policy, I, H);
    L.up = bind_mat(get("mlp_up", i), policy, I, H);
    L.down = bind_mat(get("mlp_down", i), policy, H, I);
    if (L.is_full) {
      const int64_t hd = cfg.head_dim;
      L.q = bind_mat(get("attn_q", i), policy, 2 * cfg.n_heads * hd, H);
      L.k = bind_mat(get("attn_k", i), policy, cfg.n_kv_heads * hd, H);
      L.v = bind_mat(get("attn_v", i), policy, cfg.n_kv_heads * hd, H);
      L.o = bind_mat(get("attn_o", i), policy, H, cfg.n_heads * hd);
      L.q_norm = bind_vec(get("attn_q_norm", i), hd);
      L.k_norm = bind_vec(get("attn_k_norm", i), hd);
    } else {
      const int64_t nv = cfg.lin_v_heads;
      L.qkv = bind_mat(get("gdn_qkv", i), policy, cfg.conv_dim(), H);
      L.z = bind_mat(get("gdn_z", i), policy, cfg.value_dim(), H);
      L.b = bind_mat(get("gdn_b", i), policy, nv, H);
      L.a = bind_mat(get("gdn_a", i), policy, nv, H);
      L.out = bind_mat(get("gdn_out", i), policy, H, cfg.value_dim());
      L.conv = bind_vec(get("gdn_conv", i), int64_t{cfg.conv_dim()} * cfg.conv_kernel);
      L.dt_bias = bind_vec(get("gdn_dt_bias", i), nv);
      L.neg_exp_a = bind_vec(get("gdn_a_log", i), nv);
      L.gdn_norm = bind_vec(get("gdn_norm", i), cfg.lin_dv);
    }
    if (on_layer) on_layer(i + 1, cfg.n_layers);
  }
}

size_t HostWeights::total_bytes() const { return matrix_bytes_ + vec_bytes_; }

std::string HostWeights::dtype_label() const {
  std::map<DType, size_t> bytes;
  auto add = [&](const HostMat& m) {
    if (m.data != nullptr) bytes[m.dtype] += m.bytes();
  };
  add(embed_);
  if (head_.data != embed_.data) add(head_);
  for (const HostLayer& L : layers_)
    for (const HostMat* m : {&L.gate, &L.up, &L.down, &L.q, &L.k, &L.v, &L.o, &L.qkv, &L.z, &L.b, &L.a, &L.out}) add(*m);
  std::vector<std::pair<size_t, DType>> order;
  for (const auto& [d, n] : bytes) order.emplace_back(n, d);
  std::sort(order.begin(), order.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  std::string label;
  for (const auto& entry : order) {
    if (!label.empty()) label += '+';
    label += dtype_name(entry.second);
  }
  return label;
}

namespace {

// xorshift64* stream: fast, deterministic for a seed. Uniform values with the wanted std.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x1234567ull) {}
  float uniform() {  // [-1, 1)
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    const uint64_t r = s * 0x2545F4914F6CDD1Dull;
    return static_cast<float>(static_cast<int64_t>(r >> 11) - (int64_t{1} << 52)) / static_cast<float>(int64_t{1} << 52);
  }
};

}  // namespace

std::unique_ptr<HostWeights> HostWeights::synthetic(const ModelConfig& cfg, DType dtype, uint64_t seed,
                                                    bool store_f32) {
  std::unique_ptr<HostWeights> w(new HostWeights(cfg));
  Rng rng(seed);
  const float sqrt3 = 1.7320508f;
  auto mat = [&](int64_t rows, int64_t cols, float std) {
    const size_t n = static_cast<size_t>(rows * cols);
    const DType stored = store_f32 ? DType::f32 : dtype;
    w->owned_.push_back(std::make_unique<AlignedBuffer>(n * dtype_size(stored), false));
    void* dst = w->owned_.back()->data();
    const float a = std * sqrt3;
    if (stored == DType::f32) {
      float* d = static_cast<float*>(dst);
      for (size_t i = 0; i < n; ++i) {
        const float v = a * rng.uniform();
        d[i] = dtype == DType::bf16 ? bf16_to_f32(f32_to_bf16(v)) : v;
      }
    } else {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(a * rng.uniform());
    }
    HostMat m{dst, stored, rows, cols};
    w->matrix_bytes_ += m.bytes();
    return m;
  };
  auto vec = [&](int64_t n, float center, float spread) {
    float* d = w->new_f32(static_cast<size_t>(n));
    w->vec_bytes_ += static_cast<size_t>(n) * 4;
    for (int64_t i = 0; i < n; ++i) d[i] = center + spread * rng.uniform();
    return HostVec{d, n};
  };
  const int64_t H = cfg.hidden, I = cfg.intermediate;
  const float proj = 1.0f / std::sqrt(static_cast<float>(H));
  w->embed_ = mat(cfg.vocab, H, 4.0f / std::sqrt(static_cast<float>(H)));
  w->final_norm_ = vec(H, 1.f, 0.05f);
  w->head_ = cfg.tied ? w->embed_ : mat(cfg.vocab, H, 4.0f / std::sqrt(static_cast<float>(H)));
  w->layers_.resize(cfg.n_layers);
  for (int i = 0; i < cfg.n_layers; ++i) {
    HostLayer& L = w->layers_[i];
    L.is_full = cfg.is_full[i];
    L.in_norm = vec(H, 1.f, 0.05f);
    L.post_norm = vec(H, 1.f, 0.05f);
    L.gate = mat(I, H, proj);
    L.up = mat(I, H, proj);
    L.down = mat(H, I, 0.5f / std::sqrt(static_cast<float>(I)));
    if (L.is_full) {
      const int64_t hd = cfg.head_dim;
      L.q = mat(2 * cfg.n_heads * hd, H, proj);
      L.k = mat(cfg.n_kv_heads * hd, H, proj);
      L.v = mat(cfg.n_kv_heads * hd, H, proj);
      L.o = mat(H, cfg.n_heads * hd, 0.5f / std::sqrt(static_cast<float>(cfg.n_heads * hd)));
      L.q_norm = vec(hd, 1.f, 0.05f);
      L.k_norm = vec(hd, 1.f, 0.05f);
    } else {
      const int64_t nv = cfg.lin_v_heads;
      L.qkv = mat(cfg.conv_dim(), H, proj);
      L.z = mat(cfg.value_dim(), H, proj);
      L.b = mat(nv, H, proj);
      L.a = mat(nv, H, proj);
      L.out = mat(H, cfg.value_dim(), 0.5f / std::sqrt(static_cast<float>(cfg.value_dim())));
      L.conv = vec(int64_t{cfg.conv_dim()} * cfg.conv_kernel, 0.f, 0.5f);
      L.dt_bias = vec(nv, -4.f, 1.f);
      L.neg_exp_a = vec(nv, -8.f, 7.f);
      L.gdn_norm = vec(cfg.lin_dv, 1.f, 0.05f);
    }
  }
  return w;
}

}  // namespace lumen
