#!/usr/bin/env bash
# Where a CUDA decode step's time goes, on a GPU machine, from the pack that
# scripts/pack-gpu-check.sh made (.gpu-pack/, built from this tree: it needs batch-bench's
# --in-memory). The synthetic 0.8B bf16 shape, its weights generated in the engine (nothing
# written to disk), through scripts/batch-bench; phases, most valuable first:
#   ncu      Nsight Compute: each kernel's GPU time over a window of eager decode steps (caches
#            not flushed between kernels, clocks left alone); ncu-summary.txt: per decode step,
#            by kernel, and the sum of kernel time a step
#   nsys     Nsight Systems, graphs on, c=1, kernels traced as graph nodes; nsys-summary.txt: per
#            decode step the wall time against the kernels' time and the GPU's busy time, the
#            host API calls and copies, GPU time by kernel
#   graphs   batch-bench decode c=1 and c=8, graphs on (the step time the two above explain)
#   eager    the same with --no-cuda-graphs
#   ops      the per-op profile at c=1 (each op timed between stream syncs: launch latency inside)
# The profilers are skipped, with a line in profile.log, when the machine has none.
# Results: $PROFILE_OUT (default ./gpu-profile-out): one .txt per phase, the summaries, profile.log.
# Usage: bash scripts/gpu-decode-profile.sh [--budget SECONDS] [--plan]
#   --budget  the whole run, default 300; phases past it are cut short or skipped
#   --plan    print the phases and their limits, run nothing
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${PROFILE_OUT:-$PWD/gpu-profile-out}"
WORK="${PROFILE_WORK:-/tmp/lumen-gpu-profile}"
BUDGET=300
PLAN=0
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) BUDGET="$2"; shift ;;
    --plan) PLAN=1 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "gpu-decode-profile: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
case "$BUDGET" in ''|*[!0-9]*) echo "gpu-decode-profile: --budget takes whole seconds" >&2; exit 2 ;; esac

# Nominal limits (seconds); they add up to the default budget, so with it every phase gets its
# whole limit. Each is also cut to what is left of the budget.
L_UNPACK=40 L_NCU=100 L_NCU_IMPORT=15 L_NSYS=50 L_NSYS_EXPORT=25 L_GRAPHS=30 L_EAGER=25 L_OPS=15
PLAN_TXT="unpack $L_UNPACK, ncu $L_NCU + import $L_NCU_IMPORT, nsys $L_NSYS + export $L_NSYS_EXPORT, graphs $L_GRAPHS, eager $L_EAGER, ops $L_OPS"
PLAN_SUM=$(( L_UNPACK + L_NCU + L_NCU_IMPORT + L_NSYS + L_NSYS_EXPORT + L_GRAPHS + L_EAGER + L_OPS ))
if [ "$PLAN" = 1 ]; then
  echo "phases (limits in s): $PLAN_TXT; sum $PLAN_SUM s; budget $BUDGET s"
  exit 0
fi

mkdir -p "$OUT"
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
log() { echo "[profile $(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/profile.log" >&2; }
log "budget ${BUDGET}s; phases (limits in s): $PLAN_TXT (sum ${PLAN_SUM}s)"

run() {  # name limit command...   (stdout and stderr to $OUT/name.txt)
  local name=$1 limit=$2 l
  shift 2
  l=$(left)
  [ "$l" -gt 10 ] || { log "$name skipped: ${l}s left"; return 1; }
  [ "$limit" -gt "$l" ] && limit=$l
  log "$name (limit ${limit}s)"
  timeout --kill-after=5 "$limit" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  [ $rc -eq 124 ] && log "$name: TIMED OUT after ${limit}s"
  log "$name: exit $rc"
  return $rc
}

# Unpack the pack. gpu-check.sh with no phase named checks node and the addon (that it sees a
# device) and writes an empty summary; nothing else.
run unpack "$L_UNPACK" env GPU_CHECK_WORK="$WORK" GPU_CHECK_OUT="$OUT/check" bash "$REPO/.gpu-pack/run-gpu-check.sh" --phases none \
  || log "the pack's check of node and the addon failed (see unpack.txt, check/gpu-check.log); going on"
# node as gpu-check.sh starts it (the packed binary, else through the packed loader and libraries).
. "$REPO/scripts/gpu-node.sh"
lumen_find_node "$WORK"
[ ${#NODE[@]} -gt 0 ] || { log "FATAL: no node runs from $WORK/node (see unpack.txt)"; exit 1; }
BBJS="$WORK/lumen/dist/scripts/batch-bench.js"
[ -f "$BBJS" ] || { log "FATAL: $BBJS is missing: the pack did not unpack (see unpack.txt)"; exit 1; }
grep -q -- "--in-memory" "$BBJS" || { log "FATAL: the pack's batch-bench has no --in-memory: repack from this tree (scripts/pack-gpu-check.sh)"; exit 1; }
cd "$WORK/lumen" || exit 1
BB=("${NODE[@]}" "$BBJS" --device cuda --preset 0.8b --in-memory --prompt 128)
SUMMARY=(python3 "$REPO/scripts/gpu-profile-summary.py")
command -v python3 >/dev/null 2>&1 || log "no python3: the summaries will be missing (the raw files stay)"

find_tool() {  # name: on PATH, else the usual install folders
  command -v "$1" 2>/dev/null || ls /usr/local/cuda/bin/"$1" /opt/nvidia/nsight-*/*/"$1" /opt/nvidia/nsight-*/"$1" \
    /usr/local/cuda/nsight-*/"$1" /usr/local/cuda/nsight-*/bin/"$1" 2>/dev/null | head -1
}

# ---- ncu: eager decode steps of c=1. The warm-up's c=1 request (128-token prefill, then 31 decode
# steps of ~205 launches each) runs from about the 300th launch on; launches 1500..2499 are about
# five steps, of which the summary keeps the whole ones (embedding kernel to embedding kernel).
NCU="$(find_tool ncu)"
if [ -n "$NCU" ]; then
  NCU_HELP="$("$NCU" --help 2>&1)"
  NCU_OPTS=(--clock-control none --metrics gpu__time_duration.sum --launch-skip 1500 --launch-count 1000 -f -o "$OUT/ncu")
  # Back-to-back kernels of a step find their inputs in L2; ncu flushes the caches before each
  # kernel unless told not to.
  if grep -q -- --cache-control <<< "$NCU_HELP"; then NCU_OPTS+=(--cache-control none); else log "this ncu has no --cache-control: caches are flushed between kernels"; fi
  # Stop the application once the window is profiled (the rest of the run is not needed).
  grep -q -- '--kill' <<< "$NCU_HELP" && NCU_OPTS+=(--kill yes)
  log "ncu: $NCU ($("$NCU" --version 2>&1 | tail -1))"
  run ncu "$L_NCU" "$NCU" "${NCU_OPTS[@]}" "${BB[@]}" --tokens 32 --concurrency 1 --rounds 1 --no-cuda-graphs
  if [ -f "$OUT/ncu.ncu-rep" ]; then
    # Demangled names (template arguments tell the GEMV and attention instantiations apart); the
    # summary strips return type, namespaces and parameters.
    if run ncu-import "$L_NCU_IMPORT" "$NCU" --import "$OUT/ncu.ncu-rep" --csv --page details --print-kernel-base demangled; then
      "${SUMMARY[@]}" ncu "$OUT/ncu-import.txt" > "$OUT/ncu-summary.txt" 2>&1 || log "ncu summary failed (see ncu-summary.txt)"
      log "ncu: $(grep -m1 'KERNEL TIME PER STEP' "$OUT/ncu-summary.txt" || echo 'no per-step figure')"
    fi
  else
    log "ncu wrote no report (see ncu.txt)"
  fi
else
  log "no ncu on this machine"
fi

# ---- nsys: graphs on, c=1 (a 64-token warm-up request and one measured one); kernels inside the
# graphs traced one by one.
NSYS="$(find_tool nsys)"
if [ -n "$NSYS" ]; then
  log "nsys: $NSYS ($("$NSYS" --version 2>&1 | tail -1))"
  if run nsys "$L_NSYS" "$NSYS" profile --trace=cuda --cuda-graph-trace=node --sample=none --cpuctxsw=none \
       --force-overwrite=true -o "$WORK/nsys" "${BB[@]}" --tokens 64 --concurrency 1 --rounds 1 \
     || [ -f "$WORK/nsys.nsys-rep" ]; then
    if run nsys-export "$L_NSYS_EXPORT" "$NSYS" export --type=sqlite --force-overwrite=true --output="$WORK/nsys.sqlite" "$WORK/nsys.nsys-rep"; then
      "${SUMMARY[@]}" nsys "$WORK/nsys.sqlite" > "$OUT/nsys-summary.txt" 2>&1 || log "nsys summary failed (see nsys-summary.txt)"
      grep -E 'a step|of it' "$OUT/nsys-summary.txt" | tr -s ' ' | while read -r line; do log "nsys: $line"; done
    fi
    # The report itself comes back when small enough to open in the GUI later.
    [ -f "$WORK/nsys.nsys-rep" ] && [ "$(stat -c %s "$WORK/nsys.nsys-rep")" -lt 30000000 ] && cp "$WORK/nsys.nsys-rep" "$OUT/"
  fi
else
  log "no nsys on this machine"
fi

# ---- step times (batch-bench prints the medians)
run graphs "$L_GRAPHS" "${BB[@]}" --tokens 64 --concurrency 1,8 --rounds 3
run eager "$L_EAGER" "${BB[@]}" --tokens 64 --concurrency 1,8 --rounds 3 --no-cuda-graphs
run ops "$L_OPS" "${BB[@]}" --tokens 64 --concurrency 1 --rounds 2 --profile
log "done in $(( $(date +%s) - T0 ))s"
