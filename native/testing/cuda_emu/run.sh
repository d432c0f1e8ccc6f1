#!/usr/bin/env bash
# Builds emu_check (CMake option LUMEN_CUDA_EMU: the engine with the CUDA backend compiled as plain
# C++ against the CPU emulation in this folder) and runs it: CUDA backend vs CPU backend on small
# synthetic models. No GPU or nvcc needed. The source lists are CMakeLists.txt's.
#   native/testing/cuda_emu/run.sh [quick|kernels|cases] [--asan]
#   native/testing/cuda_emu/run.sh gguf SPEC... [--asan]   (GGUF files; specs: test/cuda-emu-gguf.test.ts)
# --schedule=MODE runs the fibers of a block (between barriers) and the blocks of a grid in another
# order: reverse, or shuffle:SEED (LUMEN_EMU_SCHEDULE; a result that depends on it is a race).
# --asan adds AddressSanitizer (device buffers are heap blocks: out-of-bounds accesses report) and
# the alignment check (a misaligned float4/uint4 access, which faults on a GPU, aborts here).
# Build folder: $LUMEN_EMU_BUILD (default /tmp/lumen-cuda-emu); parallel jobs: $EMU_JOBS (default 2).
# x86-64 only.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
OUT="${LUMEN_EMU_BUILD:-/tmp/lumen-cuda-emu}"
ARGS=()
SAN=OFF
for a in "$@"; do
  case "$a" in
    --asan) SAN=ON ;;
    --schedule=*) export LUMEN_EMU_SCHEDULE="${a#--schedule=}" ;;
    *) ARGS+=("$a") ;;
  esac
done
# One build at a time per folder (test files that run this script may run in parallel).
mkdir -p "$(dirname "$OUT")"
exec 9> "$OUT.lock"
flock 9
GEN=()
command -v ninja > /dev/null 2>&1 && [ ! -f "$OUT/CMakeCache.txt" ] && GEN=(-G Ninja)
cmake -S "$REPO" -B "$OUT" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="${CXX:-g++}" \
  -DLUMEN_CUDA_EMU=ON -DLUMEN_EMU_SANITIZE="$SAN" > "$OUT.configure.log" 2>&1 || { cat "$OUT.configure.log" >&2; exit 1; }
cmake --build "$OUT" --target lumen_cuda_emu_check -j "${EMU_JOBS:-2}" >&2
flock -u 9
echo "[emu] built $OUT/lumen_cuda_emu_check; running" >&2
exec "$OUT/lumen_cuda_emu_check" "${ARGS[@]}"
