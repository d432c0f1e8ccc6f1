#pragma once
// Qwen3.5 text-model hyper-parameters as the engine uses them.
#include <cmath>
#include <cstdint>
#include <vector>

namespace lumen {

// What the kernels support (fixed-size per-head work buffers); the CLI reads these through the
// addon (engineLimits) so a config beyond them is refused with the flag's words before a load.
constexpr int kMaxConvKernel = 8;
constexpr int kMaxLinearHeadDim = 512;

struct ModelConfig {
  int hidden = 0;
  int n_layers = 0;
  int intermediate = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int lin_k_heads = 0;
  int lin_v_heads = 0;
  int lin_dk = 0;
  int lin_dv = 0;
  int conv_kernel = 0;
  int vocab = 0;
  float eps = 1e-6f;
  float rope_theta = 1e7f;
  float partial_rotary = 0.25f;
  bool tied = true;
  // DeltaNet value heads in llama.cpp's tiled order (GGUF files: value head j reads key head
  // j % nk) instead of the checkpoint's grouped order (key head j / (nv / nk)).
  bool v_heads_tiled = false;
  std::vector<bool> is_full;  // per layer: full attention (true) or Gated DeltaNet (false)

  // Rotary dimensions per head: head_dim x factor, rounded (the factor is a float32 that may sit a
  // hair below the exact value, e.g. 0.53f x 200 = 105.99999), then made even.
  int rot_dim() const { return static_cast<int>(std::lround(head_dim * static_cast<double>(partial_rotary))) / 2 * 2; }
  // The key head value head j reads.
  int key_head_of(int j) const { return v_heads_tiled ? j % lin_k_heads : j / (lin_v_heads / lin_k_heads); }
  // Value head u (< lin_v_heads / lin_k_heads) of key head kh: its inverse.
  int value_head_of(int kh, int u) const { return v_heads_tiled ? kh + u * lin_k_heads : kh * (lin_v_heads / lin_k_heads) + u; }
  int key_dim() const { return lin_k_heads * lin_dk; }
  int value_dim() const { return lin_v_heads * lin_dv; }
  int conv_dim() const { return 2 * key_dim() + value_dim(); }
  int n_full_layers() const {
    int n = 0;
    for (bool f : is_full) n += f;
    return n;
  }
  int n_linear_layers() const { return n_layers - n_full_layers(); }
  // Bytes of one sequence's recurrent state (all GDN layers, fp32 conv window + SSM state).
  size_t state_bytes() const {
    const size_t per_layer = static_cast<size_t>(conv_kernel - 1) * conv_dim() +
                             static_cast<size_t>(lin_v_heads) * lin_dk * lin_dv;
    return per_layer * n_linear_layers() * sizeof(float);
  }
};

}  // namespace lumen
