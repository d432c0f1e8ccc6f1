// N-API module entry: registers the engine class and machine queries.
#include <napi.h>

#include "addon/engine_wrap.h"
#include "core/cpu_features.h"

namespace {

Napi::Value CpuInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto obj = Napi::Object::New(env);
  const auto& f = lumen::cpu_features();
  obj.Set("avx2", f.avx2);
  obj.Set("avx512", f.avx512);
  obj.Set("avx512bf16", f.avx512bf16);
  obj.Set("isa", lumen::active_isa_name());
#if defined(LUMEN_WITH_CUDA)
  obj.Set("cudaBuilt", true);
#else
  obj.Set("cudaBuilt", false);
#endif
  return obj;
}

}  // namespace

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("cpuInfo", Napi::Function::New(env, CpuInfo));
  exports.Set("Engine", lumen::InitEngineClass(env));
  return exports;
}

NODE_API_MODULE(lumen_engine, Init)
