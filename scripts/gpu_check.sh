#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU and no Rust toolchain.
#
# Build on any machine (same OS/glibc family):
#   cargo build --release && cargo test --release --no-run
# and carry target/release/ctxprune plus the integration-test binary that prints
# (target/release/deps/integration-*). Then, on the GPU host:
#   scripts/gpu_check.sh [path/to/ctxprune] [path/to/integration-test-binary]
#
# 1. runs every backend test body (tests/backend.rs) with CTXPRUNE_REQUIRE_GPU=1, so a
#    missing or unusable GPU fails instead of skipping;
# 2. runs `ctxprune gpu-check`: every primitive and selector against the CPU on fresh
#    random inputs (outputs poisoned with NaN first), then the timing table.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-target/release/ctxprune}"
TESTBIN="${2:-}"
if [ -z "$TESTBIN" ]; then
  TESTBIN="$(ls -t target/release/deps/integration-* 2>/dev/null | grep -v '\.d$' | head -n 1 || true)"
fi
# The CUDA libraries (NVRTC, cuBLAS) where CUDA installs put them; the crate also looks
# under $CUDA_HOME and /usr/local/cuda itself.
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
exit "$status"
