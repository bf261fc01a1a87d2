#!/usr/bin/env bash
# Shared-system-prompt chat: strata serve (with and without its KV prefix
# cache, L2) against llama.cpp's llama-server with its prompt caching on, on
# the same model, threads and load (docs/benchmarks.md, "Shared system prompt").
#
#   bench/shared_prompt.sh LLAMA_SERVER MODEL.gguf OUT_DIR
#
# Every request is a chat: the same $SYSTEM-token system prompt (byte-identical
# in every request, first in the template), then a short question of its own
# ($QUESTION tokens of words drawn per request), answered with exactly $GEN
# tokens (ignore_eos, temperature 0). $USERS clients send back to back (closed
# loop). Each server first answers one request with the same system prompt (a
# service whose system prompt has been seen before), then two phases are
# measured: "first", $USERS requests arriving together (llama-server has the
# prompt in one slot; the others start empty), and "warm", $WARM_REQUESTS more
# (every slot has now seen the system prompt: llama-server's steady state).
# Sides, one server at a time, the order rotating per round:
#   strata       --parallel $USERS, L2 on; its response cache and coalescing
#                off so every request is generated (the questions differ anyway)
#   strata-nol2  the same server, each request sending "cache":{"prefix":false}
#                (phase "first" only: without L2 there is no warm state)
#   llama        -np $USERS slots, prompt caching (cache_prompt, its default),
#                the host-memory prompt cache (--cache-ram, default 8 GiB: an
#                idle slot's prompt is saved and can be restored into any slot)
#                and --cache-reuse 256. Not --kv-unified: with one buffer shared
#                by 32 slots its first phase prefilled at about 55 tokens/s in
#                all, against about 100 with a buffer per slot (docs/benchmarks.md).
# Both servers get a KV room of $USERS x (SYSTEM + QUESTION + GEN + 128) tokens.
#
# Env: THREADS (2), USERS (32), ROUNDS (3), FIRST_ROUND (1), WARM_REQUESTS
# (USERS), SYSTEM (1000), QUESTION (24), GEN (32), SIDES ("strata llama
# strata-nol2"), KV_TYPE (strata's --kv-type; unset = its default), STRATA
# (build/release/strata), LOADGEN
# (build/release/bench/loadgen), PORT (18280). Writes
# OUT_DIR/SIDE-PHASE-rR.json (loadgen summaries and samples) and SIDE-rR.log,
# prints one line per round, then medians over every round found in OUT_DIR
# (so rounds may be run by separate calls, FIRST_ROUND=2 ROUNDS=1 ...) and the
# issue's two ratios.
set -euo pipefail
if [ $# -lt 3 ] || [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'
  [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ] && exit 0
  exit 2
fi
llama_server="$1" model="$2" out="$3"
strata="${STRATA:-build/release/strata}" loadgen="${LOADGEN:-build/release/bench/loadgen}"
threads="${THREADS:-2}" users="${USERS:-32}" rounds="${ROUNDS:-3}" first="${FIRST_ROUND:-1}"
system="${SYSTEM:-1000}" question="${QUESTION:-24}" gen="${GEN:-32}"
warm_requests="${WARM_REQUESTS:-$users}"
sides="${SIDES:-strata llama strata-nol2}" port="${PORT:-18280}"
[ -x "$strata" ] || { echo "error: '$strata' is not built (cmake --build --preset release)" >&2; exit 2; }
[ -x "$loadgen" ] || { echo "error: '$loadgen' is not built" >&2; exit 2; }
[ -f "$model" ] || { echo "error: no model file '$model'" >&2; exit 2; }
case " $sides " in
  *" llama "*) [ -x "$llama_server" ] ||
    { echo "error: '$llama_server' is not an executable llama-server" >&2; exit 2; } ;;
esac
mkdir -p "$out"
kv=$((users * (system + question + gen + 128)))
ctx=$(( (system + question + gen + 128 + 255) / 256 * 256 ))

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=bench/shared_prompt_servers.sh
source "$(dirname "$0")/shared_prompt_servers.sh"

# run_side SIDE ROUND INDEX: start that server, warm it up, measure, stop it.
run_side() {
  local side="$1" round="$2" i="$3"
  # A port per side and round: a closed port can stay in TIME_WAIT.
  local p=$((port + 4 * round + i)) extra=()
  if [ "$side" = llama ]; then
    start_llama_server "$p" "$out/$side-r$round.log"
  else
    start_strata_server "$p" "$out/$side-r$round.log"
    [ "$side" = strata-nol2 ] && extra=(--extra-body '{"cache":{"prefix":false}}')
  fi
  local common=(--url "http://127.0.0.1:$p" --endpoint chat --system-prompt-tokens "$system"
                --system-seed 7 --prompt-tokens "$question" --max-tokens "$gen" --ignore-eos
                --temperature 0 -q "${extra[@]}")
  "$loadgen" "${common[@]}" --wait-ready 120 -c 1 -n 1 --seed $((1000 + round)) >/dev/null
  "$loadgen" "${common[@]}" -c "$users" -n "$users" --seed "$round" \
    --json "$out/$side-first-r$round.json" >/dev/null
  if [ "$side" != strata-nol2 ]; then
    "$loadgen" "${common[@]}" -c "$users" -n "$warm_requests" --seed $((2000 + round)) \
      --json "$out/$side-warm-r$round.json" >/dev/null
  fi
  stop_server
}

read -r -a side_list <<<"$sides"
for round in $(seq "$first" $((first + rounds - 1))); do
  # Rotate the order so no side always runs first on a cooler machine.
  k=$(( (round - 1) % ${#side_list[@]} ))
  order=("${side_list[@]:$k}" "${side_list[@]:0:$k}")
  for side in "${order[@]}"; do
    # The port depends on the side's name, not its place in $SIDES, so calls
    # with one side each (as docs/benchmarks.md runs them) never reuse a port.
    case "$side" in strata) idx=0 ;; llama) idx=1 ;; *) idx=2 ;; esac
    run_side "$side" "$round" "$idx"
  done
  python3 - "$out" "$round" <<'PY'
import json, os, sys
out, rnd = sys.argv[1], sys.argv[2]
parts = []
for side in ("strata", "strata-nol2", "llama"):
    for phase in ("first", "warm"):
        p = os.path.join(out, f"{side}-{phase}-r{rnd}.json")
        if os.path.exists(p):
            x = json.load(open(p))["summary"]
            parts.append(f"  {side:11s} {phase:5s} {x['request_rate_per_s']:.3f} req/s "
                         f"{x['output_token_rate_per_s']:.1f} tok/s TTFT P50 {x['ttft_ms']['p50']:.0f} "
                         f"P99 {x['ttft_ms']['p99']:.0f} ms E2E P50 {x['e2e_ms']['p50']:.0f} ms "
                         f"failed {x['failed']}")
print(f"round {rnd}:\n" + "\n".join(parts))
PY
done

python3 - "$out" <<'PY'
import glob, json, os, re, statistics, sys
out = sys.argv[1]
runs = {}  # (side, phase) -> round -> summary
for p in sorted(glob.glob(os.path.join(out, "*-r*.json"))):
    m = re.match(r"(strata|strata-nol2|llama)-(first|warm)-r(\d+)\.json$", os.path.basename(p))
    if m:
        runs.setdefault((m.group(1), m.group(2)), {})[int(m.group(3))] = json.load(open(p))["summary"]
# "all": both phases of a round together (tokens and time summed).
for side in ("strata", "llama"):
    for r in set(runs.get((side, "first"), {})) & set(runs.get((side, "warm"), {})):
        a, b = runs[(side, "first")][r], runs[(side, "warm")][r]
        runs.setdefault((side, "all"), {})[r] = {
            "output_token_rate_per_s": (a["output_tokens"] + b["output_tokens"]) / (a["duration_s"] + b["duration_s"]),
            "request_rate_per_s": (a["ok"] + b["ok"]) / (a["duration_s"] + b["duration_s"])}
def med(key, f):
    v = [f(x) for x in runs.get(key, {}).values()]
    return statistics.median(v) if v else float("nan")
print("medians over rounds")
for (side, phase) in sorted(runs):
    if phase == "all":
        continue
    key = (side, phase)
    print(f"  {side:11s} {phase:5s} rounds {sorted(runs[key])}: "
          f"{med(key, lambda x: x['request_rate_per_s']):.3f} req/s "
          f"{med(key, lambda x: x['output_token_rate_per_s']):.1f} tok/s  TTFT P50 "
          f"{med(key, lambda x: x['ttft_ms']['p50']):.0f} P99 {med(key, lambda x: x['ttft_ms']['p99']):.0f} ms"
          f"  E2E P50 {med(key, lambda x: x['e2e_ms']['p50']):.0f} ms  prompt tokens "
          f"{med(key, lambda x: x['reported_prompt_tokens_mean']):.0f}  failed "
          f"{sum(x['failed'] for x in runs[key].values())}")
if ("strata", "first") in runs and ("strata-nol2", "first") in runs:
    r = med(("strata", "first"), lambda x: x['ttft_ms']['p50']) / med(("strata-nol2", "first"), lambda x: x['ttft_ms']['p50'])
    print(f"  TTFT P50 with L2 / without L2 (phase first, same load): {r:.3f}x (target <= 0.2x)")
for phase in ("first", "warm", "all"):
    s, l = runs.get(("strata", phase), {}), runs.get(("llama", phase), {})
    both = sorted(set(s) & set(l))
    if both:
        per = [s[k]["output_token_rate_per_s"] / l[k]["output_token_rate_per_s"] for k in both]
        print(f"  throughput strata / llama-server, {phase}: " + ", ".join(f"{x:.2f}" for x in per) +
              f"; median {statistics.median(per):.2f}x (target >= 3x)")
PY
