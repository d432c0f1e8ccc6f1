#!/usr/bin/env bash
# The CUDA backend's device check (issue 6): run on a GPU machine that has no Node.js and no
# network, from the folder scripts/pack-gpu-check.sh prepared (it brings node, the addon built for
# sm_90, dist/ and the runtime node_modules). Finishes within 8 minutes:
#   probe        copy bandwidth, streaming read bandwidth, mma.sync bf16 rate (gpu-probe); the
#                vendor GEMM rate through python3 + torch when the machine has them
#   correctness  (a) CUDA against CPU logits, small synthetic f32 and bf16 models and Q8_0 / Q4_K_M
#                GGUF files converted at check time, prompts of 1, 65 and 150 tokens, paged, 8
#                sequences batched
#   graphs       (b) greedy tokens identical with CUDA graphs on and off (tiny and synthetic:0.8b)
#   perf         (c) sweep cells 128:128 and 2048:128 x concurrency 1, 8 on synthetic:4b and 0.8b
#                (engine API), then (d) decode tok/s at c=1 against the bandwidth roofline and
#                prefill tok/s against the measured bf16 matrix rate, and batching efficiency at c=8
#   cli          the same sweep through `bench` (--model-path synthetic:4b), when time is left
# Results: $GPU_CHECK_OUT (default ./gpu-check-out): one JSON file per phase, summary.md, logs.
# The phases that drive the engine run in scripts/gpu-check-driver.ts (from dist/, as tsc built it).
# Exit status: 0 when (a) and (b) pass, 1 otherwise (performance is reported, not gated).
#
# Usage: gpu-check.sh [--dry-run] [--phases probe,correctness,graphs,perf,quant-perf,cli]
#   --dry-run   no GPU needed: the "device" side runs on the CPU backend with small models, to
#               check the script, the pack and the report on a CPU machine.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"   # the lumen tree (package.json, dist/, build/)
PACK="$(cd "$ROOT/.." && pwd)"                              # the pack around it (node/, bin/), if any
OUTDIR="${GPU_CHECK_OUT:-$PWD/gpu-check-out}"
DRY=0
PHASES="probe,correctness,graphs,perf,quant-perf,cli"
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --phases) PHASES="$2"; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$OUTDIR"
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
log() { echo "[gpu-check $(elapsed)s] $*" | tee -a "$OUTDIR/gpu-check.log" >&2; }
has_phase() { case ",$PHASES," in *",$1,"*) return 0 ;; esac; return 1; }

# ---- node: LUMEN_NODE, the packed binary (directly, else through the packed loader), or PATH
# (scripts/gpu-node.sh, which gpu-decode-profile.sh shares).
. "$ROOT/scripts/gpu-node.sh"
lumen_find_node "$PACK"
if [ ${#NODE[@]} -eq 0 ]; then
  log "FATAL: no runnable node (looked at LUMEN_NODE, $PACK/node/bin/node, PATH)"
  exit 1
fi
log "node $("${NODE[@]}" --version) from ${NODE[*]}; lumen tree $ROOT; results in $OUTDIR"
[ -f "$ROOT/build/Release/lumen_engine.node" ] || { log "FATAL: $ROOT/build/Release/lumen_engine.node is missing"; exit 1; }
[ -f "$ROOT/dist/src/engine/engine.js" ] || { log "FATAL: $ROOT/dist is missing (tsc output)"; exit 1; }

# ---- machine facts
{
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1
  uname -a
  nproc
} > "$OUTDIR/machine.txt" 2>&1
INFO=$("${NODE[@]}" -e "const a=require(process.argv[1]);const i=a.cpuInfo();console.log(JSON.stringify({cudaBuilt:i.cudaBuilt,isa:i.isa,devices:typeof a.cudaDeviceCount==='function'?a.cudaDeviceCount():-1}))" "$ROOT/build/Release/lumen_engine.node" 2>&1)
log "addon: $INFO"
echo "$INFO" > "$OUTDIR/addon.json"
if [ "$DRY" = 0 ] && ! echo "$INFO" | grep -q '"devices":[1-9]'; then
  log "FATAL: the addon sees no CUDA device (or was built without CUDA): $INFO"
  log "hint: --dry-run checks the script without a GPU"
  exit 1
fi

# ---- the driver (engine API through dist/): scripts/gpu-check-driver.ts, compiled by tsc
DRIVER="$ROOT/dist/scripts/gpu-check-driver.js"
[ -f "$DRIVER" ] || { log "FATAL: $DRIVER is missing (tsc output)"; exit 1; }

# Phase limits fit the 8-minute budget on a GPU machine; a dry run on a small CPU machine is
# slower (CPU engines on both sides), so its limits stretch (GPU_CHECK_LIMIT_SCALE).
SCALE="${GPU_CHECK_LIMIT_SCALE:-$([ "$DRY" = 1 ] && echo 8 || echo 1)}"
run_phase() {  # name timeout_s command...
  local name=$1 limit=$(( $2 * SCALE ))
  shift 2
  log "phase $name (limit ${limit}s)"
  timeout --kill-after=10 "$limit" "$@" > "$OUTDIR/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 124 ] && log "phase $name: TIMED OUT after ${limit}s"
  log "phase $name: exit $rc"
  return $rc
}
export CHECK_OUT="$OUTDIR" CHECK_DRY="$DRY"
STATUS_A=skipped STATUS_B=skipped

# ---- probe
if has_phase probe; then
  if [ "$DRY" = 1 ]; then
    echo '{"name":"dry run","copy_gbps":100,"read_gbps":100,"mma_bf16_tflops":1}' > "$OUTDIR/probe.json"
  elif [ -x "$PACK/bin/gpu-probe" ]; then
    run_phase probe 60 "$PACK/bin/gpu-probe" && cp "$OUTDIR/probe.log" "$OUTDIR/probe.json"
  else
    log "no gpu-probe binary at $PACK/bin/gpu-probe: roofline ratios will be blank"
  fi
  if [ "$DRY" = 0 ] && command -v python3 >/dev/null 2>&1; then
    run_phase torch 90 python3 - <<'EOF_TORCH'
import json, time
try:
    import torch
except Exception as e:
    print(json.dumps({"error": str(e)})); raise SystemExit(0)
n = 8192
a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda"); b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
for _ in range(3): a @ b
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(10): a @ b
torch.cuda.synchronize(); dt = time.perf_counter() - t
print(json.dumps({"torch_bf16_tflops": 2 * n ** 3 * 10 / dt / 1e12, "torch": torch.__version__}))
EOF_TORCH
    grep -q torch_bf16_tflops "$OUTDIR/torch.log" 2>/dev/null && tail -1 "$OUTDIR/torch.log" > "$OUTDIR/torch.json"
  fi
  [ -f "$OUTDIR/probe.json" ] && log "probe: $(cat "$OUTDIR/probe.json")"
  [ -f "$OUTDIR/torch.json" ] && log "torch: $(cat "$OUTDIR/torch.json")"
fi

# ---- (a) and (b)
if has_phase correctness; then
  if run_phase correctness 210 "${NODE[@]}" "$DRIVER" correctness; then STATUS_A=PASS; else STATUS_A=FAIL; fi
fi
if has_phase graphs; then
  if run_phase graphs 100 "${NODE[@]}" "$DRIVER" graphs; then STATUS_B=PASS; else STATUS_B=FAIL; fi
fi

# ---- (c) and (d) through the engine API, then the CLI sweep if time is left
if has_phase perf; then
  run_phase perf 200 "${NODE[@]}" "$DRIVER" perf || true
fi
if has_phase quant-perf; then
  LEFT=$(( 420 - $(elapsed) ))
  if [ "$DRY" = 1 ] || [ $LEFT -gt 120 ]; then
    run_phase quant-perf "$([ "$DRY" = 1 ] && echo 150 || echo "$LEFT")" "${NODE[@]}" "$DRIVER" quant-perf || log "quant-perf failed (see quant-perf.log)"
  else
    log "quant-perf skipped: ${LEFT}s left"
  fi
fi
if has_phase cli && [ "$DRY" = 0 ]; then
  LEFT=$(( 450 - $(elapsed) ))
  if [ $LEFT -gt 60 ]; then
    run_phase cli "$LEFT" "${NODE[@]}" "$ROOT/bin/bench.js" --model-path synthetic:4b --device cuda \
      --cells 128:128,2048:128 --concurrency 1,8 --warmup 1 --iters 1 --max-seq 2560 --prefill-chunk 2048 \
      --format md --output "$OUTDIR/cli-4b" -v || log "cli sweep failed (see cli.log); the engine-API sweep above stands"
  else
    log "cli sweep skipped: ${LEFT}s left"
  fi
fi

# ---- summary
"${NODE[@]}" "$DRIVER" summary "$STATUS_A" "$STATUS_B" "$(elapsed)" > "$OUTDIR/summary.md"
cat "$OUTDIR/summary.md" >&2
log "done: (a) $STATUS_A, (b) $STATUS_B"
[ "$STATUS_A" != FAIL ] && [ "$STATUS_B" != FAIL ]
