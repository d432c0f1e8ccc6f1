#include "backend/cpu/kernels.h"

#include "backend/cpu/probes.h"
#include "core/cpu_features.h"

namespace lumen::cpu {

const Kernels& kernels() {
  static const Kernels& k = active_isa() == Isa::avx512 ? avx512::table : avx2::table;
  return k;
}

const Probes& probes() {
  static const Probes& p = active_isa() == Isa::avx512 ? avx512::probe_table : avx2::probe_table;
  return p;
}

}  // namespace lumen::cpu
