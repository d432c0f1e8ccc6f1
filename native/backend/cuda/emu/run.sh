#!/usr/bin/env bash
# Builds the engine with the CUDA backend compiled as plain C++ against the CPU emulation, and runs
# emu_check (CUDA backend vs CPU backend on small synthetic models). No GPU or nvcc needed.
#   native/backend/cuda/emu/run.sh [quick|kernels|cases] [--asan]
# --asan adds AddressSanitizer (device buffers are heap blocks: out-of-bounds accesses report) and
# the alignment check (a misaligned float4/uint4 access, which faults on a GPU, aborts here).
# Build folder: $LUMEN_EMU_BUILD (default /tmp/lumen-cuda-emu). x86-64 only.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)"
OUT="${LUMEN_EMU_BUILD:-/tmp/lumen-cuda-emu}"
ARGS=()
SAN=""
for a in "$@"; do
  case "$a" in
    --asan) SAN="-fsanitize=address,alignment -fno-sanitize-recover=alignment -fno-omit-frame-pointer" ;;
    *) ARGS+=("$a") ;;
  esac
done
mkdir -p "$OUT/obj"
CXX="${CXX:-g++}"
COMMON=(-std=c++20 -O2 -g -pthread -DLUMEN_WITH_CUDA=1 -DLUMEN_CUDA_EMU=1 -I "$REPO/native/backend/cuda/emu/include" -I "$REPO/native"
  -Wall -Wno-unused-parameter -Wno-unknown-pragmas $SAN)
# Objects built with other flags are stale.
STAMP="$(printf '%s ' "$CXX" "${COMMON[@]}")"
if [ "$(cat "$OUT/flags" 2>/dev/null)" != "$STAMP" ]; then rm -f "$OUT"/obj/*.o; printf '%s' "$STAMP" > "$OUT/flags"; fi
SRCS=()
for f in "$REPO"/native/core/*.cpp "$REPO"/native/checkpoint/*.cpp "$REPO"/native/model/*.cpp "$REPO"/native/engine/*.cpp \
         "$REPO"/native/backend/cpu/cpu_backend.cpp "$REPO"/native/backend/cpu/gdn_cpu.cpp "$REPO"/native/backend/cpu/kernels.cpp \
         "$REPO"/native/backend/cuda/cuda_backend.cpp "$REPO"/native/backend/cuda/*.cu \
         "$REPO"/native/backend/cuda/emu/emu_runtime.cc "$REPO"/native/backend/cuda/emu/emu_check.cc; do
  [ -f "$f" ] && SRCS+=("$f")
done
# Optional CPU sources of the tree (present in some revisions).
for f in "$REPO"/native/backend/*.cpp "$REPO"/native/backend/cpu/*.cpp; do
  case "$f" in */kernels_isa.cpp|*/cpu_backend.cpp|*/gdn_cpu.cpp|*/kernels.cpp) ;; *) [ -f "$f" ] && SRCS+=("$f") ;; esac
done
jobs=()
objs=()
compile() {  # src obj extra...
  local src=$1 obj=$2
  shift 2
  if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ] || [ -n "$(find "$REPO/native" \( -name '*.h' -o -name '*.cuh' \) -newer "$obj" -print -quit)" ]; then
    local lang=()
    case "$src" in *.cu) lang=(-x c++) ;; esac
    "$CXX" "${COMMON[@]}" "$@" "${lang[@]}" -c "$src" -o "$obj" &
    jobs+=($!)
    if [ ${#jobs[@]} -ge "${EMU_JOBS:-2}" ]; then wait "${jobs[0]}"; jobs=("${jobs[@]:1}"); fi
  fi
  objs+=("$obj")
}
for s in "${SRCS[@]}"; do
  compile "$s" "$OUT/obj/$(echo "${s#$REPO/}" | tr '/' '_').o"
done
compile "$REPO/native/backend/cpu/kernels_isa.cpp" "$OUT/obj/kernels_avx2.o" -DLUMEN_ISA=avx2 -mavx2 -mfma -mf16c
compile "$REPO/native/backend/cpu/kernels_isa.cpp" "$OUT/obj/kernels_avx512.o" -DLUMEN_ISA=avx512 -Wno-uninitialized \
  -Wno-maybe-uninitialized -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16
for j in "${jobs[@]}"; do wait "$j"; done
"$CXX" "${COMMON[@]}" -o "$OUT/emu_check" "${objs[@]}"
echo "[emu] built $OUT/emu_check; running" >&2
exec "$OUT/emu_check" "${ARGS[@]}"
