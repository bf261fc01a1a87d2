#!/usr/bin/env bash
# strata serve against llama.cpp's llama-server on the same model, threads and
# load, interleaved so both see the same machine state (docs/benchmarks.md).
#
#   bench/server_compare.sh LLAMA_SERVER MODEL.gguf OUT_DIR
#
# For each concurrency C in $CONC, and each round, starts one server at a
# time (strata serve; llama-server with -np C, continuous batching, prompt
# caching on, a context of C slots; strata with --parallel C, its response
# cache and request coalescing off, its prefix cache on), sends a few warm-up requests, then
# $REQUESTS closed-loop requests from C clients with bench/loadgen, and stops
# it. Every request generates exactly $GEN tokens (ignore_eos) at
# temperature 0 from a $PROMPT-token prompt. Random-weight models should be
# written with `strata mkmodel --byte-tokens-as-text`: llama-server aborts
# responses that are not valid UTF-8.
#
# Env: THREADS (2), CONC ("1 4 8"), ROUNDS (2), REQUESTS (4 x C, at least 16),
# PROMPT (128), GEN (64), KV_TYPE (strata's --kv-type: f32 | f16 | q8_0;
# unset = its default), STRATA (build/release/strata), LOADGEN
# (build/release/bench/loadgen), PORT (18180). Writes
# OUT_DIR/{strata,llama}-cC-rR.json (loadgen summaries and samples) and prints
# one line per concurrency and round with both sides and the ratios.
set -euo pipefail
if [ $# -lt 3 ] || [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
  [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ] && exit 0
  exit 2
fi
llama_server="$1" model="$2" out="$3"
strata="${STRATA:-build/release/strata}" loadgen="${LOADGEN:-build/release/bench/loadgen}"
threads="${THREADS:-2}" conc_list="${CONC:-1 4 8}" rounds="${ROUNDS:-2}"
prompt="${PROMPT:-128}" gen="${GEN:-64}" port="${PORT:-18180}"
[ -x "$llama_server" ] || { echo "error: '$llama_server' is not an executable llama-server" >&2; exit 2; }
[ -x "$strata" ] || { echo "error: '$strata' is not built (cmake --build --preset release)" >&2; exit 2; }
[ -x "$loadgen" ] || { echo "error: '$loadgen' is not built" >&2; exit 2; }
[ -f "$model" ] || { echo "error: no model file '$model'" >&2; exit 2; }
mkdir -p "$out"

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

# run_side NAME C ROUND: start that server, warm it up, measure, stop it.
run_side() {
  local side="$1" c="$2" round="$3"
  local n=$((4 * c)); [ "$n" -lt 16 ] && n=16; n="${REQUESTS:-$n}"
  local ctx=$((c * (prompt + gen + 128)))
  # One port per side and round: a port the previous server closed can stay
  # in TIME_WAIT, and llama-server does not bind over that.
  local p=$((port + 2 * round)); [ "$side" = llama ] && p=$((p + 1))
  if [ "$side" = strata ]; then
    # Response cache off: every request is generated, as llama-server does.
    "$strata" serve -m "$model" -t "$threads" --parallel "$c" --port "$p" --l1-bytes 0 \
      --no-coalesce --log-level warn ${KV_TYPE:+--kv-type "$KV_TYPE"} \
      >"$out/$side-c$c-r$round.log" 2>&1 &
  else
    "$llama_server" -m "$model" -t "$threads" -np "$c" -c "$ctx" --port "$p" \
      >"$out/$side-c$c-r$round.log" 2>&1 &
  fi
  pid=$!
  local common=(--url "http://127.0.0.1:$p" --endpoint completions --prompt-tokens "$prompt"
                --max-tokens "$gen" --ignore-eos --temperature 0 -q)
  "$loadgen" "${common[@]}" --wait-ready 120 -c "$c" -n "$c" --seed 99 >/dev/null
  "$loadgen" "${common[@]}" -c "$c" -n "$n" --seed "$round" --json "$out/$side-c$c-r$round.json" \
    >/dev/null
  stop_server
}

for round in $(seq 1 "$rounds"); do
  for c in $conc_list; do
    # Alternate which server goes first, so neither always runs on a cooler machine.
    if [ $((round % 2)) -eq 1 ]; then order="strata llama"; else order="llama strata"; fi
    for side in $order; do run_side "$side" "$c" "$round"; done
    python3 - "$out/strata-c$c-r$round.json" "$out/llama-c$c-r$round.json" "$c" "$round" <<'PY'
import json, sys
s, l = (json.load(open(p))["summary"] for p in sys.argv[1:3])
c, rnd = sys.argv[3], sys.argv[4]
def row(x):
    return (f"{x['request_rate_per_s']:.2f} req/s {x['output_token_rate_per_s']:.1f} tok/s "
            f"TTFT P50 {x['ttft_ms']['p50']:.0f} P99 {x['ttft_ms']['p99']:.0f} ms "
            f"TPOT P50 {x['tpot_ms']['p50']:.1f} ms failed {x['failed']}")
print(f"c={c} round {rnd}: strata {row(s)} | llama-server {row(l)} | throughput "
      f"{s['output_token_rate_per_s'] / l['output_token_rate_per_s']:.2f}x, P99 TTFT "
      f"{s['ttft_ms']['p99'] / l['ttft_ms']['p99']:.2f}x")
PY
  done
done
