#pragma once
// samplerCheck(rows, seed, isa): the host sampler's draws on the passes of the named CPU kernel
// table, from the whole vocabulary (Sampler::draw_all, top_k 0) and from the top_k best
// (Sampler::draw_top_k), against the draw of core/top_k.h's scalar candidates (the whole row
// sorted, or its k best; Sampler::draw), the same seed, on rows of every shape a draw can meet.
#include <napi.h>

namespace lumen {
Napi::Value SamplerCheck(const Napi::CallbackInfo& info);
}
