#pragma once
#include <napi.h>

namespace lumen {
// probeMachine(threads, parts = 'all' | 'bandwidth' | 'peak'): measured memory read bandwidth
// (GB/s) and peak multiply-add rate (GFLOP/s, bf16 dot products on AVX-512 BF16, f32 FMA
// otherwise), the two limits of the rooflines, or one of them.
Napi::Value ProbeMachine(const Napi::CallbackInfo& info);
}
