#!/usr/bin/env bash
# Proves every CUDA kernel compiles, on a machine with no GPU: installs NVRTC and ptxas
# from PyPI (CUDA 13 wheels) into a venv, compiles kernels/*.cu to PTX and to CUBIN for
# sm_80 and sm_90 through the crate's own NVRTC path (`ctxprune kernels`, which fails on
# any error or warning, or when the compiled kernels and kernels/kernels.tbl disagree),
# then assembles each PTX with `ptxas -v` (failing on any ptxas warning) and prints the
# register / spill report, also kept in TARGET/ptx/ptxas.txt (TARGET: $CARGO_TARGET_DIR,
# else target/).
#
# Usage: scripts/ptx_check.sh [path/to/ctxprune]   (default: TARGET/debug/ctxprune)
#        scripts/ptx_check.sh --setup   (only install the wheels; CI runs it in the background)
set -euo pipefail
cd "$(dirname "$0")/.."
TGT="${CARGO_TARGET_DIR:-target}"
BIN="${1:-$TGT/debug/ctxprune}"
VENV="${CTXPRUNE_NV_VENV:-$TGT/nv-venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install -q --disable-pip-version-check "nvidia-cuda-nvrtc>=13,<14" "nvidia-cuda-nvcc>=13,<14"
if [ "$BIN" = "--setup" ]; then
  exit 0
fi
NV="$("$VENV/bin/python" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')"
OUT=$TGT/ptx
rm -rf "$OUT" && mkdir -p "$OUT"
LD_LIBRARY_PATH="$NV/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$BIN" kernels --arch sm_80,sm_90 --out "$OUT"
: > "$OUT/ptxas.txt"
status=0
for ptx in "$OUT"/*.ptx; do
  arch="${ptx%.ptx}"; arch="${arch##*.}"
  if ! "$NV/bin/ptxas" -arch="$arch" -v "$ptx" -o /dev/null >"$OUT/one.txt" 2>&1; then
    status=1
  fi
  if grep -qi "warning" "$OUT/one.txt"; then
    status=1
  fi
  { echo "## $(basename "$ptx")"; cat "$OUT/one.txt"; } >> "$OUT/ptxas.txt"
done
rm -f "$OUT/one.txt"
# One line per kernel: name, architecture, registers, spills.
awk '/Compiling entry function/ { gsub(/\x27/, "", $7); gsub(/\x27/, "", $9); name=$7; arch=$9 }
     /spill stores/ { spill=$5 " B spill stores, " $9 " B spill loads" }
     /Used [0-9]+ registers/ { printf "%-22s %-6s %3s registers  %s\n", name, arch, $5, spill }' "$OUT/ptxas.txt"
if [ "$status" -ne 0 ]; then
  echo "ptxas reported an error or a warning; see $OUT/ptxas.txt" >&2
  exit 1
fi
echo "every kernel compiled to PTX and to $(ls "$OUT"/*.cubin | wc -l) CUBINs for sm_80 and sm_90 (report: $OUT/ptxas.txt)"
