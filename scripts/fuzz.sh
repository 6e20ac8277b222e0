#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets/) for SECONDS_PER_TARGET seconds each
# (default 60), one per core at a time, with libFuzzer via cargo-fuzz, on the stable
# toolchain.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#   scripts/fuzz.sh --build-only      (install cargo-fuzz and build every target, then stop)
#
# Installs the pinned cargo-fuzz into TARGET/tools if it is missing (TARGET:
# $CARGO_TARGET_DIR, else target/; the targets build in TARGET/fuzz), builds every target
# once (the dev profile, below; no sanitizer: `-s none` needs no nightly and no
# RUSTC_BOOTSTRAP; the crate forbids unsafe code, so ASan would find little), then fuzzes
# each target on a copy of its committed seed corpus (fuzz/corpus/TARGET), so the repo
# does not grow. A crash, a hang (one input running over 10 s), or memory over 2 GiB
# (RSS, or a single allocation) fails the run: the script goes on with the other targets,
# then exits 1 and prints each artifact's path (under fuzz/artifacts/TARGET/).
#
# Environment:
#   FUZZ_WORK    where the corpus copies and logs go (default: a temporary directory,
#                removed at exit); set it to keep the grown corpora, e.g. to minimise
#                them into fuzz/corpus with `cargo fuzz cmin`.
#   FUZZ_ARGS    extra libFuzzer flags for every target (e.g. "-max_len=65536").
#   FUZZ_JOBS    targets fuzzed at once (default: the number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

CARGO_FUZZ_VERSION=0.13.2
seconds=${1:-60}
shift || true
build_only=0
if [ "$seconds" = "--build-only" ]; then
  # Install cargo-fuzz and build the targets, then stop (CI builds in the background while
  # other steps run; the run later finds the build up to date).
  build_only=1
  seconds=1
fi
if ! [[ $seconds =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET | --build-only] [TARGET...]" >&2
  exit 2
fi

all_targets=(npy safetensors jsonl messages_openai messages_anthropic config_json oracle_response chat_prompt qk_tensors segmentation mass_json probe_labels probe_trajectory run_log stages_toml decisions request_body json_reader)
if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=("${all_targets[@]}")
fi

tgt=${CARGO_TARGET_DIR:-$root/target}
tools=$tgt/tools
if ! "$tools/bin/cargo-fuzz" --version 2>/dev/null | grep -qx "cargo-fuzz $CARGO_FUZZ_VERSION"; then
  echo "== installing cargo-fuzz $CARGO_FUZZ_VERSION into $tools"
  cargo install --locked --root "$tools" "cargo-fuzz@$CARGO_FUZZ_VERSION"
fi
export PATH=$tools/bin:$PATH

host=$(rustc -vV | sed -n 's/^host: //p')
echo "== building the fuzz targets ($(rustc --version), $host)"
start=$(date +%s)
# The dev profile (fuzz/Cargo.toml: line tables; debug assertions and overflow checks on):
# a shorter cold build than release on 2 cores; in a run bounded in time the build
# matters more than the executions per second.
(cd fuzz && CARGO_TARGET_DIR="$tgt/fuzz" cargo fuzz build --dev --sanitizer none --target "$host")
echo "== built in $(($(date +%s) - start)) s"
if [ "$build_only" -eq 1 ]; then
  exit 0
fi
bin=$tgt/fuzz/$host/debug

if [ -n "${FUZZ_WORK:-}" ]; then
  work=$FUZZ_WORK
  mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi

# One target's run: its summary line into $work/$t.line, its failure (if any) into
# $work/$t.failed.
fuzz_one() {
  local t=$1 corpus=$work/corpus/$1 log=$work/$1.log rc=0 execs rate entries artifact status
  mkdir -p "$corpus" "fuzz/artifacts/$t"
  cp -n fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  # shellcheck disable=SC2086
  "$bin/$t" "$corpus" \
    -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="$root/fuzz/artifacts/$t/" -print_final_stats=1 \
    ${FUZZ_ARGS:-} >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  entries=$(find "$corpus" -type f | wc -l)
  if [ "$rc" -ne 0 ]; then
    artifact=$(sed -n 's/.*Test unit written to //p' "$log" | tail -1)
    grep -E "panicked at|ERROR: libFuzzer|SUMMARY" "$log" | head -5 >&2 || true
    echo "FAILED: $t (exit $rc); artifact: ${artifact:-none, see $log}" >&2
    echo "  reproduce: $bin/$t ${artifact:-ARTIFACT}" >&2
    echo "$t: ${artifact:-$log}" >"$work/$t.failed"
    status=FAILED
  else
    status=ok
  fi
  printf '%-20s %6s s %12s execs %8s exec/s %6s corpus  %s\n' \
    "$t" "$seconds" "${execs:-?}" "${rate:-?}" "$entries" "$status" >"$work/$t.line"
}

# FUZZ_JOBS targets at a time (default: one per core; each libFuzzer process is
# single-threaded), each for its full SECONDS_PER_TARGET.
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
if ! [[ $jobs =~ ^[0-9]+$ ]] || [ "$jobs" -lt 1 ]; then
  echo "FUZZ_JOBS must be a positive integer, got '$jobs'" >&2
  exit 2
fi
running=0
for t in "${targets[@]}"; do
  if [ ! -x "$bin/$t" ]; then
    echo "unknown fuzz target '$t' (known: ${all_targets[*]})" >&2
    exit 2
  fi
done
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  echo "== $t: ${seconds} s (log: $work/$t.log)"
  fuzz_one "$t" &
  running=$((running + 1))
done
wait
failed=()
summary=()
for t in "${targets[@]}"; do
  summary+=("$(cat "$work/$t.line")")
  if [ -f "$work/$t.failed" ]; then
    failed+=("$(cat "$work/$t.failed")")
  fi
done

echo "== fuzzing summary (${seconds} s per target)"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "== ${#failed[@]} target(s) failed; artifacts:" >&2
  printf '  %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "fuzzing: ${#targets[@]} targets, 0 crashes"
