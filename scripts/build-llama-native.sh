#!/usr/bin/env bash
# Builds llama.cpp natively for this machine (GGML_NATIVE=ON: every ISA extension the CPU has) from
# the source node-llama-cpp bundles (node_modules/node-llama-cpp/llama/gitRelease.bundle, the same
# release as the prebuilt library the parity tests use), for the strongest llama.cpp anchor in
# bench:peer and a llama-server to point `bench --endpoint` / `bench diagnose` at.
#
# Cached outside the repository: $LUMEN_LLAMA_NATIVE_DIR, default ~/.cache/lumen-bench/llama.cpp-<tag>-native
# (one per bundled release). Never run by CI; ~15 minutes on 2 cores.
#   bash scripts/build-llama-native.sh            # build (or reuse) and print the build's bin directory
#   bash scripts/build-llama-native.sh --print    # print the bin directory if built, exit 1 otherwise
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA=node_modules/node-llama-cpp/llama
BUNDLE=$LLAMA/gitRelease.bundle
[ -f "$BUNDLE" ] || { echo "build-llama-native: $BUNDLE not found (run npm ci first)" >&2; exit 2; }
TAG=$(node -e "console.log(require('./$LLAMA/llama.cpp.info.json').tag)")
DIR=${LUMEN_LLAMA_NATIVE_DIR:-$HOME/.cache/lumen-bench/llama.cpp-$TAG-native}
BIN=$DIR/build/bin
TARGETS=(llama-bench llama-batched-bench llama-server)

built() { for t in "${TARGETS[@]}"; do [ -x "$BIN/$t" ] || return 1; done; }
if [ "${1:-}" = "--print" ]; then built && { echo "$BIN"; exit 0; }; exit 1; fi
if built; then echo "$BIN"; exit 0; fi

mkdir -p "$(dirname "$DIR")"
if [ ! -d "$DIR/.git" ]; then
  rm -rf "$DIR.partial"
  git clone --quiet "$BUNDLE" "$DIR.partial"
  mv "$DIR.partial" "$DIR"
fi
JOBS=${JOBS:-$(nproc)}
# Offline: no prebuilt web UI download, no HTTPS.
cmake -S "$DIR" -B "$DIR/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF >&2
cmake --build "$DIR/build" --config Release -j "$JOBS" --target "${TARGETS[@]}" >&2
built || { echo "build-llama-native: the build finished without ${TARGETS[*]} in $BIN" >&2; exit 1; }
git -C "$DIR" rev-parse HEAD > "$BIN/../lumen-source-commit"
echo "$BIN"
