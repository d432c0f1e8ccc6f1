#pragma once
// Machine probe table (probeMachine, the roofline limits), compiled per ISA like the model kernels
// (isa/probes.cpp) but kept out of their table: nothing in the model calls it.
#include <cstdint>

namespace lumen::cpu {

struct Probes {
  const char* name;
  // Sum of n floats read as `streams` (1, 2, 4, 8) side-by-side streams.
  float (*stream_sum)(const float* x, int64_t n, int streams);
  // `iters` rounds of independent multiply-adds in registers; returns the FLOPs done (bf16 dot
  // products where the ISA has them).
  double (*fma_burn)(int64_t iters);
  // The same with AMX bf16 tile products (tdpbf16ps), where the table has them (else null); only
  // for a thread that may use the tiles (lumen::amx_enabled()).
  double (*tile_burn)(int64_t iters);
};

// The table of the ISA chosen at run time (the same choice as kernels()).
const Probes& probes();

namespace avx2 { extern const Probes probe_table; }
namespace avx512 { extern const Probes probe_table; }

}  // namespace lumen::cpu
