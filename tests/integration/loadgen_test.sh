#!/usr/bin/env bash
# bench/loadgen against the real `strata serve` on a loopback port: a closed
# loop, an open loop and a Mooncake-format trace replay must finish with zero
# errors and write the JSON fields; requests to a stopped server must be
# counted as errors, not crash the tool; the server must exit 0 on SIGTERM.
# Needs no ../shared: the model is made here with `strata mkmodel`.
# Usage (ctest runs it from the repository root): loadgen_test.sh STRATA LOADGEN
set -u
STRATA="$1"
LOADGEN="$2"
if [ ! -x "$LOADGEN" ]; then
  echo "skip: $LOADGEN is not built (bench/ is only built where Google Benchmark is installed)"
  exit 0
fi
if ! command -v curl >/dev/null; then
  echo "skip: curl is not installed"
  exit 0
fi

tmp=$(mktemp -d)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then kill -KILL "$server_pid"; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail=0
bad() {
  echo "FAIL: $*"
  fail=1
}

# json_get FILE EXPR: prints a value of the JSON file (jq, else python3).
json_get() {
  if command -v jq >/dev/null; then
    jq -r "$2" "$1"
  else
    python3 -c 'import json, re, sys
d = json.load(open(sys.argv[1]))
try:
    for key, idx in re.findall(r"([A-Za-z_][A-Za-z_0-9]*)|\[(\d+)\]", sys.argv[2]):
        d = d[key] if key else d[int(idx)]
except (KeyError, IndexError, TypeError):
    d = None
print("null" if d is None else (str(d).lower() if isinstance(d, bool) else d))' "$1" "$2"
  fi
}

if ! "$STRATA" mkmodel --dims n_embd=64,n_layers=2,n_heads=4,n_ff=128 --type f32 \
    -o "$tmp/m.gguf" >"$tmp/mkmodel.log" 2>&1; then
  echo "FAIL: strata mkmodel"
  cat "$tmp/mkmodel.log"
  exit 1
fi

# free_port (a start that loses the race for its port is retried).
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"

port=""
for attempt in 1 2 3 4 5; do
  port=$(free_port) || { echo "FAIL: no free port found"; exit 1; }
  "$STRATA" serve -m "$tmp/m.gguf" --port "$port" -t 2 --parallel 4 >"$tmp/server.log" 2>&1 &
  server_pid=$!
  ready=0
  for _ in $(seq 1 300); do  # up to ~30 s on a busy machine
    if ! kill -0 "$server_pid" 2>/dev/null; then break; fi
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = "200" ]; then
      ready=1
      break
    fi
    sleep 0.1
  done
  if [ "$ready" = 1 ]; then break; fi
  echo "note: server on port $port did not become ready (attempt $attempt)"
  tail -n 5 "$tmp/server.log"
  kill -KILL "$server_pid" 2>/dev/null
  wait "$server_pid" 2>/dev/null
  server_pid=""
done
if [ -z "$server_pid" ]; then
  echo "FAIL: strata serve never answered /health 200"
  exit 1
fi
url="http://127.0.0.1:$port"
echo "ok: strata serve ready at $url"

# run NAME ARGS...: runs loadgen, wants exit 0, zero failures, ok == EXPECTED_OK.
run() {
  local name="$1" expected_ok="$2"
  shift 2
  local out="$tmp/$name.json" rc
  "$LOADGEN" --url "$url" --timeout 60 --quiet --fail-on-error --json "$out" "$@" \
    >"$tmp/$name.txt" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ]; then
    bad "$name: loadgen exited $rc"
    cat "$tmp/$name.txt"
    return
  fi
  for field in .summary.ok .summary.failed .summary.duration_s .summary.request_rate_per_s \
      .summary.output_token_rate_per_s .summary.ttft_ms.p50 .summary.ttft_ms.p95 \
      .summary.ttft_ms.p99 .summary.tpot_ms.p50 .summary.e2e_ms.p99 .config.mode \
      '.samples[0].ttft_ms' '.samples[0].prompt_tokens' '.samples[0].completion_tokens'; do
    if [ "$(json_get "$out" "$field")" = "null" ]; then bad "$name: $field is missing or null"; fi
  done
  local ok failed
  ok=$(json_get "$out" .summary.ok)
  failed=$(json_get "$out" .summary.failed)
  if [ "$ok" != "$expected_ok" ] || [ "$failed" != "0" ]; then
    bad "$name: ok=$ok failed=$failed (want $expected_ok and 0)"
    cat "$tmp/$name.txt"
  else
    echo "ok: $name: $ok requests, 0 errors"
  fi
}

run closed 20 --requests 20 --concurrency 4 --prompt-tokens 32 --max-tokens 16 \
  --system-prompt-tokens 16 --ignore-eos
run open 10 --rate 20 --requests 10 --prompt-tokens 16 --max-tokens 8 --endpoint completions
cat >"$tmp/trace.jsonl" <<'EOF'
{"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [0, 1]}
{"timestamp": 50, "input_length": 900, "output_length": 9, "hash_ids": [0, 1]}
{"timestamp": 120, "input_length": 600, "output_length": 3, "hash_ids": [0, 2]}
{"timestamp": 130, "input_length": 300, "output_length": 4, "hash_ids": [3]}
EOF
run trace 4 --trace "$tmp/trace.jsonl" --trace-format mooncake --block-scale 0.05 \
  --max-output-tokens 8

# SIGTERM: the server finishes and exits 0.
kill -TERM "$server_pid"
wait "$server_pid"
rc=$?
server_pid=""
if [ "$rc" -ne 0 ]; then
  bad "strata serve exited $rc on SIGTERM (want 0)"
  tail -n 5 "$tmp/server.log"
else
  echo "ok: strata serve exited 0 on SIGTERM"
fi

# Nobody listening now: every request is a counted error, the tool exits normally.
"$LOADGEN" --url "$url" --model m --requests 3 --concurrency 2 --timeout 5 --quiet \
  --json "$tmp/down.json" >"$tmp/down.txt" 2>&1
rc=$?
if [ "$rc" -ne 0 ]; then
  bad "loadgen against a stopped server exited $rc (want 0)"
  cat "$tmp/down.txt"
elif [ "$(json_get "$tmp/down.json" .summary.failed)" != "3" ] ||
     [ "$(json_get "$tmp/down.json" .summary.errors.connect.count)" != "3" ]; then
  bad "loadgen against a stopped server did not count 3 connect errors"
  cat "$tmp/down.txt"
else
  echo "ok: a stopped server gives 3 counted connect errors"
fi

if [ "$fail" -ne 0 ]; then
  echo "--- server log (tail)"
  tail -n 20 "$tmp/server.log"
fi
exit "$fail"
