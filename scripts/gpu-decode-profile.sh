#!/usr/bin/env bash
# Where a CUDA decode step's time goes, on a GPU machine, from the pack that
# scripts/pack-gpu-check.sh made (.gpu-pack/): the synthetic 0.8B bf16 shape through
# scripts/batch-bench (decode c=1 and c=8 with graphs on, then off; the per-op profile, each op
# timed between stream syncs), then Nsight Compute's per-kernel GPU time over a window of eager
# decode steps, summed by kernel name. Results: $PROFILE_OUT (default ./gpu-profile-out).
# Usage: bash scripts/gpu-decode-profile.sh [--budget SECONDS]   (default 300: the whole run)
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${PROFILE_OUT:-$PWD/gpu-profile-out}"
BUDGET=300
[ "${1:-}" = --budget ] && BUDGET="$2"
WORK=/tmp/lumen-gpu-profile
mkdir -p "$OUT"
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
log() { echo "[profile $(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/profile.log" >&2; }

# Unpack the pack (its gpu-check.sh runs only the probe phase, which proves node and the addon).
GPU_CHECK_WORK="$WORK" GPU_CHECK_OUT="$OUT/check" bash "$REPO/.gpu-pack/run-gpu-check.sh" --phases probe > "$OUT/unpack.log" 2>&1 \
  || log "the pack's probe failed (see unpack.log); going on"
NODE="$WORK/node/bin/node"
[ -x "$NODE" ] && [ -f "$WORK/lumen/dist/scripts/batch-bench.js" ] || { log "FATAL: the pack did not unpack (see unpack.log)"; exit 1; }
cd "$WORK/lumen" || exit 1
BB=("$NODE" dist/scripts/batch-bench.js --device cuda --preset 0.8b --prompt 128)

run() {  # name limit args...
  local name=$1 limit=$2; shift 2
  [ "$(left)" -gt 20 ] || { log "$name skipped: $(left)s left"; return 0; }
  [ "$limit" -gt "$(left)" ] && limit=$(left)
  log "$name (limit ${limit}s)"
  timeout --kill-after=5 "$limit" "$@" > "$OUT/$name.txt" 2>&1
  log "$name: exit $?"
}
run graphs 90 "${BB[@]}" --tokens 64 --concurrency 1,8 --rounds 3
run eager 90 "${BB[@]}" --tokens 64 --concurrency 1,8 --rounds 3 --no-cuda-graphs
run ops 60 "${BB[@]}" --tokens 64 --concurrency 1 --rounds 2 --profile

NCU="$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)"
if [ -n "$NCU" ]; then
  # The warm-up's decode steps of c=1 (32 tokens each) run from about the 300th launch on; a window
  # of 1000 launches covers several whole steps.
  run ncu 150 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip 1500 --launch-count 1000 \
    "${BB[@]}" --tokens 32 --concurrency 1 --rounds 1 --no-cuda-graphs
  python3 - "$OUT/ncu.txt" > "$OUT/ncu-summary.txt" 2>&1 <<'EOF'
import csv, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head, body = rows[0], rows[1:]
ik, iv, iu = head.index('Kernel Name'), head.index('Metric Value'), head.index('Metric Unit')
scale = {'nsecond': 1e-3, 'usecond': 1.0, 'msecond': 1e3}
tot, n = collections.defaultdict(float), collections.Counter()
for r in body:
    name = r[ik].split('(')[0][:90]
    tot[name] += float(r[iv].replace(',', '')) * scale.get(r[iu], 1.0); n[name] += 1
all_us = sum(tot.values())
print(f'{len(body)} kernels, {all_us:.1f} us of GPU time in all')
for k, v in sorted(tot.items(), key=lambda kv: -kv[1]):
    print(f'{v:10.1f} us {100 * v / all_us:5.1f} % {n[k]:6d} x {v / n[k]:8.2f} us  {k}')
EOF
else
  log "no ncu on this machine"
fi
log "done"
