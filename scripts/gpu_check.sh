#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU and no Rust toolchain.
#
# Build on any machine (same OS/glibc family), e.g. with ../shared/tools/gpu-carry.sh, or
#   cargo build --release && cargo test --release --no-run
# and carry target/release/ctxprune plus the integration-test binary that prints
# (target/release/deps/integration-*). Then, on the GPU host:
#   scripts/gpu_check.sh [path/to/ctxprune] [path/to/integration-test-binary]
#
# 1. runs every backend test body (tests/backend.rs) with CTXPRUNE_REQUIRE_GPU=1, so a
#    missing or unusable GPU fails instead of skipping;
# 2. runs `ctxprune gpu-check`: every device primitive, selector and rerank against the
#    CPU on fresh random inputs (outputs poisoned with NaN first), then the timing table;
# 3. runs `ctxprune select` and `ctxprune rerank` end to end with --backend cuda on a
#    seeded pool of 8,000 (coverage stays dense, so every method has its CUDA path) and
#    compares their picks and oracle calls with --backend cpu.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-target/release/ctxprune}"
TESTBIN="${2:-}"
if [ -z "$TESTBIN" ]; then
  TESTBIN="$(ls -t target/release/deps/integration-* 2>/dev/null | grep -v '\.d$' | head -n 1 || true)"
fi
# The CUDA libraries (NVRTC, cuBLAS) where CUDA installs put them; the CLI also passes
# $CUDA_HOME and $CUDA_PATH to the engine, which searches them and /usr/local/cuda.
export LD_LIBRARY_PATH="${CUDA_HOME:-/usr/local/cuda}/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CTXPRUNE_REQUIRE_GPU=1
status=0
if [ -n "$TESTBIN" ] && [ -x "$TESTBIN" ]; then
  echo "== backend test bodies on CUDA ($TESTBIN)"
  "$TESTBIN" backend:: --test-threads=1 || status=1
else
  echo "== no integration-test binary given or found: backend test bodies not run" >&2
  status=1
fi
echo "== ctxprune gpu-check"
"$BIN" gpu-check || status=1

echo "== ctxprune select and rerank end to end, --backend cuda against --backend cpu"
P="$(mktemp -d)"
trap 'rm -rf "$P"' EXIT
"$BIN" make-pool --n 8000 --d 384 --seed 3 --out "$P" >/dev/null
field() { grep -o "\"$1\":\[[^]]*\]" "$2" || echo "missing $1"; }
for m in mmr grn dpp centroid coverage; do
  for b in cpu cuda; do
    "$BIN" select --method "$m" --embeddings "$P/emb.npy" --query "$P/query.npy" \
      --costs "$P/costs.npy" --k 50 --token-budget 20000 --backend "$b" >"$P/$m.$b.json" 2>"$P/$m.$b.err" || status=1
  done
  if [ "$(field selected "$P/$m.cpu.json")" = "$(field selected "$P/$m.cuda.json")" ] && grep -q '"backend":"cuda"' "$P/$m.cuda.json"; then
    echo "  select $m: same picks on cuda ($(grep -o '"elapsed_ms":[0-9.]*' "$P/$m.cuda.json") vs cpu $(grep -o '"elapsed_ms":[0-9.]*' "$P/$m.cpu.json"))"
  else
    echo "  select $m: FAIL"; cat "$P/$m.cuda.err" "$P/$m.cuda.json"; status=1
  fi
done
for m in boundary-morph bagel; do
  for b in cpu cuda; do
    "$BIN" rerank --method "$m" --embeddings "$P/emb.npy" --query "$P/query.npy" \
      --oracle-scores "$P/scores.npy" --budget 100 --capacity 50 --backend "$b" >"$P/$m.$b.json" 2>"$P/$m.$b.err" || status=1
  done
  if [ "$(field scored "$P/$m.cpu.json")" = "$(field scored "$P/$m.cuda.json")" ] \
    && [ "$(field selected "$P/$m.cpu.json")" = "$(field selected "$P/$m.cuda.json")" ] \
    && grep -q '"backend":"cuda"' "$P/$m.cuda.json"; then
    echo "  rerank $m: same calls and top-k on cuda ($(grep -o '"elapsed_ms":[0-9.]*' "$P/$m.cuda.json") vs cpu $(grep -o '"elapsed_ms":[0-9.]*' "$P/$m.cpu.json"))"
  else
    echo "  rerank $m: FAIL"; cat "$P/$m.cuda.err" "$P/$m.cuda.json"; status=1
  fi
done
exit "$status"
