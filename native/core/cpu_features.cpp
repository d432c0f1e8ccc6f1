#include "core/cpu_features.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <sched.h>

namespace lumen {

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = [] {
    CpuFeatures r;
    __builtin_cpu_init();
    r.avx2 = __builtin_cpu_supports("avx2");
    r.fma = __builtin_cpu_supports("fma");
    r.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    r.avx512bf16 = r.avx512 && __builtin_cpu_supports("avx512bf16");
    r.avx512vnni = r.avx512 && __builtin_cpu_supports("avx512vnni");
    r.intel = __builtin_cpu_is("intel");
    return r;
  }();
  return f;
}

bool isa_supported(Isa isa) {
  const auto& f = cpu_features();
  return isa == Isa::avx512 ? f.avx512 && f.avx512bf16 && f.avx512vnni : f.avx2 && f.fma;
}

Isa active_isa() {
  static const Isa isa = [] {
    const bool can512 = isa_supported(Isa::avx512);
    const char* env = std::getenv("LUMEN_ISA");
    if (env && std::strcmp(env, "avx2") == 0) return Isa::avx2;
    if (env && std::strcmp(env, "avx512") == 0) {
      if (can512) return Isa::avx512;
      std::fprintf(stderr, "lumen: LUMEN_ISA=avx512 but this CPU lacks AVX-512 BF16 or VNNI; using avx2\n");
      return Isa::avx2;
    }
    return can512 ? Isa::avx512 : Isa::avx2;
  }();
  return isa;
}

const char* active_isa_name() { return active_isa() == Isa::avx512 ? "avx512-bf16" : "avx2"; }

}  // namespace lumen
