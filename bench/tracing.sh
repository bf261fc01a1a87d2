#!/usr/bin/env bash
# What OpenTelemetry tracing costs a cheap request (docs/benchmarks.md,
# "Tracing overhead").
#
#   bench/tracing.sh OUT_DIR
#
# Three `strata serve` on one random-weight `strata mkmodel` model, L1 on,
# so that after one warm-up every request is an L1 hit (the cheapest full
# request path: parse, template, tokenize, look up, replay, render):
#   off    no --otlp-endpoint (no tracer, no exporter)
#   rate0  --otlp-endpoint --trace-sample 0: every request sampled out
#   rate1  --otlp-endpoint --trace-sample 1: every request recorded (a root
#          span and an L1 lookup span) and exported
# to an OTLP/HTTP receiver on loopback (a Python server that reads each
# POST and answers 200; it shares the CPU with everything else).
# Per round ($ROUNDS, the order rotating): netbench latency, one kept-alive
# client for $LAT_S s, non-streaming (latency) and streaming (time to first
# byte); then loadgen, $CONC clients streaming back to back for $LOAD_S s
# (requests/s). The servers' CPU per request at c=1 from /proc. Medians of
# rounds, and same-round ratios to "off".
#
# Env: STRATA (build/release/strata), NETBENCH (build/release/bench/netbench),
# LOADGEN (build/release/bench/loadgen), ROUNDS (3), LAT_S (5), LOAD_S (5),
# CONC (16), PORT (18700). Needs curl and python3.
set -euo pipefail
if [ $# -lt 1 ] || [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'
  [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ] && exit 0
  exit 2
fi
out="$1"
cd "$(dirname "$0")/.."
strata="${STRATA:-build/release/strata}" netbench="${NETBENCH:-build/release/bench/netbench}"
loadgen="${LOADGEN:-build/release/bench/loadgen}" rounds="${ROUNDS:-3}" lat_s="${LAT_S:-5}"
load_s="${LOAD_S:-5}" conc="${CONC:-16}" port="${PORT:-18700}"
for bin in "$strata" "$netbench" "$loadgen"; do
  [ -x "$bin" ] || { echo "error: '$bin' is not built (cmake --build --preset release)" >&2; exit 2; }
done
mkdir -p "$out"
out=$(cd "$out" && pwd)

pids=()
start() {
  local log="$1"
  shift
  "$@" >"$log" 2>&1 &
  pids+=($!)
}
stop_all() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap stop_all EXIT
wait_ready() {
  for _ in $(seq 600); do
    curl -sf -o /dev/null "http://127.0.0.1:$1/health" && return 0
    sleep 0.05
  done
  echo "error: nothing answers /health on port $1:" >&2
  cat "$2" >&2
  exit 1
}
metric() {
  curl -sf "http://127.0.0.1:$1/metrics" | awk -v n="$2" -v f="${3:-}" '
    ($1 == n || index($1, n "{") == 1) && (f == "" || index($1, f)) { s += $NF }
    END { printf "%.0f\n", s }'
}
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rotate() {
  local r="$1"
  shift
  local a=("$@")
  local k=$(((r - 1) % ${#a[@]}))
  echo "${a[@]:$k}" "${a[@]:0:$k}"
}

cpu="$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores"
echo "== CPU: $cpu; load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/cpu.txt"

model="$out/demo.gguf"
[ -f "$model" ] || "$strata" mkmodel --dims n_embd=64,n_layers=2,n_heads=2,n_ff=128,n_ctx=2048 \
  -o "$model" --log-level error
chat='{"model":"demo","temperature":0,"max_tokens":32,"messages":[{"role":"user","content":"hello there"}]}'
printf '%s' "$chat" >"$out/chat.json"
printf '%s' "${chat%\}},\"stream\":true}" >"$out/stream.json"
echo '"hello there"' >"$out/prompts.jsonl"

recv=$((port + 9))
cat >"$out/receiver.py" <<'PY'
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        # One write: a head and a body sent apart meet the client's delayed
        # ACK on a kept-alive connection (Nagle), 40 ms per answer.
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 2\r\n\r\n{}")
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
start "$out/receiver.log" python3 "$out/receiver.py" "$recv"
declare -A side_port side_pid
i=0
for side in off rate0 rate1; do
  p=$((port + i))
  i=$((i + 1))
  extra=()
  case "$side" in
    rate0) extra=(--otlp-endpoint "http://127.0.0.1:$recv" --trace-sample 0) ;;
    rate1) extra=(--otlp-endpoint "http://127.0.0.1:$recv" --trace-sample 1) ;;
  esac
  start "$out/$side.log" "$strata" serve -m "$model" --alias demo --port "$p" --log-level warn \
    "${extra[@]}"
  side_port[$side]=$p
  side_pid[$side]=${pids[-1]}
  wait_ready "$p" "$out/$side.log"
  for b in chat stream; do  # into L1: every later request is a hit
    curl -sf -o /dev/null -H 'Content-Type: application/json' --data-binary "@$out/$b.json" \
      "http://127.0.0.1:$p/v1/chat/completions"
  done
done

: >"$out/ticks.txt"
for r in $(seq "$rounds"); do
  for side in $(rotate "$r" off rate0 rate1); do
    p=${side_port[$side]}
    for kind in chat stream; do
      t0=$(ticks "${side_pid[$side]}")
      "$netbench" latency --port "$p" --body "$out/$kind.json" --seconds "$lat_s" \
        --json "$out/$side-$kind-r$r.json" >/dev/null
      echo "$side $r $kind $(($(ticks "${side_pid[$side]}") - t0))" >>"$out/ticks.txt"
    done
    "$loadgen" --url "http://127.0.0.1:$p" --model demo --prompt-file "$out/prompts.jsonl" \
      --temperature 0 --max-tokens 32 -c "$conc" --duration "$load_s" -q \
      --json "$out/$side-load-r$r.json" >/dev/null
    echo "  round $r: $side done"
  done
done
for side in off rate0 rate1; do
  p=${side_port[$side]}
  echo "$side exported=$(metric "$p" strata_trace_spans_exported_total)" \
    "dropped=$(metric "$p" strata_trace_spans_dropped_total)" \
    "sampled=$(metric "$p" strata_trace_requests_total 'sampled="true"')" \
    "unsampled=$(metric "$p" strata_trace_requests_total 'sampled="false"')" >>"$out/spans.txt"
done
stop_all
python3 - "$out" "$rounds" <<'PY' | tee "$out/summary.txt"
import json, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
sides = ("off", "rate0", "rate1")
ticks = {}
for line in open(f"{d}/ticks.txt"):
    s, r, kind, t = line.split()
    n = json.load(open(f"{d}/{s}-{kind}-r{r}.json"))["requests"]
    ticks[(s, kind, int(r))] = int(t) * 1e4 / n  # microseconds of CPU per request
v = {}
for s in sides:
    for r in range(1, rounds + 1):
        ch = json.load(open(f"{d}/{s}-chat-r{r}.json"))
        st = json.load(open(f"{d}/{s}-stream-r{r}.json"))
        ld = json.load(open(f"{d}/{s}-load-r{r}.json"))["summary"]
        v[(s, r)] = {"lat50": ch["total"]["p50_ms"], "lat99": ch["total"]["p99_ms"],
                     "ttfb50": st["first_byte"]["p50_ms"], "ttfb99": st["first_byte"]["p99_ms"],
                     "rps": ld["request_rate_per_s"], "e2e50": ld["e2e_ms"]["p50"],
                     "cpu": ticks[(s, "chat", r)], "failed": ch["total"]["failed"]
                     + st["first_byte"]["failed"] + ld["failed"]}
R = range(1, rounds + 1)
med = lambda s, k: statistics.median(v[(s, r)][k] for r in R)
print(f"medians of {rounds} rounds (c=1: netbench latency; c=load: loadgen, streaming)")
print(f"  {'side':6s} {'chat P50':>9s} {'P99':>8s} {'stream TTFB P50':>16s} {'P99':>8s} "
      f"{'req/s':>8s} {'e2e P50':>8s} {'CPU/req c=1':>12s} failed")
for s in sides:
    print(f"  {s:6s} {med(s, 'lat50'):7.3f}ms {med(s, 'lat99'):6.3f}ms {med(s, 'ttfb50'):14.3f}ms "
          f"{med(s, 'ttfb99'):6.3f}ms {med(s, 'rps'):8.0f} {med(s, 'e2e50'):6.2f}ms "
          f"{med(s, 'cpu'):10.0f}us {sum(v[(s, r)]['failed'] for r in R)}")
for s in ("rate0", "rate1"):
    ratio = lambda k: statistics.median(v[(s, r)][k] / v[("off", r)][k] for r in R)
    diff = lambda k: statistics.median(v[(s, r)][k] - v[("off", r)][k] for r in R)
    print(f"{s} vs off (medians of same-round ratios / differences): chat P50 {ratio('lat50'):.3f}x "
          f"({diff('lat50'):+.3f} ms), stream TTFB P50 {ratio('ttfb50'):.3f}x "
          f"({diff('ttfb50'):+.3f} ms), throughput {ratio('rps'):.3f}x, CPU/request at c=1 "
          f"{ratio('cpu'):.3f}x ({diff('cpu'):+.0f} us)")
print("per round (chat P50 ms, req/s): " + "; ".join(
    f"r{r} " + ", ".join(f"{s} {v[(s, r)]['lat50']:.3f}/{v[(s, r)]['rps']:.0f}" for s in sides)
    for r in R))
print(open(f"{d}/spans.txt").read().rstrip())
PY
