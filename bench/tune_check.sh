#!/usr/bin/env bash
# The tuner's pick against serve's defaults on a real server, and the
# simulator's error against both (docs/tuning.md, docs/benchmarks.md
# "Tuning").
#
#   bench/tune_check.sh MODEL.gguf BEST.toml COST.json OUT_DIR
#
# For each scenario that the load generator can replay as declared
# (shared-system-prompt, cold-start, long-context: Poisson arrivals, made-up
# prompts of the scenario's lengths after its system prompts, answers of
# exactly its length), ROUNDS times with the order flipped each round:
# `strata serve -m MODEL` with serve's defaults, then with --config BEST
# (strata tune pareto's best.toml), each for DURATION seconds of loadgen.
# Then `strata tune simulate` predicts the same runs with COST. Prints, per
# scenario and configuration, the medians of the real runs (requests per
# second, TTFT P50/P95/P99; a scenario's warm-up seconds are left out of
# TTFT, as the simulator leaves them out) beside the simulator's, and the
# simulator's relative error.
# Env: DURATION (60), ROUNDS (2), THREADS (2), PORT (18490), STRATA
# (build/release/strata), LOADGEN (build/release/bench/loadgen).
set -euo pipefail
if [ $# -ne 4 ] || [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
  [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ] && exit 0
  exit 2
fi
model="$1" best="$2" cost="$3" out="$4"
cd "$(dirname "$0")/.."
strata="${STRATA:-build/release/strata}" loadgen="${LOADGEN:-build/release/bench/loadgen}"
duration="${DURATION:-60}" rounds="${ROUNDS:-2}" threads="${THREADS:-2}" port="${PORT:-18490}"
for f in "$strata" "$loadgen"; do [ -x "$f" ] || { echo "error: '$f' is not built" >&2; exit 2; }; done
for f in "$model" "$best" "$cost"; do [ -f "$f" ] || { echo "error: no file '$f'" >&2; exit 2; }; done
mkdir -p "$out"
# shellcheck source=bench/lib.sh
source bench/lib.sh

# The loadgen flags of each scenario (bench/scenarios/NAME.toml says the same).
declare -A shape=(
  [shared-system-prompt]="--rate 1.5 --prompt-tokens 80 --system-prompt-tokens 1200 --system-prompts 4 --max-tokens 128 --temperature 0.7"
  [cold-start]="--rate 3 --prompt-tokens 120 --system-prompt-tokens 300 --system-prompts 2 --max-tokens 128 --temperature 0"
  [long-context]="--rate 0.2 --prompt-tokens 2500 --max-tokens 200 --temperature 0"
)
serve() {  # serve LOG [FLAGS...]
  local log="$1"
  shift
  "$strata" serve -m "$model" --port "$port" -t "$threads" --l1-bytes 0 "$@" >"$log" 2>&1 &
  pid=$!
  wait_healthy "$port" "$log"
}
for scenario in shared-system-prompt cold-start long-context; do
  for r in $(seq 1 "$rounds"); do
    order="defaults tuned"
    [ $((r % 2)) -eq 0 ] && order="tuned defaults"
    for side in $order; do
      if [ "$side" = tuned ]; then serve "$out/$scenario-$side-r$r.log" --config "$best"; else
        serve "$out/$scenario-$side-r$r.log"; fi
      # shellcheck disable=SC2086
      "$loadgen" --url "http://127.0.0.1:$port" --endpoint chat ${shape[$scenario]} --ignore-eos \
        --duration "$duration" --seed "$r" -q --json "$out/$scenario-$side-r$r.json"
      stop_server
      echo "$scenario $side round $r done $(date +%T)"
    done
  done
  "$strata" tune simulate --scenario "$scenario" --cost "$cost" --duration "$duration" \
    --json "$out/$scenario-defaults-sim.json" >/dev/null
  "$strata" tune simulate --scenario "$scenario" --cost "$cost" --duration "$duration" \
    --config "$best" --json "$out/$scenario-tuned-sim.json" >/dev/null
done
python3 - "$out" "$rounds" <<'PY'
import json, math, re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def warmup(scenario):  # the scenario's [metrics] warmup: its first seconds are not judged
    m = re.search(r"^warmup\s*=\s*([0-9.]+)", open(f"bench/scenarios/{scenario}.toml").read(), re.M)
    return float(m.group(1)) if m else 0.0
def rank(values, q):  # nearest rank, as the simulator's
    v = sorted(values)
    return v[max(1, math.ceil(q * len(v))) - 1] if v else float("nan")
print("| scenario | config | real req/s | real TTFT P50 / P95 / P99 (ms) | simulated req/s | simulated TTFT P50 / P95 / P99 (ms) | simulator error P95 |")
print("|---|---|---|---|---|---|---|")
for scenario in ["shared-system-prompt", "cold-start", "long-context"]:
    w = warmup(scenario)
    for side in ["defaults", "tuned"]:
        runs = [json.load(open(f"{out}/{scenario}-{side}-r{r}.json")) for r in range(1, rounds + 1)]
        rps = statistics.median(j["summary"]["request_rate_per_s"] for j in runs)
        ttfts = [[x["ttft_ms"] for x in j["samples"] if x["outcome"] == "ok" and x["sent_s"] >= w]
                 for j in runs]
        p = {q: statistics.median(rank(t, v) for t in ttfts) for q, v in (("p50", .5), ("p95", .95), ("p99", .99))}
        sim = json.load(open(f"{out}/{scenario}-{side}-sim.json"))[scenario]
        sp = {q: sim[f"ttft_{q}_s"] * 1e3 for q in ("p50", "p95", "p99")}
        err = (sp["p95"] - p["p95"]) / p["p95"] if p["p95"] > 0 else float("nan")
        print(f"| {scenario} | {side} | {rps:.2f} | {p['p50']:.0f} / {p['p95']:.0f} / {p['p99']:.0f} | "
              f"{sim['throughput_rps']:.2f} | {sp['p50']:.0f} / {sp['p95']:.0f} / {sp['p99']:.0f} | {err:+.0%} |")
PY
