#pragma once
// Run-time CPU feature detection and the choice of kernel ISA.

namespace lumen {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool avx512 = false;      // F + BW + VL + DQ
  bool avx512bf16 = false;  // vdpbf16ps
  bool avx512vnni = false;  // vpdpbusd (the quantized dot products; every AVX-512 BF16 CPU has it)
  // An Intel CPU: where a kernel's best way to read memory was measured to differ between the Intel
  // Xeon and the AMD EPYC machines (the one-row bf16 decode tile's software prefetch, the Q8_0 tiles'
  // far lines).
  bool intel = false;
  // AMX-TILE + AMX-INT8 + AMX-BF16 (Intel's tile unit), as CPUID reports them; whether this process
  // may use the tiles is amx_usable()'s question.
  bool amx = false;
};

const CpuFeatures& cpu_features();

// CPUs this process may run on (its affinity mask, which containers and taskset narrow), at least
// 1: what `--threads 0` means. Resolved here only, and reported back to the CLI.
int usable_cpus();

enum class Isa { avx2, avx512 };

// Whether this CPU runs that ISA's kernel table: AVX2 + FMA; AVX-512 F/BW/VL/DQ with BF16 and VNNI
// (the AVX-512 table is built with them).
bool isa_supported(Isa isa);

// The ISA the kernels run with: the best the CPU supports, unless LUMEN_ISA=avx2|avx512 forces one
// (forcing a path the CPU lacks falls back to avx2 with a warning on stderr).
Isa active_isa();
// "avx2", "avx512-bf16", or "avx512-bf16+amx" where the AVX-512 table's packed bf16 products run on
// AMX tiles (amx_usable()): what every bench header and JSON names as the ISA path.
const char* active_isa_name();

// Whether the kernels may use AMX tiles: the CPU has them (cpu_features().amx), Linux granted this
// process the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once here), the AVX-512 table
// is active, and LUMEN_AMX is not 0 in the environment. Resolved once.
bool amx_usable();
// Whether they use it now: amx_usable() unless set_amx_enabled(false) switched it off (the kernel
// checks run both paths with it; the switch is process-wide, so not for use while products run).
bool amx_enabled();
void set_amx_enabled(bool on);

}  // namespace lumen
