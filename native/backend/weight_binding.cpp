#include "backend/weight_binding.h"

namespace lumen {

void bind_host_weights(const HostWeights& w, const WeightBinders& bind, BWeights& out) {
  const auto& M = bind.mat;
  const auto& V = bind.vec;
  out.embed = M(w.embed());
  out.head = M(w.head());
  out.final_norm = V(w.final_norm());
  out.layers.clear();
  int kv = 0, gd = 0;
  for (const auto& L : w.layers()) {
    BLayer b;
    b.is_full = L.is_full;
    b.in_norm = V(L.in_norm);
    b.post_norm = V(L.post_norm);
    b.gate = M(L.gate);
    b.up = M(L.up);
    b.down = M(L.down);
    if (L.is_full) {
      b.kv_index = kv++;
      b.q = M(L.q);
      b.k = M(L.k);
      b.v = M(L.v);
      b.o = M(L.o);
      b.q_norm = V(L.q_norm);
      b.k_norm = V(L.k_norm);
    } else {
      b.gdn_index = gd++;
      b.qkv = M(L.qkv);
      b.z = M(L.z);
      b.b = M(L.b);
      b.a = M(L.a);
      b.out = M(L.out);
      b.conv = V(L.conv);
      b.dt_bias = V(L.dt_bias);
      b.neg_exp_a = V(L.neg_exp_a);
      b.gdn_norm = V(L.gdn_norm);
    }
    out.layers.push_back(b);
  }
}

}  // namespace lumen
