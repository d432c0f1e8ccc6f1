#!/usr/bin/env bash
# Packs, on a CPU machine that has nvcc, everything the CUDA device check needs on a bare x86-64
# GPU machine with no Node.js and no network, into one folder (default .gpu-pack/, git-ignored):
#   payload.tar.xz      lumen/ (package.json, bin/, dist/ with the check's driver
#                       dist/scripts/gpu-check-driver.js, the addon built for sm_90 in
#                       build/Release/, the runtime node_modules, scripts/gpu-check.sh),
#                       node/ (this machine's node binary, stripped, with its shared libraries and
#                       loader as a fallback), bin/gpu-probe (bandwidth and mma-rate probe)
#   run-gpu-check.sh    unpacks the payload (tar, else python3) and runs lumen/scripts/gpu-check.sh
#   MANIFEST.txt        what went in, sizes, the commit
# On the GPU machine: `bash .gpu-pack/run-gpu-check.sh` (GPU_CHECK_OUT=dir chooses where results go).
#
# Usage: scripts/pack-gpu-check.sh [--dest DIR] [--arch 90-real] [--dry-run]
#   --dry-run   after packing, unpack into a temporary folder and run the check there with
#               --dry-run (CPU only), to prove the pack is complete.
# Environment: LUMEN_PACK_BUILD (CMake build folder for the sm_90 addon, default
# /tmp/lumen-gpu-pack-build), LUMEN_PACK_MAX_MIB (size limit, default 64).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$REPO/.gpu-pack"
ARCH="90-real"
DRY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dest) DEST="$2"; shift ;;
    --arch) ARCH="$2"; shift ;;
    --dry-run) DRY=1 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "pack-gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
BUILD="${LUMEN_PACK_BUILD:-/tmp/lumen-gpu-pack-build}"
MAX_MIB="${LUMEN_PACK_MAX_MIB:-64}"
say() { echo "[pack $(date +%H:%M:%S)] $*" >&2; }
need() { command -v "$1" >/dev/null 2>&1 || { say "FATAL: $1 is required"; exit 1; }; }
need node; need npx; need nvcc; need tar; need xz
[ "$(uname -m)" = x86_64 ] || { say "FATAL: the GPU machine is x86-64; pack on an x86-64 machine"; exit 1; }

STAGE="$(mktemp -d /tmp/lumen-gpu-pack-stage.XXXXXX)"
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/lumen/build/Release" "$STAGE/lumen/scripts" "$STAGE/node/bin" "$STAGE/node/lib" "$STAGE/bin"

# 1. The addon, CUDA required, machine code for the GPU check's chip only (small and quick).
say "building the addon for CUDA architectures $ARCH in $BUILD"
T=$(date +%s)
(cd "$REPO" && flock /tmp/lumen-build.lock npx cmake-js compile --out "$BUILD" \
  --CDCMAKE_CUDA_ARCHITECTURES="$ARCH" --CDLUMEN_CUDA=ON > "$STAGE/addon-build.log" 2>&1) || {
  tail -30 "$STAGE/addon-build.log" >&2; say "FATAL: addon build failed"; exit 1; }
ADDON_S=$(( $(date +%s) - T ))
cp "$BUILD/Release/lumen_engine.node" "$STAGE/lumen/build/Release/"
strip --strip-unneeded "$STAGE/lumen/build/Release/lumen_engine.node" 2>/dev/null || true
node -e "const a=require(process.argv[1]); if(!a.cpuInfo().cudaBuilt){console.error('addon has no CUDA backend');process.exit(1)}" \
  "$STAGE/lumen/build/Release/lumen_engine.node"
say "addon built in ${ADDON_S}s"

# 2. The compiled TypeScript (its own output folder: the shared dist/ is left alone).
say "compiling TypeScript"
if ! (cd "$REPO" && npx tsc -p tsconfig.json --outDir "$STAGE/lumen/dist" > "$STAGE/tsc.log" 2>&1); then
  say "warning: tsc reported errors (output still emitted):"; head -20 "$STAGE/tsc.log" >&2
fi
for f in src/engine/engine.js scripts/gpu-check-driver.js; do
  [ -f "$STAGE/lumen/dist/$f" ] || { say "FATAL: tsc produced no dist/$f"; exit 1; }
done
cp "$REPO/package.json" "$STAGE/lumen/"
cp -r "$REPO/bin" "$STAGE/lumen/"
cp "$REPO/scripts/gpu-check.sh" "$REPO/scripts/gpu-node.sh" "$STAGE/lumen/scripts/"

# 3. Runtime node_modules: the production dependencies and what they need, without the build-time
#    ones (cmake-js and node-addon-api build the addon; the pack brings it built).
say "collecting runtime node_modules"
(cd "$REPO" && node - > "$STAGE/modules.txt") <<'EOF_DEPS'
const fs = require('node:fs');
const path = require('node:path');
const root = process.cwd();
const BUILD_ONLY = new Set(['cmake-js', 'node-addon-api']);
const pkg = (d) => JSON.parse(fs.readFileSync(path.join(d, 'package.json'), 'utf8'));
function resolve(name, from) {
  for (let d = from; ; d = path.dirname(d)) {
    const c = path.join(d, 'node_modules', name);
    if (fs.existsSync(path.join(c, 'package.json'))) return c;
    if (d === root || d === path.dirname(d)) return null;
  }
}
const seen = new Set();
const queue = Object.keys(pkg(root).dependencies ?? {}).filter((n) => !BUILD_ONLY.has(n)).map((n) => [n, root]);
while (queue.length) {
  const [name, from] = queue.shift();
  const dir = resolve(name, from);
  if (!dir) { if (!(pkg(from).optionalDependencies ?? {})[name]) console.error(`missing ${name} (from ${from})`); continue; }
  if (seen.has(dir)) continue;
  seen.add(dir);
  const p = pkg(dir);
  for (const n of Object.keys({ ...(p.dependencies ?? {}), ...(p.optionalDependencies ?? {}) })) queue.push([n, dir]);
}
for (const d of [...seen].sort()) console.log(path.relative(root, d));
EOF_DEPS
(cd "$REPO" && tar -cf - -T "$STAGE/modules.txt") | (cd "$STAGE/lumen" && tar -xf -)
say "$(wc -l < "$STAGE/modules.txt") packages"

# 4. Node: this machine's binary (stripped), plus its shared libraries and loader in case the GPU
#    machine's system libraries are older (gpu-check.sh then starts node through the loader).
NODE_BIN="$(readlink -f "$(command -v node)")"
cp "$NODE_BIN" "$STAGE/node/bin/node"
strip --strip-all "$STAGE/node/bin/node" 2>/dev/null || say "warning: strip failed; node stays unstripped"
ldd "$NODE_BIN" | awk '/=>/ && $3 ~ /^\// {print $3} /^[ \t]*\/.*ld-linux/ {print $1}' | while read -r lib; do
  cp -L "$lib" "$STAGE/node/lib/"
done
[ -f "$STAGE/node/lib/ld-linux-x86-64.so.2" ] || cp -L /lib64/ld-linux-x86-64.so.2 "$STAGE/node/lib/" 2>/dev/null || true
"$STAGE/node/bin/node" --version > /dev/null
say "node $("$STAGE/node/bin/node" --version) with $(ls "$STAGE/node/lib" | wc -l) libraries"

# 5. The probe.
nvcc -O3 -std=c++17 -gencode "arch=compute_${ARCH%%-*},code=sm_${ARCH%%-*}" \
  -o "$STAGE/bin/gpu-probe" "$REPO/native/backend/cuda/probe/gpu_probe.cu"

# 6. Sizes, payload, bootstrap, manifest.
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
sz() { du -sb "$1" | cut -f1; }
S_NODE=$(sz "$STAGE/node/bin/node"); S_LIBS=$(sz "$STAGE/node/lib"); S_ADDON=$(sz "$STAGE/lumen/build")
S_DIST=$(sz "$STAGE/lumen/dist"); S_MODS=$(sz "$STAGE/lumen/node_modules"); S_PROBE=$(sz "$STAGE/bin")
S_ALL=$(( S_NODE + S_LIBS + S_ADDON + S_DIST + S_MODS + S_PROBE ))
rm -f "$STAGE"/*.log "$STAGE/modules.txt"
rm -rf "$DEST"
mkdir -p "$DEST"
say "compressing (xz)"
tar -C "$STAGE" -cf - lumen node bin | xz -T0 -6 > "$DEST/payload.tar.xz"
cat > "$DEST/run-gpu-check.sh" <<'EOF_RUN'
#!/usr/bin/env bash
# Unpacks payload.tar.xz (next to this script) and runs the CUDA device check from it.
# Arguments go to gpu-check.sh (--dry-run, --phases ...); GPU_CHECK_OUT sets the results folder.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="${GPU_CHECK_WORK:-/tmp/lumen-gpu-check}"
rm -rf "$WORK" && mkdir -p "$WORK"
if ! tar -C "$WORK" -xJf "$HERE/payload.tar.xz" 2>/dev/null; then
  python3 -c "import sys, tarfile; tarfile.open(sys.argv[1], 'r:xz').extractall(sys.argv[2])" "$HERE/payload.tar.xz" "$WORK"
fi
exec bash "$WORK/lumen/scripts/gpu-check.sh" "$@"
EOF_RUN
chmod +x "$DEST/run-gpu-check.sh"
S_PACK=$(sz "$DEST")
{
  echo "lumen-bench GPU check pack"
  echo "commit: $(git -C "$REPO" rev-parse HEAD 2>/dev/null)$(git -C "$REPO" diff --quiet 2>/dev/null || echo ' (plus uncommitted changes)')"
  echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm), node $(node --version), $(nvcc --version | tail -1)"
  echo "addon CUDA architectures: $ARCH (addon build ${ADDON_S}s)"
  echo "uncompressed: node $(mib "$S_NODE") MiB, its libraries $(mib "$S_LIBS") MiB, addon $(mib "$S_ADDON") MiB,"
  echo "  dist $(mib "$S_DIST") MiB, node_modules $(mib "$S_MODS") MiB, gpu-probe $(mib "$S_PROBE") MiB: total $(mib "$S_ALL") MiB"
  echo "pack folder (compressed payload + bootstrap): $(mib "$S_PACK") MiB (limit ${MAX_MIB} MiB)"
  echo "run on the GPU machine: bash .gpu-pack/run-gpu-check.sh   (results: \$GPU_CHECK_OUT, default ./gpu-check-out)"
} > "$DEST/MANIFEST.txt"
cat "$DEST/MANIFEST.txt" >&2
if [ "$S_PACK" -gt $(( MAX_MIB * 1048576 )) ]; then
  say "FATAL: the pack is over ${MAX_MIB} MiB"
  exit 1
fi

if [ "$DRY" = 1 ]; then
  say "dry run: unpacking and running the check on the CPU"
  W="$(mktemp -d /tmp/lumen-gpu-pack-dry.XXXXXX)"
  GPU_CHECK_WORK="$W/work" GPU_CHECK_OUT="$W/out" bash "$DEST/run-gpu-check.sh" --dry-run --phases "${DRY_PHASES:-probe,correctness,graphs,perf,quant-perf}" || {
    say "dry run FAILED (logs in $W/out)"; exit 1; }
  say "dry run passed (logs in $W/out)"
fi
