#!/usr/bin/env bash
# Finds the highest open-loop load strata serve holds within a TTFT bound,
# then soaks it there (docs/benchmarks.md).
#
#   bench/soak.sh MODEL.gguf OUT_DIR RATE...
#
# Starts strata serve once, then for each RATE (Poisson arrivals per second,
# ascending) runs bench/loadgen for $STEP seconds. A rate is held when its P99
# time to first token is <= $P99_MS ms, no request failed, and the server kept
# up: the mean TTFT of the step's last third of arrivals is at most twice that
# of its first third plus 100 ms (a server past its capacity builds a queue
# that a short step's percentiles do not show yet). The highest held rate is soaked for $SOAK seconds, which must
# end with zero errors and P99 TTFT within the bound (exit 1 otherwise).
#
# Env: THREADS (2), PROMPT (32), GEN (64), STEP (90), SOAK (600), P99_MS
# (800), STRATA (build/release/strata), LOADGEN (build/release/bench/loadgen),
# PORT (18280), SERVE_ARGS (extra strata serve flags). Writes
# OUT_DIR/step-RATE.json, OUT_DIR/soak.json and OUT_DIR/serve.log.
set -euo pipefail
if [ $# -lt 3 ] || [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
  [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ] && exit 0
  exit 2
fi
model="$1" out="$2"
shift 2
strata="${STRATA:-build/release/strata}" loadgen="${LOADGEN:-build/release/bench/loadgen}"
threads="${THREADS:-2}" prompt="${PROMPT:-32}" gen="${GEN:-64}" step="${STEP:-90}"
soak="${SOAK:-600}" p99_ms="${P99_MS:-800}" port="${PORT:-18280}"
[ -x "$strata" ] || { echo "error: '$strata' is not built (cmake --build --preset release)" >&2; exit 2; }
[ -x "$loadgen" ] || { echo "error: '$loadgen' is not built" >&2; exit 2; }
[ -f "$model" ] || { echo "error: no model file '$model'" >&2; exit 2; }
mkdir -p "$out"

# shellcheck disable=SC2086  # SERVE_ARGS is a list of flags
"$strata" serve -m "$model" -t "$threads" --port "$port" --log-level warn ${SERVE_ARGS:-} \
  >"$out/serve.log" 2>&1 &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true' EXIT
common=(--url "http://127.0.0.1:$port" --endpoint completions --prompt-tokens "$prompt"
        --max-tokens "$gen" --ignore-eos -q)
"$loadgen" "${common[@]}" --wait-ready 120 -c 2 -n 4 --seed 99 >/dev/null

summary() {  # FILE -> "P99_MS FAILED KEPT_UP(0|1) line"
  python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
s = d["summary"]
last = max((x["sent_s"] for x in d["samples"]), default=0.0)
def mean_ttft(lo, hi):
    v = [x["ttft_ms"] for x in d["samples"]
         if lo * last <= x["sent_s"] <= hi * last and x["ttft_ms"] is not None]
    return sum(v) / len(v) if v else 0.0
first, final = mean_ttft(0, 1 / 3), mean_ttft(2 / 3, 1)
kept_up = int(final <= 2 * first + 100)
print(f"{s['ttft_ms']['p99']:.0f} {s['failed']} {kept_up} {s['requests']} requests, "
      f"{s['request_rate_per_s']:.2f} req/s, {s['output_token_rate_per_s']:.1f} tok/s, "
      f"TTFT P50 {s['ttft_ms']['p50']:.0f} P95 {s['ttft_ms']['p95']:.0f} P99 {s['ttft_ms']['p99']:.0f} ms, "
      f"TPOT P50 {s['tpot_ms']['p50']:.1f} P99 {s['tpot_ms']['p99']:.1f} ms, failed {s['failed']}, "
      f"mean TTFT first/last third {first:.0f}/{final:.0f} ms")
PY
}

best=""
for rate in "$@"; do
  "$loadgen" "${common[@]}" --rate "$rate" --duration "$step" --seed 7 --json "$out/step-$rate.json" \
    >/dev/null
  read -r p99 failed kept_up line < <(summary "$out/step-$rate.json")
  echo "rate $rate: $line"
  if [[ "$p99" =~ ^[0-9]+$ ]] && [ "$failed" -eq 0 ] && [ "$p99" -le "$p99_ms" ] && [ "$kept_up" = 1 ]; then
    best="$rate"
  else
    break
  fi
done
[ -n "$best" ] || { echo "no rate kept P99 TTFT <= $p99_ms ms" >&2; exit 1; }
echo "soaking at $best req/s for $soak s"
"$loadgen" "${common[@]}" --rate "$best" --duration "$soak" --seed 8 --json "$out/soak.json" \
  >/dev/null
read -r p99 failed kept_up line < <(summary "$out/soak.json")
echo "soak at $best req/s: $line"
[ "$failed" -eq 0 ] || { echo "soak had $failed failed requests" >&2; exit 1; }
[[ "$p99" =~ ^[0-9]+$ ]] && [ "$p99" -le "$p99_ms" ] || { echo "soak P99 TTFT $p99 ms > $p99_ms ms" >&2; exit 1; }
