#!/usr/bin/env bash
# What serving several local models under one memory budget costs
# (docs/benchmarks.md, "Several models under a memory budget").
#
#   bench/models.sh OUT_DIR
#
# Writes two random-weight models of $SHAPE ($TYPE) with `strata mkmodel`
# (different seeds), then serves both from one `strata serve`:
#   resident  --models-memory for both: every request finds its model loaded
#   swap      --models-memory for one: each request for the other model
#             unloads the idle one and loads its own (warm-up included)
# and, as the baseline a swap competes with, a second process started for
# the model (`strata serve -m` until "ready"). Per configuration, $ROUNDS
# (7) rounds of one greedy completion (8 tokens) for each model in turn,
# timed end to end with curl; prints the medians and the mean load time
# from strata_model_load_duration_seconds. Every answer of the swap runs is
# compared with the resident run's: a difference is an error.
# Env: STRATA (build/release/strata), SHAPE (llama-100m), TYPE (q8_0),
# ROUNDS, PORT (18400), THREADS (2).
set -euo pipefail
if [ $# -lt 1 ] || [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
  [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ] && exit 0
  exit 2
fi
out="$1"
cd "$(dirname "$0")/.."
strata="${STRATA:-build/release/strata}" shape="${SHAPE:-llama-100m}" type="${TYPE:-q8_0}"
rounds="${ROUNDS:-7}" port="${PORT:-18400}" threads="${THREADS:-2}"
[ -x "$strata" ] || { echo "error: '$strata' is not built (cmake --build --preset release)" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
# shellcheck source=bench/lib.sh
source bench/lib.sh

for m in a b; do
  [ -f "$out/$m.gguf" ] || "$strata" mkmodel --shape "$shape" --type "$type" --seed "$([ $m = a ] && echo 1 || echo 2)" \
    -o "$out/$m.gguf" --log-level error
done

# start ARGS...: a server on $port (pid=$!), waited on until ready; sets
# ready_ms (not run in a subshell: stop_server must see the pid).
start() {
  local t0 t1
  if curl -s -o /dev/null "http://127.0.0.1:$port/health"; then
    echo "error: port $port is taken (PORT=...)" >&2
    exit 2
  fi
  t0=$(date +%s%N)
  "$strata" serve --port "$port" -t "$threads" --ctx 512 --l1-bytes 0 --log-level warn "$@" \
    > "$out/serve.log" 2>&1 &
  pid=$!
  until curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || { cat "$out/serve.log" >&2; exit 1; }
    sleep 0.005
  done
  t1=$(date +%s%N)
  ready_ms=$(( (t1 - t0) / 1000000 ))
}
# ask MODEL: one greedy completion; sets ask_ms and ask_text (the answer).
ask() {
  local t0 t1 body
  t0=$(date +%s%N)
  body=$(curl -sf "http://127.0.0.1:$port/v1/completions" -H 'content-type: application/json' \
    -d "{\"model\":\"$1\",\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"temperature\":0,\"ignore_eos\":true}") \
    || { echo "error: the request for model $1 failed" >&2; exit 1; }
  t1=$(date +%s%N)
  ask_ms=$(( (t1 - t0) / 1000000 ))
  ask_text=$(echo "$body" | sed 's/.*"text":"\([^"]*\)".*/\1/')
}
median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
metric() { curl -sf "http://127.0.0.1:$port/metrics" | awk -v k="$1" '$1 == k {print $2}'; }

bytes=$(stat -c %s "$out/a.gguf")
echo "models: 2 x $shape $type ($(( bytes / 1048576 )) MiB each), $threads threads, $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"

# Resident: both loaded (--preload), the reference answers.
start -m "a=$out/a.gguf" -m "b=$out/b.gguf" --models-memory 64GiB --preload
declare -A want
: > "$out/resident.ms"
for r in $(seq "$rounds"); do
  for m in a b; do
    ask $m
    want[$m]="$ask_text"
    echo "$ask_ms" >> "$out/resident.ms"
  done
done
resident_bytes=$(metric 'strata_model_resident_bytes{model="a"}' | awk '{printf "%d", $1}')
stop_server

# Swap: room for one; every request loads its model.
start -m "a=$out/a.gguf" -m "b=$out/b.gguf" --models-memory "$(( resident_bytes * 3 / 2 ))"
: > "$out/swap.ms"
ask a  # the first load is not a swap
for r in $(seq "$rounds"); do
  for m in b a; do
    ask $m
    [ "$ask_text" = "${want[$m]}" ] || { echo "error: model $m answered '$ask_text', resident '${want[$m]}'" >&2; exit 1; }
    echo "$ask_ms" >> "$out/swap.ms"
  done
done
loads=$(metric 'strata_model_load_duration_seconds_count{model="a"}')
load_s=$(metric 'strata_model_load_duration_seconds_sum{model="a"}')
evictions=$(metric 'strata_model_evictions_total{model="a"}')
stop_server

# Baseline: a fresh process per model, to ready, then the request.
: > "$out/process.ms"
for r in $(seq "$rounds"); do
  start -m "$out/a.gguf"
  ask a
  echo $(( ready_ms + ask_ms )) >> "$out/process.ms"
  stop_server
done

printf 'resident request  median %s ms\n' "$(median < "$out/resident.ms")"
printf 'swap request      median %s ms (model a: %s loads, %s unloads, mean load %.0f ms)\n' \
  "$(median < "$out/swap.ms")" "$loads" "$evictions" "$(echo "$load_s / $loads * 1000" | bc -l)"
printf 'new process       median %s ms (start to ready, then the request)\n' "$(median < "$out/process.ms")"
