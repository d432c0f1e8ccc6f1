#include "core/cpu_features.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <thread>

#include <cpuid.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

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
    unsigned a = 0, b = 0, c = 0, d = 0;
    // CPUID leaf 7: EDX bit 22 AMX-BF16, 24 AMX-TILE, 25 AMX-INT8.
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) r.amx = (d >> 22 & 1) && (d >> 24 & 1) && (d >> 25 & 1);
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

bool amx_usable() {
  static const bool usable = [] {
    if (!cpu_features().amx || active_isa() != Isa::avx512) return false;
    const char* env = std::getenv("LUMEN_AMX");
    if (env && std::strcmp(env, "0") == 0) return false;
    // Linux keeps the 8 KiB of tile data out of a process's saved state until it asks for it.
    constexpr long kReqPerm = 0x1023, kGetPerm = 0x1022, kTileData = 18;
    if (syscall(SYS_arch_prctl, kReqPerm, kTileData) != 0) return false;
    unsigned long mask = 0;
    return syscall(SYS_arch_prctl, kGetPerm, &mask) == 0 && (mask >> kTileData & 1);
  }();
  return usable;
}

namespace {
std::atomic<bool> amx_on{true};
}
bool amx_enabled() { return amx_on.load(std::memory_order_relaxed) && amx_usable(); }
void set_amx_enabled(bool on) { amx_on.store(on, std::memory_order_relaxed); }

const char* active_isa_name() {
  if (active_isa() == Isa::avx2) return "avx2";
  return amx_usable() ? "avx512-bf16+amx" : "avx512-bf16";
}

}  // namespace lumen
