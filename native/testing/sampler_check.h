#pragma once
// samplerCheck(rows, seed, isa): the whole-vocabulary draw (Sampler::draw_all, top_k 0, on the
// passes of the named CPU kernel table) against the draw after a sort of the whole row
// (top_candidates + Sampler::draw), the same seed, on rows of every shape a draw can meet.
#include <napi.h>

namespace lumen {
Napi::Value SamplerCheck(const Napi::CallbackInfo& info);
}
