#!/usr/bin/env bash
# Property-based fuzzing of `ctxprune serve` from its own OpenAPI document (issue 13):
# starts the server on 127.0.0.1 (an ephemeral port, the CPU engine), runs schemathesis
# (pinned, installed into $CARGO_TARGET_DIR/api-fuzz, else target/api-fuzz) against GET /openapi.json, and fails on any
# 5xx, any response that breaks the document (status, content type, schema, headers), a
# crash, or a server that does not stop cleanly on SIGTERM.
#
#   scripts/api_fuzz.sh CTXPRUNE_BINARY [MAX_EXAMPLES=100] [SECONDS=600]
#   scripts/api_fuzz.sh --setup     (only install schemathesis; CI runs it in the background)
#
# The document gives types and required fields; value ranges and which options go
# together are checked by the server and answered 422, so schemathesis's two
# "acceptance" checks (positive_data_acceptance, negative_data_rejection) are left out.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:?usage: scripts/api_fuzz.sh CTXPRUNE_BINARY [MAX_EXAMPLES] [SECONDS] | --setup}
examples=${2:-100}
seconds=${3:-600}
SCHEMATHESIS_VERSION=4.32.5

venv=${CARGO_TARGET_DIR:-$PWD/target}/api-fuzz
if ! "$venv/bin/schemathesis" --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION"; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi
if [ "$bin" = "--setup" ]; then
  exit 0
fi

log=$(mktemp)
"$bin" serve --addr 127.0.0.1:0 --backend cpu --quiet --max-concurrent 64 2>"$log" &
server=$!
trap 'kill "$server" 2>/dev/null || true; rm -f "$log"' EXIT
addr=
for _ in $(seq 1 100); do
  addr=$(sed -n 's/.*"listening":"\([^"]*\)".*/\1/p' "$log" | head -1)
  [ -n "$addr" ] && break
  sleep 0.1
done
if [ -z "$addr" ]; then
  echo "the server did not start:" >&2
  cat "$log" >&2
  exit 1
fi
echo "== schemathesis $SCHEMATHESIS_VERSION against http://$addr/openapi.json ($examples examples per operation, at most $seconds s)"
rc=0
timeout "$seconds" "$venv/bin/schemathesis" run "http://$addr/openapi.json" \
  --checks all --exclude-checks positive_data_acceptance,negative_data_rejection \
  --max-examples "$examples" --seed 1 --workers 2 --request-timeout 30 || rc=$?
if ! kill -0 "$server" 2>/dev/null; then
  echo "the server died during the run:" >&2
  tail -5 "$log" >&2
  exit 1
fi
kill -TERM "$server"
if ! wait "$server"; then
  echo "the server did not stop cleanly on SIGTERM" >&2
  exit 1
fi
trap 'rm -f "$log"' EXIT
if [ "$rc" -ne 0 ]; then
  echo "schemathesis failed (exit $rc)" >&2
  exit "$rc"
fi
echo "api fuzzing: no 5xx, no crash, clean shutdown"
