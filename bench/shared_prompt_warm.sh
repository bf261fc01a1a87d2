#!/usr/bin/env bash
# The warm phase of bench/shared_prompt.sh, measured in pairs: strata serve
# and llama-server run side by side (one busy at a time), each is warmed with
# the system prompt and one phase of $USERS requests arriving together, then
# $PAIRS warm phases of each alternate (the order flips every pair), so each
# strata/llama-server ratio comes from two runs a minute apart rather than
# from rounds minutes apart on a machine whose speed drifts.
#
#   bench/shared_prompt_warm.sh LLAMA_SERVER MODEL.gguf OUT_DIR
#
# Same servers, flags (bench/shared_prompt_servers.sh) and requests as
# bench/shared_prompt.sh (see there).
# Env: THREADS (2), USERS (32), PAIRS (5), SYSTEM (1000), QUESTION (24),
# GEN (32), KV_TYPE (strata's --kv-type; unset = its default), STRATA
# (build/release/strata), LOADGEN (build/release/bench/loadgen), PORT
# (18380). Writes OUT_DIR/{strata,llama}-warm-pN.json and prints each pair's
# throughput ratio and their median.
set -euo pipefail

if [ $# -ne 3 ] || [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
  [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ] && exit 0
  exit 2
fi
llama_server="$1" model="$2" out="$3"
strata="${STRATA:-build/release/strata}" loadgen="${LOADGEN:-build/release/bench/loadgen}"
threads="${THREADS:-2}" users="${USERS:-32}" pairs="${PAIRS:-5}"
system="${SYSTEM:-1000}" question="${QUESTION:-24}" gen="${GEN:-32}" port="${PORT:-18380}"
[ -x "$strata" ] || { echo "error: '$strata' is not built (cmake --build --preset release)" >&2; exit 2; }
[ -x "$loadgen" ] || { echo "error: '$loadgen' is not built" >&2; exit 2; }
[ -x "$llama_server" ] || { echo "error: '$llama_server' is not an executable llama-server" >&2; exit 2; }
[ -f "$model" ] || { echo "error: no model file '$model'" >&2; exit 2; }
[[ "$pairs" =~ ^[1-9][0-9]*$ ]] || { echo "error: PAIRS must be a positive integer" >&2; exit 2; }
mkdir -p "$out"
kv=$((users * (system + question + gen + 128)))
ctx=$(( (system + question + gen + 128 + 255) / 256 * 256 ))

pids=()
stop_all() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; }
trap stop_all EXIT

# shellcheck source=bench/shared_prompt_servers.sh
source "$(dirname "$0")/shared_prompt_servers.sh"
llama_port=$port strata_port=$((port + 1)) pid=""
start_llama_server "$llama_port" "$out/llama-warm.log"
pids+=("$pid")
start_strata_server "$strata_port" "$out/strata-warm.log"
pids+=("$pid")

# load SIDE ARGS...: loadgen against that side's server.
load() {
  local side="$1" p
  shift
  if [ "$side" = llama ]; then p=$llama_port; else p=$strata_port; fi
  "$loadgen" --url "http://127.0.0.1:$p" --endpoint chat --system-prompt-tokens "$system" \
    --system-seed 7 --prompt-tokens "$question" --max-tokens "$gen" --ignore-eos \
    --temperature 0 -q "$@"
}

for side in strata llama; do
  echo "warming $side: one request, then $users together $(date +%T)"
  load "$side" --wait-ready 120 -c 1 -n 1 --seed 1000 >/dev/null
  load "$side" -c "$users" -n "$users" --seed 1 >/dev/null
done
for i in $(seq 1 "$pairs"); do
  if [ $((i % 2)) -eq 1 ]; then order=(strata llama); else order=(llama strata); fi
  for side in "${order[@]}"; do
    echo "pair $i: $side $(date +%T)"
    load "$side" -c "$users" -n "$users" --seed $((2000 + i)) --json "$out/$side-warm-p$i.json" >/dev/null
  done
done

python3 - "$out" "$pairs" <<'PY'
import json, os, statistics, sys
out, pairs = sys.argv[1], int(sys.argv[2])
ratios, failed = [], 0
for i in range(1, pairs + 1):
    s = {side: json.load(open(os.path.join(out, f"{side}-warm-p{i}.json")))["summary"]
         for side in ("strata", "llama")}
    r = s["strata"]["request_rate_per_s"] / s["llama"]["request_rate_per_s"]
    ratios.append(r)
    failed += s["strata"]["failed"] + s["llama"]["failed"]
    print(f"pair {i}: strata {s['strata']['request_rate_per_s']:.3f} req/s "
          f"(TPOT P50 {s['strata']['tpot_ms']['p50']:.0f} ms), llama-server "
          f"{s['llama']['request_rate_per_s']:.3f} req/s "
          f"(TPOT P50 {s['llama']['tpot_ms']['p50']:.0f} ms): {r:.2f}x")
print(f"warm-phase throughput strata / llama-server: median {statistics.median(ratios):.2f}x "
      f"over {pairs} pairs (min {min(ratios):.2f}, max {max(ratios):.2f}); failed requests {failed}")
PY
