#pragma once
#include <napi.h>

namespace lumen {
// samplerBench({vocab, rows, draws, temperature, topP, topLogprobs, isa}): the host's per-token work
// on a logits row, on one CPU kernel table: the whole-vocabulary draw (Sampler, top_k 0), the same
// draw after a sort of the whole row (top_candidates + draw, the reference samplerCheck holds it
// to), the greedy pick (argmax) and the logprobs (row_logprobs). Medians in ms, each measurement on
// the next of `rows` rows (npm run bench:sampler).
Napi::Value SamplerBench(const Napi::CallbackInfo& info);
}
