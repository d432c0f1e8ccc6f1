#include "backend/cpu/kernels.h"

#include "core/cpu_features.h"

namespace lumen::cpu {

const Kernels& kernels() {
  static const Kernels& k = active_isa() == Isa::avx512 ? avx512::table : avx2::table;
  return k;
}

}  // namespace lumen::cpu
