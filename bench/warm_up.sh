#!/usr/bin/env bash
# Cache warm-up: the first minute of a new instance, cold and warmed from a
# snapshot of a running one (docs/api.md, "Cache warm-up").
#
#   bench/warm_up.sh MODEL.gguf OUT_DIR
#
# A running instance (A) answers a workload of FAQ-style repeats: QUESTIONS
# distinct questions (temperature 0, so their answers are cached) after one
# of SYSTEMS long system prompts of SYSTEM tokens; `strata cache export`
# takes its snapshot. Then, ROUNDS times (the order flips each round), a new
# instance serves the same workload for DURATION seconds cold, and a new
# one started with --warm-from serves it warm; loadgen reports TTFT of
# each. With FRESH=1 the measured runs ask questions A never saw (after the
# same system prompts), so only the prefix cache (L2) can help them.
# Env: SYSTEM (512), SYSTEMS (8), QUESTIONS (64), GEN (16), CLIENTS
# (4), DURATION (60), ROUNDS (2), THREADS (2), PORT (18470), STRATA
# (build/release/strata), LOADGEN (build/release/bench/loadgen). Writes
# OUT_DIR/{cold,warm}-rN.json and prints each run's TTFT P50/P99 and the
# requests served.
set -euo pipefail
if [ $# -ne 2 ] || [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
  [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ] && exit 0
  exit 2
fi
model="$1" out="$2"
strata="${STRATA:-build/release/strata}" loadgen="${LOADGEN:-build/release/bench/loadgen}"
system="${SYSTEM:-512}" systems="${SYSTEMS:-8}" questions="${QUESTIONS:-64}" gen="${GEN:-16}"
clients="${CLIENTS:-4}" duration="${DURATION:-60}" rounds="${ROUNDS:-2}" threads="${THREADS:-2}"
port="${PORT:-18470}"
[ -x "$strata" ] || { echo "error: '$strata' is not built" >&2; exit 2; }
[ -x "$loadgen" ] || { echo "error: '$loadgen' is not built" >&2; exit 2; }
[ -f "$model" ] || { echo "error: no model file '$model'" >&2; exit 2; }
mkdir -p "$out"
printf 'admin-key-warm-up-bench\n' >"$out/admin.key"
questions_file() {  # questions_file FIRST: QUESTIONS lines numbered from FIRST
  for i in $(seq "$1" $(($1 + questions - 1))); do
    printf '{"prompt": "Question %d: how do I configure option %d of the product, and what does it change?"}\n' "$i" "$i"
  done
}
questions_file 1 >"$out/questions.jsonl"
if [ "${FRESH:-0}" = 1 ]; then questions_file 100001 >"$out/measured.jsonl"; else
  cp "$out/questions.jsonl" "$out/measured.jsonl"; fi

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
serve() {  # serve LOG [FLAGS...]
  local log="$1"
  shift
  "$strata" serve -m "$model" --port "$port" -t "$threads" --admin-key-file "$out/admin.key" \
    "$@" >"$log" 2>&1 &
  pid=$!
  wait_healthy "$port" "$log"
}
load() {  # load QUESTIONS JSON [FLAGS...]
  local questions_file="$1" json="$2"
  shift 2
  "$loadgen" --url "http://127.0.0.1:$port" --endpoint chat --system-prompt-tokens "$system" \
    --system-prompts "$systems" --system-seed 7 --prompt-file "$questions_file" \
    --max-tokens "$gen" --temperature 0 -c "$clients" -q --json "$json" "$@"
}

echo "A: answering the workload once, then exporting its caches $(date +%T)"
serve "$out/a.log"
load "$out/questions.jsonl" "$out/prime.json" -n $((systems * questions))
"$strata" cache export --url "http://127.0.0.1:$port" --admin-key-file "$out/admin.key" \
  -o "$out/snapshot.bin"
stop_server

summary() {
  python3 - "$1" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
t = s["ttft_ms"]
print(f"{s['requests']} requests, TTFT P50 {t['p50']:.1f} ms, P99 {t['p99']:.1f} ms, cache {json.dumps(s.get('cache', {}))}")
PY
}
for r in $(seq 1 "$rounds"); do
  order="cold warm"
  [ $((r % 2)) -eq 0 ] && order="warm cold"
  for side in $order; do
    if [ "$side" = warm ]; then
      serve "$out/$side-r$r.log" --warm-from "$out/snapshot.bin"
    else
      serve "$out/$side-r$r.log"
    fi
    load "$out/measured.jsonl" "$out/$side-r$r.json" --duration "$duration"
    stop_server
    printf 'round %d %-4s: %s\n' "$r" "$side" "$(summary "$out/$side-r$r.json")"
  done
done
