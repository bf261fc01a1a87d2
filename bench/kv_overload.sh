#!/usr/bin/env bash
# bench/kv_overload.sh — memory-aware admission against preemption on a KV
# pool too small for the load.
#
# Starts `strata serve` on a model with a small KV pool (KV_TOKENS) and
# PARALLEL sequences allowed at once, drives it with CLIENTS closed-loop
# clients (each request PROMPT tokens, MAX_TOKENS answer tokens with
# ignore_eos) for DURATION seconds, once with memory-aware admission off
# (--kv-pressure 0: admit whatever's prompt fits, preempt when answers
# fill the pool) and once on (--kv-pressure PRESSURE), RUNS times
# alternating, and prints per run: requests answered and failed, answer
# tokens per second, TTFT P50/P99, the engine's preemptions, the requests
# granted fewer tokens and the admissions that waited (from /metrics), the
# answer tokens cut, and the server's peak resident memory. Everything else
# about the two servers is the same. Per-run loadgen JSON, server logs and
# /metrics are kept under OUT.
#
# Usage:
#   bench/kv_overload.sh STRATA LOADGEN MODEL
# Settings (environment):
#   CLIENTS=16 PARALLEL=16 KV_TOKENS=2048 CTX=1024 PROMPT=64 MAX_TOKENS=256
#   DURATION=60 RUNS=3 THREADS=2 PRESSURE=0.25 MIN_GRANT=64 PORT=18433
#   OUT=/tmp/kv_overload
set -euo pipefail

if [[ $# -ne 3 ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  [[ "${1:-}" == -h || "${1:-}" == --help ]] && exit 0
  exit 2
fi
STRATA=$1 LOADGEN=$2 MODEL=$3
CLIENTS=${CLIENTS:-16} PARALLEL=${PARALLEL:-16} KV_TOKENS=${KV_TOKENS:-2048} CTX=${CTX:-1024}
PROMPT=${PROMPT:-64} MAX_TOKENS=${MAX_TOKENS:-256} DURATION=${DURATION:-60} RUNS=${RUNS:-3}
THREADS=${THREADS:-2} PRESSURE=${PRESSURE:-0.25} MIN_GRANT=${MIN_GRANT:-64}
PORT=${PORT:-18433} OUT=${OUT:-/tmp/kv_overload}
mkdir -p "$OUT"

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

metric() { awk -v m="$1" '$1 == m {print $2}' "$2" | head -n1; }

printf '%-4s %-5s %6s %6s %9s %9s %9s %11s %9s %9s %9s %9s\n' run admit ok failed "tok/s" \
  "p50 ms" "p99 ms" preemptions capped waits "cut tok" "peak MiB"
for run in $(seq 1 "$RUNS"); do
  for mode in off on; do
    tag="$OUT/run${run}-${mode}"
    pressure=0
    [[ $mode == on ]] && pressure=$PRESSURE
    "$STRATA" serve -m "$MODEL" --port "$PORT" -t "$THREADS" --parallel "$PARALLEL" \
      --queue 256 --ctx "$CTX" --kv-tokens "$KV_TOKENS" --kv-pressure "$pressure" \
      --kv-min-grant "$MIN_GRANT" --l1-bytes 0 --log-level warn > "$tag.server.log" 2>&1 &
    pid=$!
    wait_healthy "$PORT" "$tag.server.log"
    "$LOADGEN" --url "http://127.0.0.1:$PORT" --endpoint completions -c "$CLIENTS" \
      --duration "$DURATION" --seed "$run" --prompt-tokens "$PROMPT" \
      --max-tokens "$MAX_TOKENS" --ignore-eos --timeout 300 -q --json "$tag.json" \
      > "$tag.loadgen.txt" 2>&1 || true
    curl -s "http://127.0.0.1:$PORT/metrics" > "$tag.metrics.txt" || true
    peak=$(awk '/VmHWM/ {print int($2 / 1024)}' "/proc/$pid/status" 2>/dev/null || echo -)
    stop_server
    # Answer tokens cut: what the answered requests asked for and did not get.
    read -r ok failed tps p50 p99 cut <<< "$(jq -r '
      [.samples[] | select(.outcome == "ok")] as $ok
      | ($ok | map(.ttft_ms) | sort) as $v | ($v | length) as $n
      | def rank(p): if $n == 0 then "-" else ($v[(((p / 100) * $n) | ceil) - 1 | if . < 0 then 0 else . end] | floor) end;
      "\($ok | length) \(.summary.failed) \(.summary.output_token_rate_per_s | . * 10 | round / 10) \(rank(50)) \(rank(99)) \($ok | map(.max_tokens - (.completion_tokens // .max_tokens)) | add // 0)"' "$tag.json")"
    printf '%-4s %-5s %6s %6s %9s %9s %9s %11s %9s %9s %9s %9s\n' "$run" "$mode" "$ok" "$failed" \
      "$tps" "$p50" "$p99" "$(metric strata_preemptions_total "$tag.metrics.txt")" \
      "$(metric strata_kv_capped_requests_total "$tag.metrics.txt")" \
      "$(metric strata_kv_admission_waits_total "$tag.metrics.txt")" "$cut" "$peak"
  done
done
