#pragma once
#include <napi.h>

namespace lumen {
// kernelBench({type, rows, k, mib, threads, pairs}): one weight type's decode / prefill matmul
// kernel over a matrix far beyond the caches, against a plain read of the same bytes, in
// alternating passes (pairs) of the same process, and over a slice that stays in L2 (one thread).
// Says whether the kernel or the memory sets the pace on this machine (npm run bench:kernels).
Napi::Value KernelBench(const Napi::CallbackInfo& info);
}
