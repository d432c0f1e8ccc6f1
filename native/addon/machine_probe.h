#pragma once
#include <napi.h>

namespace lumen {
// probeMachine(threads): measured memory read bandwidth (GB/s) and peak multiply-add rate (GFLOP/s,
// bf16 dot products on AVX-512 BF16, f32 FMA otherwise), the two limits of the rooflines.
Napi::Value ProbeMachine(const Napi::CallbackInfo& info);
}
