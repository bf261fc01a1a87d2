#!/usr/bin/env bash
# What recording request snapshots costs (docs/benchmarks.md, "Request
# snapshots").
#
#   bench/snapshots.sh OUT_DIR
#
# `strata serve` on $MODEL, without and with --snapshots (a fresh directory
# each time), alternating $ROUNDS (5) times, one server at a time:
#   miss  loadgen -c 4 -n $MISSES (300): unseeded sampled chat requests of 32
#         tokens; every one is generated and recorded.
#   hit   loadgen -c 4 -n $HITS (3000) of one greedy chat request: after the
#         first, each is an L1 hit, the cheapest request there is, so the
#         recording's share shows most; every hit is recorded too.
# For each run: requests/s, end-to-end P50 and P99, and from /metrics the
# snapshots written and dropped; the start-up time ("ready in") of each
# server. Prints the medians per configuration and writes OUT_DIR/*.json.
# Env: STRATA (build/release/strata), LOADGEN (build/release/bench/loadgen),
# MODEL (../shared/models/stories260K.gguf), ROUNDS, MISSES, HITS, PORT (18300).
set -euo pipefail
if [ $# -lt 1 ] || [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
  [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ] && exit 0
  exit 2
fi
out="$1"
cd "$(dirname "$0")/.."
strata="${STRATA:-build/release/strata}" loadgen="${LOADGEN:-build/release/bench/loadgen}"
model="${MODEL:-../shared/models/stories260K.gguf}" rounds="${ROUNDS:-5}"
misses="${MISSES:-300}" hits="${HITS:-3000}" port="${PORT:-18300}"
for b in "$strata" "$loadgen"; do
  [ -x "$b" ] || { echo "error: '$b' is not built (cmake --build --preset release)" >&2; exit 2; }
done
[ -f "$model" ] || { echo "error: no model at '$model' (MODEL=...)" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
# shellcheck source=bench/lib.sh
source bench/lib.sh

openssl rand -hex 32 > "$out/snapshot.key"
printf '%s\n' '"Tell me a story about a cat and a dog"' > "$out/hit.jsonl"

metric() {  # NAME: its value on /metrics (0 when absent)
  curl -s "http://127.0.0.1:$port/metrics" |
    awk -v m="$1" '$1 == m { v = $2 } END { print v == "" ? 0 : v }'
}

run() {  # CONFIG ROUND
  local config="$1" round="$2" extra=()
  if [ "$config" = on ]; then
    rm -rf "$out/snaps"
    extra=(--snapshots "$out/snaps" --snapshot-key-file "$out/snapshot.key")
  fi
  "$strata" serve -m "$model" --port "$port" -t 1 --ctx 512 "${extra[@]}" \
    > "$out/serve-$config-$round.log" 2>&1 &
  pid=$!
  "$loadgen" --url "http://127.0.0.1:$port" --wait-ready 60 -q -c 4 -n "$misses" \
    --prompt-tokens 16 --max-tokens 32 --temperature 0.8 --seed "$round" \
    --json "$out/miss-$config-$round.json" > /dev/null
  "$loadgen" --url "http://127.0.0.1:$port" -q -c 4 -n "$hits" --prompt-file "$out/hit.jsonl" \
    --max-tokens 32 --temperature 0 --json "$out/hit-$config-$round.json" > /dev/null
  sleep 1  # the last snapshots reach the disk
  local written dropped ready
  written=$(metric strata_snapshots_written_total)
  dropped=$(curl -s "http://127.0.0.1:$port/metrics" |
    awk '/^strata_snapshots_dropped_total/ { s += $2 } END { print s + 0 }')
  stop_server
  ready=$(sed -n 's/.*ready in \([0-9]*\) ms.*/\1/p' "$out/serve-$config-$round.log")
  printf '{"config":"%s","round":%s,"written":%s,"dropped":%s,"ready_ms":%s}\n' \
    "$config" "$round" "${written:-0}" "${dropped:-0}" "${ready:-0}" >> "$out/runs.jsonl"
  echo "round $round $config: written $written dropped $dropped ready ${ready} ms" >&2
}

: > "$out/runs.jsonl"
for round in $(seq 1 "$rounds"); do
  # Alternate which goes first, so drift in the machine's load hits both.
  if [ $((round % 2)) -eq 1 ]; then run off "$round"; run on "$round"; else run on "$round"; run off "$round"; fi
done

python3 - "$out" "$rounds" "$((misses + hits))" <<'EOF'
import json, statistics, sys
out, rounds, per_run = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
runs = [json.loads(l) for l in open(f"{out}/runs.jsonl")]
def med(xs): return statistics.median(xs)
rows = {}
for config in ("off", "on"):
    for kind in ("miss", "hit"):
        s = [json.load(open(f"{out}/{kind}-{config}-{r}.json"))["summary"] for r in range(1, rounds + 1)]
        rows[(config, kind)] = (med([x["request_rate_per_s"] for x in s]),
                                med([x["e2e_ms"]["p50"] for x in s]),
                                med([x["e2e_ms"]["p99"] for x in s]),
                                sum(x["failed"] for x in s))
print(f"medians of {rounds} rounds")
print("| requests | snapshots | req/s | e2e P50 ms | e2e P99 ms | failed |")
print("|---|---|---|---|---|---|")
for kind in ("miss", "hit"):
    for config in ("off", "on"):
        r = rows[(config, kind)]
        print(f"| {kind} | {config} | {r[0]:.1f} | {r[1]:.2f} | {r[2]:.2f} | {r[3]} |")
for kind in ("miss", "hit"):
    off, on = rows[("off", kind)], rows[("on", kind)]
    print(f"{kind}: on/off req/s {on[0] / off[0]:.3f}, P50 {on[1] / off[1]:.3f}, P99 {on[2] / off[2]:.3f}")
on = [r for r in runs if r["config"] == "on"]
off = [r for r in runs if r["config"] == "off"]
print(f"snapshots per run: written median {med([r['written'] for r in on]):.0f}, "
      f"dropped median {med([r['dropped'] for r in on]):.0f}, of {per_run} requests")
print(f"ready in: off median {med([r['ready_ms'] for r in off])} ms, on median {med([r['ready_ms'] for r in on])} ms")
EOF
