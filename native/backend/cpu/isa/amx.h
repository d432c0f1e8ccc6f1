#pragma once
// AMX tile instructions for the AVX-512 table's kernels, as inline assembly (the compiler's own
// intrinsics tell it nothing of the memory a tile load reads or a store writes, so every one here
// clobbers memory). Used only where lumen::amx_enabled() holds: the CPU has the tiles and Linux
// granted this process their state (core/cpu_features.cpp).
//
// A kernel configures the tiles it uses with a TileConfig (ldtilecfg), runs, and releases them
// (tilerelease) before it returns, so no tile state outlives a kernel call: the thread switches
// and signals between calls save no tile data.
#include <cstdint>

namespace lumen::cpu::amx {

// Palette 1: up to 8 tiles of up to 16 rows of up to 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};  // bytes per row, per tile
  uint8_t rows[16] = {};
  void set(int tile, int nrows, int bytes) {
    rows[tile] = static_cast<uint8_t>(nrows);
    colsb[tile] = static_cast<uint16_t>(bytes);
  }
};
static_assert(sizeof(TileConfig) == 64);

inline void configure(const TileConfig& c) { asm volatile("ldtilecfg %0" ::"m"(c)); }
inline void release() { asm volatile("tilerelease" ::: "memory"); }

// Tile T's rows from base, stride bytes apart; tile T's rows to base.
#define LUMEN_TILE_LOAD(T, base, stride) \
  asm volatile("tileloadd (%0,%1,1), %%tmm" #T ::"r"(base), "r"(static_cast<int64_t>(stride)) : "memory")
#define LUMEN_TILE_STORE(T, base, stride) \
  asm volatile("tilestored %%tmm" #T ", (%0,%1,1)" ::"r"(base), "r"(static_cast<int64_t>(stride)) : "memory")
#define LUMEN_TILE_ZERO(T) asm volatile("tilezero %%tmm" #T ::)
// C (f32) += A (bf16 pairs) . B (bf16 pairs): C[m][n] += sum_k A[m][2 k + i] B[k][2 n + i].
#define LUMEN_TILE_DPBF16PS(C, A, B) asm volatile("tdpbf16ps %%tmm" #B ", %%tmm" #A ", %%tmm" #C ::)

}  // namespace lumen::cpu::amx
