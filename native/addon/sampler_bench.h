#pragma once
#include <napi.h>

namespace lumen {
// samplerBench({vocab, rows, draws, temperature, topP, topLogprobs, topK, isa}): the host's
// per-token work on a logits row, on one CPU kernel table: the whole-vocabulary draw (Sampler,
// top_k 0), the same draw after a sort of the whole row (top_candidates + draw, the reference
// samplerCheck holds it to), the greedy pick (argmax), the logprobs (row_logprobs), and a top-k
// pick by the table's top_candidates and by core/top_k.h's scalar one, and the host's top-k draw
// (Sampler at topK: the pick on the table and the draw, as a top-k request asking for logprobs is
// drawn). Medians in ms, each measurement on the next of `rows` rows (npm run bench:sampler).
Napi::Value SamplerBench(const Napi::CallbackInfo& info);
}
