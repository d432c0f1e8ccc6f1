// N-API module entry: registers the engine class and machine queries.
#include <napi.h>

#include "addon/engine_wrap.h"
#include "addon/kernel_bench.h"
#include "addon/machine_probe.h"
#include "addon/sampler_bench.h"
#include "checkpoint/config.h"
#include "core/cpu_features.h"
#include "engine/sequence.h"
#if defined(LUMEN_WITH_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif
#if defined(LUMEN_TEST_HOOKS)
#include "testing/kernel_check.h"
#include "testing/pool_check.h"
#include "testing/sampler_check.h"
#endif

namespace {

Napi::Value CpuInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto obj = Napi::Object::New(env);
  const auto& f = lumen::cpu_features();
  obj.Set("avx2", f.avx2);
  obj.Set("avx512", f.avx512);
  obj.Set("avx512bf16", f.avx512bf16);
  obj.Set("amx", f.amx);
  obj.Set("amxUsed", lumen::amx_usable());
  obj.Set("isa", lumen::active_isa_name());
  obj.Set("usableCpus", lumen::usable_cpus());
  auto limits = Napi::Object::New(env);
  limits.Set("maxConvKernel", lumen::kMaxConvKernel);
  limits.Set("maxLinearHeadDim", lumen::kMaxLinearHeadDim);
  limits.Set("maxLogitsAllBytes", static_cast<double>(lumen::kMaxLogitsAllBytes));
  obj.Set("engineLimits", limits);
#if defined(LUMEN_WITH_CUDA)
  obj.Set("cudaBuilt", true);
#else
  obj.Set("cudaBuilt", false);
#endif
  return obj;
}

// Visible CUDA devices: 0 when the build has no CUDA backend, no driver or no device.
Napi::Value CudaDeviceCount(const Napi::CallbackInfo& info) {
#if defined(LUMEN_WITH_CUDA)
  return Napi::Number::New(info.Env(), lumen::cuda_device_count());
#else
  return Napi::Number::New(info.Env(), 0);
#endif
}

}  // namespace

// Bumped whenever the JS-facing interface changes, so a stale build is refused with a clear
// message instead of failing later with "x is not a function".
constexpr int kAbiVersion = 8;

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("abiVersion", Napi::Number::New(env, kAbiVersion));
  exports.Set("cpuInfo", Napi::Function::New(env, CpuInfo));
  exports.Set("cudaDeviceCount", Napi::Function::New(env, CudaDeviceCount));
  exports.Set("Engine", lumen::InitEngineClass(env));
  exports.Set("probeMachine", Napi::Function::New(env, lumen::ProbeMachine));
  exports.Set("kernelBench", Napi::Function::New(env, lumen::KernelBench));
  exports.Set("samplerBench", Napi::Function::New(env, lumen::SamplerBench));
#if defined(LUMEN_TEST_HOOKS)
  // Test-only checks (native/testing/, CMake option LUMEN_TEST_HOOKS): the test suite calls them.
  exports.Set("kernelCheck", Napi::Function::New(env, lumen::KernelCheck));
  exports.Set("poolCheck", Napi::Function::New(env, lumen::PoolCheck));
  exports.Set("poolFailureCheck", Napi::Function::New(env, lumen::PoolFailureCheck));
  exports.Set("samplerCheck", Napi::Function::New(env, lumen::SamplerCheck));
#endif
  return exports;
}

NODE_API_MODULE(lumen_engine, Init)
