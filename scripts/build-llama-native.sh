#!/usr/bin/env bash
# Builds llama.cpp natively for this machine (GGML_NATIVE=ON: every ISA extension the CPU has) from
# the source node-llama-cpp bundles (node_modules/node-llama-cpp/llama/gitRelease.bundle, the same
# release as the prebuilt library the parity tests use), for the strongest llama.cpp anchor in
# bench:peer and a llama-server to point `bench --endpoint` / `bench diagnose` at.
#
# Cached outside the repository: $LUMEN_LLAMA_NATIVE_DIR, default ~/.cache/lumen-bench/llama.cpp-<tag>-native
# (one per bundled release). Never run by CI; ~15 minutes on 2 cores (twice that on an AMX CPU).
#   bash scripts/build-llama-native.sh              # build (or reuse) and print the main build's bin directory
#   bash scripts/build-llama-native.sh --print      # print the main build's bin directory if built, exit 1 otherwise
#   bash scripts/build-llama-native.sh --print-amx  # print the AMX build's bin directory if built, exit 1 otherwise
#
# On a CPU with AMX (amx_int8 in /proc/cpuinfo) there are two builds. The main one (build-noamx)
# leaves AMX out (-mno-amx-tile -mno-amx-int8 -mno-amx-bf16): this release's AMX matrix product,
# which takes the Q4_0/Q8_0/K-quant weights there, crashes (SIGSEGV in ggml_backend_amx_mul_mat) on
# any product of more than one token row with a Qwen3.5 GGUF, so a prompt or a batched decode never
# finishes (the crash upstream users report as llama.cpp issue 20824). The second (build-amx) keeps
# AMX: its one-row product takes another path that runs (for Q8_0 far faster than the main build's),
# so bench:peer takes llama.cpp's single-stream decode as the higher of the two builds' figures, this
# one run with one-token batches (`-ub 1`).
# docs/performance.md, "An Intel Xeon with AMX", has the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA=node_modules/node-llama-cpp/llama
BUNDLE=$LLAMA/gitRelease.bundle
[ -f "$BUNDLE" ] || { echo "build-llama-native: $BUNDLE not found (run npm ci first)" >&2; exit 2; }
TAG=$(node -e "console.log(require('./$LLAMA/llama.cpp.info.json').tag)")
DIR=${LUMEN_LLAMA_NATIVE_DIR:-$HOME/.cache/lumen-bench/llama.cpp-$TAG-native}
TARGETS=(llama-bench llama-batched-bench llama-server)
AMX_CPU=0
grep -qw amx_int8 /proc/cpuinfo 2>/dev/null && AMX_CPU=1

# The build directory of a variant: plain (no AMX on this CPU), noamx (AMX left out), amx (AMX kept).
build_dir() { case "$1" in plain) echo "$DIR/build" ;; noamx) echo "$DIR/build-noamx" ;; amx) echo "$DIR/build-amx" ;; esac; }
built() { local b; b=$(build_dir "$1")/bin; for t in "${TARGETS[@]}"; do [ -x "$b/$t" ] || return 1; done; }
MAIN=plain
[ "$AMX_CPU" = 1 ] && MAIN=noamx

case "${1:-}" in
  --print) built "$MAIN" && { echo "$(build_dir "$MAIN")/bin"; exit 0; }; exit 1 ;;
  --print-amx) [ "$AMX_CPU" = 1 ] && built amx && { echo "$(build_dir amx)/bin"; exit 0; }; exit 1 ;;
  "") ;;
  *) echo "build-llama-native: unknown argument '$1' (--print or --print-amx)" >&2; exit 2 ;;
esac

mkdir -p "$(dirname "$DIR")"
if [ ! -d "$DIR/.git" ]; then
  rm -rf "$DIR.partial"
  git clone --quiet "$BUNDLE" "$DIR.partial"
  mv "$DIR.partial" "$DIR"
fi
JOBS=${JOBS:-$(nproc)}

build_variant() {
  local variant=$1 build flags note
  build=$(build_dir "$variant")
  case "$variant" in
    plain) flags=""; note="GGML_NATIVE=ON" ;;
    noamx) flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
           note="GGML_NATIVE=ON, AMX left out: this release's AMX product crashes on Qwen3.5 prompts" ;;
    amx) flags=""; note="GGML_NATIVE=ON with AMX, for one-token batches only" ;;
  esac
  built "$variant" && return 0
  # Offline: no prebuilt web UI download, no HTTPS. Explicit -mno-* flags win over -march=native.
  cmake -S "$DIR" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF >&2
  cmake --build "$build" --config Release -j "$JOBS" --target "${TARGETS[@]}" >&2
  built "$variant" || { echo "build-llama-native: the build finished without ${TARGETS[*]} in $build/bin" >&2; exit 1; }
  git -C "$DIR" rev-parse HEAD > "$build/lumen-source-commit"
  echo "$note" > "$build/lumen-build-flags"
}

build_variant "$MAIN"
[ "$AMX_CPU" = 1 ] && build_variant amx
echo "$(build_dir "$MAIN")/bin"
