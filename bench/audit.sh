#!/usr/bin/env bash
# What the audit log and the response watermark cost per request: three
# `strata serve` on the same model and threads, loadgen driving one at a
# time, the order rotating each round (docs/benchmarks.md, "Audit log and
# watermark"):
#   plain    no audit, no watermark
#   audited  --audit-log, --audit-key-file (Ed25519 checkpoints every 1000
#            records), --watermark-key-file
#   tokens   the same and --audit-tokens (each token's id and logprob)
#
#   bench/audit.sh MODEL.gguf OUT_DIR
#
# Scenarios (closed loop, $CONC clients, streamed as loadgen does):
#   hits  every request the same deterministic prompt: after the first, L1
#         hits, the cheapest request there is, where the per-request cost of
#         hashing, signing and recording shows most
#   gen   every request generated ("no_cache": true): $GEN tokens after a
#         $PROMPT-token prompt
# Each run also reads the server's CPU time (/proc/PID/stat, user + system)
# before and after: CPU per request is steadier than throughput on a shared
# machine. Afterwards each audited server's log must pass `strata audit
# verify` with the public key and hold a record per request.
#
# Env: THREADS (1), CONC (8), SECONDS_PER_RUN (5), ROUNDS (6), GEN (8),
# PROMPT (16), STRATA (build/release/strata), LOADGEN
# (build/release/bench/loadgen), PORT (18390; the others take PORT+1, +2).
set -euo pipefail
if [ $# -lt 2 ] || [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'
  [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ] && exit 0
  exit 2
fi
model="$1" out="$2"
strata="${STRATA:-build/release/strata}" loadgen="${LOADGEN:-build/release/bench/loadgen}"
threads="${THREADS:-1}" conc="${CONC:-8}" secs="${SECONDS_PER_RUN:-5}" rounds="${ROUNDS:-6}"
gen="${GEN:-8}" prompt="${PROMPT:-16}" port="${PORT:-18390}"
[ -x "$strata" ] || { echo "error: '$strata' is not built (cmake --build --preset release)" >&2; exit 2; }
[ -x "$loadgen" ] || { echo "error: '$loadgen' is not built" >&2; exit 2; }
[ -f "$model" ] || { echo "error: no model file '$model'" >&2; exit 2; }
command -v openssl >/dev/null || { echo "error: the openssl command makes the keys" >&2; exit 2; }
rm -rf "$out" && mkdir -p "$out"
openssl genpkey -algorithm ed25519 -out "$out/audit.pem" 2>/dev/null
openssl pkey -in "$out/audit.pem" -pubout -out "$out/audit.pub"
openssl rand -hex 32 >"$out/watermark.key"
echo '"Once upon a time there was a little girl"' >"$out/prompt.jsonl"

sides=(plain audited tokens)
declare -A pid_of port_of
trap 'for s in "${sides[@]}"; do [ -n "${pid_of[$s]:-}" ] && kill -TERM "${pid_of[$s]}" 2>/dev/null; done; wait' EXIT
i=0
for side in "${sides[@]}"; do
  args=(serve -m "$model" -t "$threads" --log-level warn --port $((port + i)))
  if [ "$side" != plain ]; then
    args+=(--audit-log "$out/$side-audit/audit.log" --audit-key-file "$out/audit.pem"
      --watermark-key-file "$out/watermark.key")
  fi
  [ "$side" = tokens ] && args+=(--audit-tokens)
  "$strata" "${args[@]}" >"$out/$side.log" 2>&1 &
  pid_of[$side]=$!
  port_of[$side]=$((port + i))
  i=$((i + 1))
done
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

run() {  # run SIDE SCENARIO ROUND
  local side=$1 scenario=$2 round=$3 extra=() t0 tag="$2-$1-r$3"
  if [ "$scenario" = gen ]; then
    extra=(--extra-body '{"no_cache":true}' --max-tokens "$gen" --prompt-tokens "$prompt"
      --temperature 0)
  else
    extra=(--prompt-file "$out/prompt.jsonl" --max-tokens 16 --temperature 0)
  fi
  t0=$(cpu_ticks "${pid_of[$side]}")
  "$loadgen" --url "http://127.0.0.1:${port_of[$side]}" -c "$conc" --duration "$secs" \
    --wait-ready 60 -q --fail-on-error "${extra[@]}" --json "$out/$tag.json" >/dev/null
  echo $(($(cpu_ticks "${pid_of[$side]}") - t0)) >"$out/$tag.ticks"
}
for scenario in hits gen; do
  for round in $(seq 1 "$rounds"); do
    for k in 0 1 2; do run "${sides[$(((round + k) % 3))]}" "$scenario" "$round"; done
  done
done
for side in "${sides[@]}"; do kill -TERM "${pid_of[$side]}"; wait "${pid_of[$side]}" || true; done
pid_of=()

python3 - "$out" "$rounds" "$strata" <<'PY'
import glob, json, os, statistics, subprocess, sys
out, rounds, strata = sys.argv[1], int(sys.argv[2]), sys.argv[3]
hz = os.sysconf("SC_CLK_TCK")
def summary(scenario, side, r):
    s = json.load(open(f"{out}/{scenario}-{side}-r{r}.json"))["summary"]
    s["cpu_us"] = int(open(f"{out}/{scenario}-{side}-r{r}.ticks").read()) / hz / s["requests"] * 1e6
    return s
for side in ("audited", "tokens"):
    files = sorted(glob.glob(f"{out}/{side}-audit/audit.log*"))
    v = subprocess.run([strata, "audit", "verify", "--key-file", f"{out}/audit.pub", *files],
                       capture_output=True, text=True)
    records = sum(open(f).read().count('"type":"request"') for f in files)
    sent = sum(summary(sc, side, r)["requests"] for sc in ("hits", "gen") for r in range(1, rounds + 1))
    print(f"{side}: {records} request records for {sent} requests measured; "
          f"audit verify: exit {v.returncode}, {v.stdout.strip().splitlines()[-1]}")
    if v.returncode != 0 or records < sent:
        sys.exit(f"{side}: the audit log is not complete and intact:\n{v.stdout}")
print()
print("| scenario | side | req/s | vs plain (median of rounds) | P50 / P99 ms | server CPU per request | vs plain (median of rounds) |")
print("|---|---|---|---|---|---|---|")
for scenario in ("hits", "gen"):
    runs = {side: [summary(scenario, side, r) for r in range(1, rounds + 1)]
            for side in ("plain", "audited", "tokens")}
    for side, s in runs.items():
        rate = statistics.median(x["request_rate_per_s"] for x in s)
        p50 = statistics.median(x["e2e_ms"]["p50"] for x in s)
        p99 = statistics.median(x["e2e_ms"]["p99"] for x in s)
        cpu = statistics.median(x["cpu_us"] for x in s)
        if side == "plain":
            ratio, dcpu = "", ""
        else:
            ratio = f"{statistics.median(a['request_rate_per_s'] / p['request_rate_per_s'] for p, a in zip(runs['plain'], s)):.3f}"
            dcpu = f"{statistics.median(a['cpu_us'] - p['cpu_us'] for p, a in zip(runs['plain'], s)):+.0f} µs"
        print(f"| {scenario} | {side} | {rate:.0f} | {ratio} | {p50:.2f} / {p99:.2f} | {cpu:.0f} µs | {dcpu} |")
PY
