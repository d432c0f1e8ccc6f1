// CPU kernels, compiled once per ISA (LUMEN_ISA=avx2 | avx512).
namespace { [[maybe_unused]] int placeholder = 0; }
