# Sourced by scripts/gpu-check.sh and scripts/gpu-decode-profile.sh (not run on its own): finds a
# node that runs on this machine and puts its command line in the array NODE.
#   lumen_find_node PACK   PACK: the folder around the lumen tree (node/bin/node, node/lib/)
# Order: $LUMEN_NODE; the packed node, started directly, else through the packed loader and
# libraries (a GPU machine whose C/C++ libraries are older than the packing machine's); node on
# PATH. NODE is left empty when none of them starts.
lumen_find_node() {
  local pack=$1
  NODE=()
  if [ -n "${LUMEN_NODE:-}" ]; then
    NODE=("$LUMEN_NODE")
  elif [ -x "$pack/node/bin/node" ]; then
    if "$pack/node/bin/node" --version >/dev/null 2>&1; then
      NODE=("$pack/node/bin/node")
    elif [ -x "$pack/node/lib/ld-linux-x86-64.so.2" ]; then
      NODE=("$pack/node/lib/ld-linux-x86-64.so.2" --library-path "$pack/node/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$pack/node/bin/node")
    fi
  elif command -v node >/dev/null 2>&1; then
    NODE=("$(command -v node)")
  fi
  if [ ${#NODE[@]} -gt 0 ] && ! "${NODE[@]}" --version >/dev/null 2>&1; then NODE=(); fi
  return 0
}
