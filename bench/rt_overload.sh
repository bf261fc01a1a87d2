#!/usr/bin/env bash
# bench/rt_overload.sh — the RT-Switcher past saturation.
#
# Starts `strata serve` on a model, drives it with loadgen's open-loop Poisson
# arrivals at RATE requests/s (above what the server can serve), once without
# and once with the RT-Switcher, RUNS times alternating (off, on, off, on...),
# and prints per run: TTFT P50/P99 of successful requests over the whole run
# and over the requests sent after SETTLE seconds (the switcher needs a few
# seconds to react; "recovered" means the second figure), successful requests
# per second, requests refused (429) and the RT-Switcher's level changes.
# Everything else about the two servers is the same. Per-run loadgen JSON,
# server logs and /metrics are kept under OUT.
#
# Usage:
#   bench/rt_overload.sh STRATA LOADGEN MODEL
# Settings (environment):
#   RATE=16 DURATION=120 RUNS=3 SETTLE=30 PARALLEL=8 QUEUE=64 THREADS=1
#   PROMPT=64 MAX_TOKENS=128 PORT=18431 OUT=/tmp/rt_overload
#   HTTP_THREADS=256 IN_FLIGHT=200   (every loadgen connection gets a server thread:
#                                     a kept-alive connection holds one)
#   RT_FLAGS="--rt-switcher on --rt-ttft-slo 0.8"   (the "on" server's extra flags)
#   MODES="off on"                                 (e.g. "on" alone, to compare ladders)
set -euo pipefail

if [[ $# -ne 3 ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  [[ "${1:-}" == -h || "${1:-}" == --help ]] && exit 0
  exit 2
fi
STRATA=$1 LOADGEN=$2 MODEL=$3
RATE=${RATE:-16} DURATION=${DURATION:-120} RUNS=${RUNS:-3} SETTLE=${SETTLE:-30}
PARALLEL=${PARALLEL:-8} QUEUE=${QUEUE:-64} THREADS=${THREADS:-1}
PROMPT=${PROMPT:-64} MAX_TOKENS=${MAX_TOKENS:-128} PORT=${PORT:-18431}
OUT=${OUT:-/tmp/rt_overload}
HTTP_THREADS=${HTTP_THREADS:-256} IN_FLIGHT=${IN_FLIGHT:-200}
RT_FLAGS=${RT_FLAGS:---rt-switcher on --rt-ttft-slo 0.8}
MODES=${MODES:-off on}
mkdir -p "$OUT"

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

# P50 and P99 (nearest rank, as loadgen) of ttft_ms over ok samples sent at or
# after $2 seconds; "-" when none.
percentiles() {
  jq -r --argjson from "$2" '
    [.samples[] | select(.outcome == "ok" and .sent_s >= $from) | .ttft_ms] | sort as $v
    | ($v | length) as $n
    | if $n == 0 then "- -"
      else
        def rank(p): $v[(((p / 100) * $n) | ceil) - 1 | if . < 0 then 0 else . end];
        "\(rank(50) | floor) \(rank(99) | floor)"
      end' "$1"
}

printf '%-4s %-4s %9s %9s %13s %13s %8s %8s %s\n' run rt "p50 ms" "p99 ms" \
  "p50 ms >=${SETTLE}s" "p99 ms >=${SETTLE}s" "ok/s" refused "level changes"
for run in $(seq 1 "$RUNS"); do
  for mode in $MODES; do
    tag="$OUT/run${run}-${mode}"
    flags=()
    if [[ $mode == on ]]; then read -r -a flags <<< "$RT_FLAGS"; fi
    "$STRATA" serve -m "$MODEL" --port "$PORT" -t "$THREADS" --parallel "$PARALLEL" \
      --queue "$QUEUE" --http-threads "$HTTP_THREADS" --ctx 512 --log-level warn "${flags[@]}" > "$tag.server.log" 2>&1 &
    pid=$!
    # A shared machine: note whether anything paused the server (SIGSTOP) during
    # the run, which would make its latencies meaningless.
    ( while kill -0 "$pid" 2>/dev/null; do
        grep -q '^State:.*T' "/proc/$pid/status" 2>/dev/null && echo paused > "$tag.paused"
        sleep 0.5
      done ) &
    monitor_pid=$!
    "$LOADGEN" --url "http://127.0.0.1:$PORT" --wait-ready 120 --endpoint completions \
      --rate "$RATE" --duration "$DURATION" --seed "$run" --prompt-tokens "$PROMPT" \
      --max-tokens "$MAX_TOKENS" --ignore-eos --max-in-flight "$IN_FLIGHT" --timeout 120 -q \
      --json "$tag.json" > "$tag.loadgen.txt" 2>&1 || true
    curl -s "http://127.0.0.1:$PORT/metrics" > "$tag.metrics.txt" || true
    stop_server
    wait "$monitor_pid" 2>/dev/null || true
    read -r p50 p99 <<< "$(percentiles "$tag.json" 0)"
    read -r s50 s99 <<< "$(percentiles "$tag.json" "$SETTLE")"
    ok_rate=$(jq -r '.summary.request_rate_per_s | . * 100 | round / 100' "$tag.json")
    refused=$(jq -r '[.samples[] | select(.http_status == 429)] | length' "$tag.json")
    changes=$(grep -o 'step \(down\|up\) [0-9] -> [0-9]' "$tag.server.log" |
              sed 's/step //' | awk -v ORS=', ' '{print}' | sed 's/, $//' || true)
    [[ -f "$tag.paused" ]] && changes="${changes:--} (SERVER PAUSED: discard)"
    printf '%-4s %-4s %9s %9s %13s %13s %8s %8s %s\n' "$run" "$mode" "$p50" "$p99" \
      "$s50" "$s99" "$ok_rate" "$refused" "${changes:--}"
  done
done
