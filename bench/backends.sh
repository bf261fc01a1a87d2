#!/usr/bin/env bash
# strata serve in front of other model servers (--backend openai:URL[,URL...]):
# what the gateway adds to a request, what prefix-affinity routing saves over
# round-robin, and what the response tiers save the upstream
# (docs/benchmarks.md, "Remote backends").
#
#   bench/backends.sh OUT_DIR
#
# Parts ($PARTS, default "overhead pacing affinity mooncake faq"), all on 127.0.0.1:
#   overhead  A fast upstream: strata serving a random-weight `strata mkmodel`
#             model with its L1 on (every request an L1 hit after one warm-up).
#             Reached three ways, the order rotating over $ROUNDS rounds: direct;
#             through nginx (proxy_pass, proxy_buffering off, kept-alive
#             upstream connections); through strata serve --backend
#             openai:UPSTREAM --l1-bytes 0 --no-coalesce (every request
#             forwarded). Per side and round: netbench latency (one kept-alive
#             client, $LAT_S s) of a streaming request (time to its first body
#             byte) and a non-streaming one (latency), then wrk at concurrency
#             64 ($WRK_S s, requests/s), non-streaming and then streaming. The
#             upstream's request count checks that every request was forwarded.
#             PIN=1 gives the proxies a core of their own, as a gateway on its
#             own host has: the upstream and the clients run on CPU 0, nginx
#             and the strata front on CPU 1 (taskset; needs 2 CPUs).
#   pacing    An upstream that generates at a model's pace (strata serve -m
#             $REPLICA_MODEL -t 1, L1 off), reached directly and through strata
#             serve --backend, the order rotating over $ROUNDS rounds: loadgen,
#             one client, $PACE_REQUESTS streamed chats of $PACE_TOKENS tokens
#             each (ignore_eos, temperature 0, the same prompts both ways). The
#             front's added TTFT and time per output token (TPOT: the gap
#             between tokens) are the same-round differences.
#   affinity  $REPLICAS upstream replicas (strata serve -m $REPLICA_MODEL -t 1
#             --kv-tokens $KV_TOKENS, L1 off) behind strata serve --backend
#             openai:R1,R2,... with --backend-routing affinity or round-robin
#             (--backend-affinity-bytes $AFFINITY_BYTES). loadgen chats: one of
#             $SYSTEMS system prompts of $SYSTEM words each, then a $QUESTION-word
#             question, $GEN tokens, $USERS clients; $WARM requests warm the
#             replicas, then $REQUESTS are measured. Fresh servers per policy
#             and round, the policy order rotating. $POLICIES (default
#             "affinity round-robin") may add affinity-floorN: affinity with
#             --backend-affinity-floor N. Cached-token ratio from the front's
#             strata_backend_{cached,prompt}_tokens_total.
#   mooncake  The same fleet (--kv-tokens $MC_KV_TOKENS), once per policy,
#             replaying the first $MC_REQUESTS requests of the Mooncake
#             conversation trace (arrival times and prefix-block hash ids;
#             prompts at --block-scale $MC_SCALE, at most $MC_PROMPT words, $GEN
#             tokens, --speedup $MC_SPEEDUP, affinity on $MC_AFFINITY_BYTES bytes).
#   instructions  The strata front's user-space instructions per forwarded
#             request (callgrind; one client, $INSTR_REQUESTS non-streaming and
#             then streaming requests after a warm-up), for each build in
#             $INSTR_BUILDS (default: $STRATA): exact, so builds compare on a
#             noisy machine. Needs valgrind; not in the default $PARTS.
#   faq       bench/faq.sh's workload (bench/faq_workload.py: real questions
#             repeated with a Zipf popularity and retyped) through strata serve
#             --backend --l3 on (L1 and coalescing on) in front of one upstream
#             whose own caches are off; per round, fresh servers: the upstream's
#             chat requests (its strata_http_requests_total) against the
#             client's, and TTFT by how the front served each (x-strata-cache).
#
# Env: STRATA (build/release/strata), NETBENCH (build/release/bench/netbench), PIN (0),
# LOADGEN (build/release/bench/loadgen), SHARED (../shared: models/ and data/),
# REPLICA_MODEL ($SHARED/models/stories260K.gguf, else a mkmodel model), PARTS,
# ROUNDS (3), PORT (18600), LAT_S (5), WRK_S (5), REPLICAS (3), KV_TOKENS
# (4096), AFFINITY_BYTES (256), SYSTEMS (12), SYSTEM (200), QUESTION (8), GEN
# (8), USERS (4), WARM (48), REQUESTS (90), POLICIES, MC_REQUESTS (500), MC_SCALE
# (0.004), MC_PROMPT (80), MC_SPEEDUP (2), MC_AFFINITY_BYTES (24), MC_KV_TOKENS
# (24576), FAQ_REQUESTS (240), FAQ_CONC (4), PACE_REQUESTS (30), PACE_TOKENS
# (64), INSTR_REQUESTS (300), INSTR_BUILDS. Needs wrk, nginx and curl
# (installed here when missing).
# Writes OUT_DIR/PART/* and prints each part's summary (also PART/summary.txt).
set -euo pipefail
if [ $# -lt 1 ] || [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,69p' "$0" | sed 's/^# \{0,1\}//'
  [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ] && exit 0
  exit 2
fi
out="$1"
cd "$(dirname "$0")/.."
source scripts/lib.sh
STRATA_PACKAGES=(wrk nginx curl)
[[ " ${PARTS:-} " == *" instructions "* ]] && STRATA_PACKAGES+=(valgrind)
strata_ensure_packages
strata="${STRATA:-build/release/strata}" netbench="${NETBENCH:-build/release/bench/netbench}"
loadgen="${LOADGEN:-build/release/bench/loadgen}" shared="${SHARED:-../shared}"
parts="${PARTS:-overhead pacing affinity mooncake faq}" rounds="${ROUNDS:-3}" port="${PORT:-18600}"
lat_s="${LAT_S:-5}" wrk_s="${WRK_S:-5}" replicas="${REPLICAS:-3}" kv="${KV_TOKENS:-4096}"
affinity_bytes="${AFFINITY_BYTES:-256}" systems="${SYSTEMS:-12}" system="${SYSTEM:-200}"
question="${QUESTION:-8}" gen="${GEN:-8}" users="${USERS:-4}" warm="${WARM:-48}"
requests="${REQUESTS:-90}" mc_requests="${MC_REQUESTS:-500}" mc_scale="${MC_SCALE:-0.004}"
mc_prompt="${MC_PROMPT:-80}" mc_speedup="${MC_SPEEDUP:-2}"
mc_affinity_bytes="${MC_AFFINITY_BYTES:-24}" mc_kv="${MC_KV_TOKENS:-24576}" faq_requests="${FAQ_REQUESTS:-240}"
faq_conc="${FAQ_CONC:-4}" policies="${POLICIES:-affinity round-robin}"
pace_requests="${PACE_REQUESTS:-30}" pace_tokens="${PACE_TOKENS:-64}"
for bin in "$strata" "$netbench" "$loadgen"; do
  [ -x "$bin" ] || { echo "error: '$bin' is not built (cmake --build --preset release)" >&2; exit 2; }
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
ulimit -n "$(ulimit -Hn)"

# --- servers ------------------------------------------------------------------

pids=()
# start LOG CMD...: runs CMD in the background.
start() {
  local log="$1"
  shift
  "$@" >"$log" 2>&1 &
  pids+=($!)
}
# stop_all: SIGTERM to everything started, then waits for it.
stop_all() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap stop_all EXIT
# wait_ready PORT LOG: until GET /health answers 200.
wait_ready() {
  for _ in $(seq 600); do
    curl -sf -o /dev/null "http://127.0.0.1:$1/health" && return 0
    sleep 0.05
  done
  echo "error: nothing answers /health on port $1:" >&2
  cat "$2" >&2
  exit 1
}
# metric PORT NAME [FILTER]: the sum of NAME's samples whose labels contain FILTER.
metric() {
  curl -sf "http://127.0.0.1:$1/metrics" | awk -v n="$2" -v f="${3:-}" '
    ($1 == n || index($1, n "{") == 1) && (f == "" || index($1, f)) { s += $NF }
    END { printf "%.0f\n", s }'
}
chat_requests() { metric "$1" strata_http_requests_total 'endpoint="/v1/chat/completions"'; }
# ticks PID...: user + system CPU of the processes so far, in clock ticks.
ticks() {
  local s=0 p
  for p in "$@"; do s=$((s + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo "$s"
}
# rotate ROUND WORD...: the words, starting at (ROUND - 1) mod their count.
rotate() {
  local r="$1"
  shift
  local a=("$@")
  local k=$(((r - 1) % ${#a[@]}))
  echo "${a[@]:$k}" "${a[@]:0:$k}"
}

cpu="$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores"
echo "== CPU: $cpu; load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/cpu.txt"

replica_model="${REPLICA_MODEL:-$shared/models/stories260K.gguf}"
if [ ! -f "$replica_model" ]; then
  # No trained model at hand: a random one whose prefill costs something.
  replica_model="$out/replica.gguf"
  [ -f "$replica_model" ] || "$strata" mkmodel --dims n_embd=256,n_layers=4,n_heads=4,n_ff=768,n_ctx=2048 \
    -o "$replica_model" --log-level error
fi

# demo_upstream DIR: the fast upstream's random-weight model (DIR/demo.gguf)
# and the two requests sent to it (DIR/chat.json, DIR/stream.json).
demo_upstream() {
  [ -f "$1/demo.gguf" ] || "$strata" mkmodel --dims n_embd=64,n_layers=2,n_heads=2,n_ff=128,n_ctx=2048 \
    -o "$1/demo.gguf" --log-level error
  local chat='{"model":"demo","temperature":0,"max_tokens":32,"messages":[{"role":"user","content":"hello there"}]}'
  printf '%s' "$chat" >"$1/chat.json"
  printf '%s' "${chat%\}},\"stream\":true}" >"$1/stream.json"
}

# --- 1. gateway overhead ------------------------------------------------------

part_overhead() {
  local d="$out/overhead"
  mkdir -p "$d/nginx/logs"
  local up=$port front=$((port + 1)) ngx=$((port + 2))
  # PIN=1: the upstream and clients on CPU 0, the proxies on CPU 1.
  local on_up=() on_proxy=()
  if [ "${PIN:-0}" = 1 ]; then
    [ "$(nproc)" -ge 2 ] || { echo "PIN=1 needs 2 CPUs" >&2; return 1; }
    on_up=(taskset -c 0) on_proxy=(taskset -c 1)
    echo "  pinned: upstream and clients on CPU 0, nginx and the strata front on CPU 1"
  fi
  demo_upstream "$d"
  local model="$d/demo.gguf"
  cat >"$d/post.lua" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [[$(cat "$d/chat.json")]]
EOF
  cat >"$d/post-stream.lua" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [[$(cat "$d/stream.json")]]
EOF
  cat >"$d/nginx/nginx.conf" <<EOF
worker_processes 2;
error_log $d/nginx/logs/error.log;
pid $d/nginx/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  upstream strata { server 127.0.0.1:$up; keepalive 128; }
  server {
    listen 127.0.0.1:$ngx;
    location / {
      proxy_pass http://strata;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
EOF
  start "$d/upstream.log" "${on_up[@]}" "$strata" serve -m "$model" --alias demo --port "$up" \
    --log-level warn --parallel 16
  local up_pid=${pids[-1]}
  wait_ready "$up" "$d/upstream.log"
  start "$d/front.log" "${on_proxy[@]}" "$strata" serve --backend "openai:http://127.0.0.1:$up" \
    --backend-name demo --l1-bytes 0 --no-coalesce --port "$front" --log-level warn
  local front_pid=${pids[-1]}
  wait_ready "$front" "$d/front.log"
  start "$d/nginx.log" "${on_proxy[@]}" nginx -p "$d/nginx" -c "$d/nginx/nginx.conf" -g 'daemon off;'
  local ngx_pids="${pids[-1]}"
  wait_ready "$ngx" "$d/nginx.log"
  ngx_pids="$ngx_pids $(pgrep -P "$ngx_pids" | tr '\n' ' ')"
  # One answer of each kind into the upstream's L1; every later request is a hit.
  local p
  for p in "$up" "$ngx" "$front"; do
    for b in chat stream; do
      curl -sf -o /dev/null -H 'Content-Type: application/json' --data-binary "@$d/$b.json" \
        "http://127.0.0.1:$p/v1/chat/completions"
    done
  done
  : >"$d/counts.txt"
  : >"$d/cpu.txt"
  local r side proxy kind
  for r in $(seq "$rounds"); do
    for side in $(rotate "$r" direct nginx strata); do
      case "$side" in
        direct) p=$up proxy="" ;;
        nginx) p=$ngx proxy=$ngx_pids ;;
        *) p=$front proxy=$front_pid ;;
      esac
      local before after
      before=$(chat_requests "$up")
      for kind in stream chat; do
        # CPU ticks (1/100 s) of the proxy and of the upstream around the run.
        local t0 u0
        t0=$(ticks $proxy) u0=$(ticks "$up_pid")
        "${on_up[@]}" "$netbench" latency --port "$p" --body "$d/$kind.json" --seconds "$lat_s" \
          --json "$d/$side-$kind-r$r.json" >/dev/null
        echo "$side $r $kind $(($(ticks $proxy) - t0)) $(($(ticks "$up_pid") - u0))" >>"$d/cpu.txt"
      done
      "${on_up[@]}" wrk -t 2 -c 64 -d "${wrk_s}s" --latency -s "$d/post.lua" \
        "http://127.0.0.1:$p/v1/chat/completions" >"$d/wrk-$side-r$r.txt"
      "${on_up[@]}" wrk -t 2 -c 64 -d "${wrk_s}s" --latency -s "$d/post-stream.lua" \
        "http://127.0.0.1:$p/v1/chat/completions" >"$d/wrk-stream-$side-r$r.txt"
      after=$(chat_requests "$up")
      echo "$side $r $((after - before))" >>"$d/counts.txt"
      echo "  round $r: $side done"
    done
  done
  stop_all
  python3 - "$d" "$rounds" <<'PY' | tee "$d/summary.txt"
import json, re, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
sides = ("direct", "nginx", "strata")
def wrk(path):
    t = open(path).read()
    def ms(v):
        m = re.match(r"([\d.]+)(us|ms|s)", v)
        return float(m[1]) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m[2]]
    n = int(re.search(r"(\d+) requests in", t)[1])
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
    return {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", t)[1]), "n": n,
            "p50": ms(re.search(r"\s50%\s+(\S+)", t)[1]), "p99": ms(re.search(r"\s99%\s+(\S+)", t)[1]),
            "bad": int(bad[1]) if bad else 0}
counts = {}
for line in open(f"{d}/counts.txt"):
    s, r, n = line.split()
    counts[(s, int(r))] = int(n)
cpu = {}  # (side, kind, round) -> (proxy, upstream) CPU microseconds per request
for line in open(f"{d}/cpu.txt"):
    s, r, kind, proxy, upstream = line.split()
    n = json.load(open(f"{d}/{s}-{kind}-r{r}.json"))["requests"]
    cpu[(s, kind, int(r))] = (int(proxy) * 1e4 / n, int(upstream) * 1e4 / n)
v = {}  # (side, round) -> measures
for s in sides:
    for r in range(1, rounds + 1):
        st = json.load(open(f"{d}/{s}-stream-r{r}.json"))
        ch = json.load(open(f"{d}/{s}-chat-r{r}.json"))
        w = wrk(f"{d}/wrk-{s}-r{r}.txt")
        ws = wrk(f"{d}/wrk-stream-{s}-r{r}.txt")
        client = st["requests"] + ch["requests"] + w["n"] + ws["n"]
        v[(s, r)] = {"ttfb50": st["first_byte"]["p50_ms"], "ttfb99": st["first_byte"]["p99_ms"],
                     "lat50": ch["total"]["p50_ms"], "lat99": ch["total"]["p99_ms"],
                     "rps": w["rps"], "w50": w["p50"], "w99": w["p99"], "srps": ws["rps"],
                     "failed": st["first_byte"]["failed"] + ch["total"]["failed"] + w["bad"]
                               + ws["bad"],
                     "forwarded": counts[(s, r)] / client}
med = lambda s, k: statistics.median(v[(s, r)][k] for r in range(1, rounds + 1))
print(f"medians of {rounds} rounds (c=1: netbench latency, one kept-alive client; c=64: wrk)")
print(f"  {'side':7s} {'stream TTFB P50':>15s} {'P99':>8s} {'chat P50':>9s} {'P99':>8s} "
      f"{'c64 req/s':>10s} {'c64 P50':>8s} {'P99':>8s} {'c64 stream/s':>12s}  upstream/client  failed")
for s in sides:
    print(f"  {s:7s} {med(s, 'ttfb50'):13.3f}ms {med(s, 'ttfb99'):6.3f}ms {med(s, 'lat50'):7.3f}ms "
          f"{med(s, 'lat99'):6.3f}ms {med(s, 'rps'):10.0f} {med(s, 'w50'):6.2f}ms {med(s, 'w99'):6.2f}ms"
          f" {med(s, 'srps'):12.0f}"
          f"  {med(s, 'forwarded'):15.3f}  {sum(v[(s, r)]['failed'] for r in range(1, rounds + 1))}")
print("per round: " + "; ".join(
    f"r{r} " + ", ".join(f"{s} {v[(s, r)]['lat50']:.3f}/{v[(s, r)]['ttfb50']:.3f} ms "
                         f"{v[(s, r)]['rps']:.0f}/s {v[(s, r)]['srps']:.0f} streams/s"
                         for s in sides) for r in range(1, rounds + 1)))
print("CPU per request at c=1 (median of rounds; /proc, 10 ms ticks): " + "; ".join(
    f"{s} {kind}: proxy {statistics.median(cpu[(s, kind, r)][0] for r in range(1, rounds + 1)):.0f} us, "
    f"upstream {statistics.median(cpu[(s, kind, r)][1] for r in range(1, rounds + 1)):.0f} us"
    for s in sides for kind in ("chat", "stream")))
def added(s, k):
    return statistics.median(v[(s, r)][k] - v[("direct", r)][k] for r in range(1, rounds + 1))
def ratio(s, k):
    return statistics.median(v[(s, r)][k] / v[("direct", r)][k] for r in range(1, rounds + 1))
for s in ("nginx", "strata"):
    a = {k: added(s, k) for k in ("ttfb50", "ttfb99", "lat50", "lat99")}
    t = ratio(s, "rps")
    ts = ratio(s, "srps")
    print(f"{s} vs direct (median of same-round differences): stream TTFB P50 +{a['ttfb50']:.3f} ms, "
          f"P99 +{a['ttfb99']:.3f} ms; non-streaming P50 +{a['lat50']:.3f} ms, P99 +{a['lat99']:.3f} ms; "
          f"throughput at c=64 {t:.3f}x, streaming {ts:.3f}x (medians of same-round ratios)")
    ok = lambda c: "met" if c else "NOT met"
    print(f"  targets: added P50 <= 1 ms {ok(max(a['ttfb50'], a['lat50']) <= 1)}; added P99 <= 5 ms "
          f"{ok(max(a['ttfb99'], a['lat99']) <= 5)}; throughput >= 0.95x {ok(min(t, ts) >= 0.95)}")
PY
}

# --- 2. streaming at a model's pace ----------------------------------------------

part_pacing() {
  local d="$out/pacing" up=$((port + 50)) front=$((port + 51)) r side p
  mkdir -p "$d"
  start "$d/upstream.log" "$strata" serve -m "$replica_model" --alias stories --port "$up" -t 1 \
    --l1-bytes 0 --no-coalesce --log-level warn
  wait_ready "$up" "$d/upstream.log"
  start "$d/front.log" "$strata" serve --backend "openai:http://127.0.0.1:$up" \
    --backend-name stories --l1-bytes 0 --no-coalesce --port "$front" --log-level warn
  wait_ready "$front" "$d/front.log"
  for r in $(seq "$rounds"); do
    for side in $(rotate "$r" direct strata); do
      p=$up
      [ "$side" = strata ] && p=$front
      "$loadgen" --url "http://127.0.0.1:$p" --model stories --endpoint chat --prompt-tokens 16 \
        --max-tokens "$pace_tokens" --ignore-eos --temperature 0 -c 1 -n "$pace_requests" \
        --seed 5 -q --json "$d/$side-r$r.json" >/dev/null
      echo "  round $r: $side done"
    done
  done
  stop_all
  python3 - "$d" "$rounds" <<'PY' | tee "$d/summary.txt"
import json, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
s = {(side, r): json.load(open(f"{d}/{side}-r{r}.json"))["summary"]
     for side in ("direct", "strata") for r in range(1, rounds + 1)}
def get(side, r, k, q):
    return s[(side, r)][k][q]
for side in ("direct", "strata"):
    med = lambda k, q: statistics.median(get(side, r, k, q) for r in range(1, rounds + 1))
    print(f"  {side:6s} TTFT P50 {med('ttft_ms', 'p50'):.3f} P99 {med('ttft_ms', 'p99'):.3f} ms; "
          f"TPOT P50 {med('tpot_ms', 'p50'):.4f} P99 {med('tpot_ms', 'p99'):.4f} ms; "
          f"ok {sum(s[(side, r)]['ok'] for r in range(1, rounds + 1))}")
add = lambda k, q: statistics.median(get("strata", r, k, q) - get("direct", r, k, q)
                                     for r in range(1, rounds + 1))
print(f"strata vs direct (median of same-round differences): TTFT P50 {add('ttft_ms', 'p50'):+.3f} ms, "
      f"P99 {add('ttft_ms', 'p99'):+.3f} ms; per token (TPOT) P50 {add('tpot_ms', 'p50'):+.4f} ms, "
      f"P99 {add('tpot_ms', 'p99'):+.4f} ms")
PY
}

# --- 3. prefix affinity against round-robin -------------------------------------

# start_fleet BASE POLICY AFFINITY_BYTES KV_TOKENS LOGDIR: $replicas replicas
# on ports BASE.., the front on BASE + $replicas. POLICY affinity-floorN is
# affinity with --backend-affinity-floor N.
start_fleet() {
  local base="$1" policy="$2" bytes="$3" kv_tokens="$4" logs="$5" urls=() i floor=1
  if [[ "$policy" =~ ^affinity-floor([0-9]+)$ ]]; then
    floor="${BASH_REMATCH[1]}"
    policy=affinity
  fi
  mkdir -p "$logs"
  for i in $(seq 0 $((replicas - 1))); do
    start "$logs/replica$i.log" "$strata" serve -m "$replica_model" --alias stories \
      --port $((base + i)) -t 1 --kv-tokens "$kv_tokens" --parallel 8 --l1-bytes 0 --no-coalesce \
      --log-level warn
    urls+=("http://127.0.0.1:$((base + i))")
  done
  for i in $(seq 0 $((replicas - 1))); do wait_ready $((base + i)) "$logs/replica$i.log"; done
  start "$logs/front.log" "$strata" serve --backend "openai:$(IFS=,; echo "${urls[*]}")" \
    --backend-name stories --backend-routing "$policy" --backend-affinity-bytes "$bytes" \
    --backend-affinity-floor "$floor" --l1-bytes 0 --no-coalesce --port $((base + replicas)) --log-level warn
  wait_ready $((base + replicas)) "$logs/front.log"
}

# The summary of affinity or mooncake runs: DIR with POLICY-rR.json (loadgen)
# and POLICY-rR.before/.after (the front's /metrics).
fleet_summary() {
  python3 - "$1" <<'PY'
import glob, json, os, re, statistics, sys
d = sys.argv[1]
def metrics(path):
    m = {}
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        k, val = line.rsplit(" ", 1)
        m[k] = float(val)
    return m
def total(m, name):
    return sum(v for k, v in m.items() if k == name or k.startswith(name + "{"))
def per_replica(m):
    return [v for k, v in sorted(m.items()) if k.startswith("strata_backend_replica_requests_total{")]
runs = {}
for p in sorted(glob.glob(os.path.join(d, "*-r*.json"))):
    pol, r = re.match(r"(.+)-r(\d+)\.json$", os.path.basename(p)).groups()
    j = json.load(open(p))["summary"]
    b, a = metrics(p[:-5] + ".before"), metrics(p[:-5] + ".after")
    prompt = total(a, "strata_backend_prompt_tokens_total") - total(b, "strata_backend_prompt_tokens_total")
    cached = total(a, "strata_backend_cached_tokens_total") - total(b, "strata_backend_cached_tokens_total")
    split = [round(x - y) for x, y in zip(per_replica(a), per_replica(b))]
    runs.setdefault(pol, {})[int(r)] = {
        "cached": cached / prompt if prompt else float("nan"), "prompt_mean": j["reported_prompt_tokens_mean"],
        "mean": j["ttft_ms"]["mean"], "p50": j["ttft_ms"]["p50"], "p99": j["ttft_ms"]["p99"],
        "e2e": j["e2e_ms"]["p50"], "rps": j["request_rate_per_s"], "ok": j["ok"], "failed": j["failed"],
        "split": split}
for pol in sorted(runs):
    for r, x in sorted(runs[pol].items()):
        print(f"  {pol:11s} r{r}: cached {x['cached']:.1%} of {x['prompt_mean']:.0f} prompt tokens/request; "
              f"TTFT mean {x['mean']:.0f} P50 {x['p50']:.0f} P99 {x['p99']:.0f} ms; E2E P50 {x['e2e']:.0f} ms; "
              f"{x['rps']:.2f} req/s; ok {x['ok']} failed {x['failed']}; per replica {x['split']}")
med = lambda pol, k: statistics.median(x[k] for x in runs[pol].values())
print("medians over rounds:")
for pol in sorted(runs):
    print(f"  {pol:11s} cached {med(pol, 'cached'):.1%}  TTFT mean {med(pol, 'mean'):.0f} P50 "
          f"{med(pol, 'p50'):.0f} P99 {med(pol, 'p99'):.0f} ms  {med(pol, 'rps'):.2f} req/s")
for pol in sorted(p for p in runs if p.startswith("affinity") and "round-robin" in runs):
    both = sorted(set(runs[pol]) & set(runs["round-robin"]))
    per = [runs[pol][r]["mean"] / runs["round-robin"][r]["mean"] for r in both]
    print(f"mean TTFT {pol} / round-robin, same round: " + ", ".join(f"{x:.3f}" for x in per) +
          f"; median {statistics.median(per):.3f}x (target <= 0.5x: "
          f"{'met' if statistics.median(per) <= 0.5 else 'NOT met'})")
PY
}

part_affinity() {
  local d="$out/affinity" r k=0 policy base f
  mkdir -p "$d"
  for r in $(seq "$rounds"); do
    # shellcheck disable=SC2086  # the policies are words
    for policy in $(rotate "$r" $policies); do
      base=$((port + 100 + 10 * k))
      k=$((k + 1))
      start_fleet "$base" "$policy" "$affinity_bytes" "$kv" "$d/logs-$policy-r$r"
      f=$((base + replicas))
      local common=(--url "http://127.0.0.1:$f" --model stories --endpoint chat
        --system-prompt-tokens "$system" --system-prompts "$systems" --system-seed 7
        --prompt-tokens "$question" --max-tokens "$gen" --ignore-eos --temperature 0 -q
        -c "$users")
      "$loadgen" "${common[@]}" -n "$warm" --seed $((1000 + r)) >/dev/null
      curl -sf "http://127.0.0.1:$f/metrics" >"$d/$policy-r$r.before"
      "$loadgen" "${common[@]}" -n "$requests" --seed "$r" --json "$d/$policy-r$r.json" >/dev/null
      curl -sf "http://127.0.0.1:$f/metrics" >"$d/$policy-r$r.after"
      stop_all
      echo "  round $r: $policy done"
    done
  done
  fleet_summary "$d" | tee "$d/summary.txt"
}

part_mooncake() {
  local d="$out/mooncake" trace="$shared/data/traces/mooncake_conversation_trace.jsonl" k=0 policy
  if [ ! -f "$trace" ]; then
    echo "  no $trace: the replay is left out" | tee "$out/mooncake-skipped.txt"
    return 0
  fi
  mkdir -p "$d"
  for policy in affinity round-robin; do
    local base=$((port + 300 + 10 * k))
    k=$((k + 1))
    start_fleet "$base" "$policy" "$mc_affinity_bytes" "$mc_kv" "$d/logs-$policy"
    local f=$((base + replicas))
    curl -sf "http://127.0.0.1:$f/metrics" >"$d/$policy-r1.before"
    "$loadgen" --url "http://127.0.0.1:$f" --model stories --endpoint chat --trace "$trace" \
      --max-requests "$mc_requests" --block-scale "$mc_scale" --max-prompt-tokens "$mc_prompt" \
      --max-tokens "$gen" --speedup "$mc_speedup" --ignore-eos --temperature 0 -q \
      --json "$d/$policy-r1.json" >/dev/null
    curl -sf "http://127.0.0.1:$f/metrics" >"$d/$policy-r1.after"
    stop_all
    echo "  $policy done"
  done
  fleet_summary "$d" | tee "$d/summary.txt"
}

# --- 4. L1 and L3 in front of a remote backend --------------------------------

part_faq() {
  local d="$out/faq" data="$shared/data/prompts" r
  mkdir -p "$d"
  for f in gptcache_mock_data.json mt_bench_question.jsonl; do
    [ -f "$data/$f" ] || { echo "error: no '$data/$f' (set SHARED)" >&2; exit 2; }
  done
  : >"$d/counts.txt"
  for r in $(seq "$rounds"); do
    python3 bench/faq_workload.py "$data" "$d/faq-r$r.jsonl" "$r" "$faq_requests" 160 1.0
    local up=$((port + 400 + 2 * r)) front=$((port + 401 + 2 * r))
    start "$d/upstream-r$r.log" "$strata" serve -m "$replica_model" --alias stories --port "$up" \
      -t 2 --parallel "$faq_conc" --l1-bytes 0 --l3 off --no-coalesce --log-level warn
    wait_ready "$up" "$d/upstream-r$r.log"
    start "$d/front-r$r.log" "$strata" serve --backend "openai:http://127.0.0.1:$up" \
      --backend-name stories --l3 on --port "$front" --log-level warn
    wait_ready "$front" "$d/front-r$r.log"
    local common=(--url "http://127.0.0.1:$front" --model stories --endpoint chat --max-tokens 32
      --ignore-eos --temperature 0 -q)
    # Outside the workload and outside every cache: the first pages of the model.
    "$loadgen" "${common[@]}" --extra-body '{"no_cache":true}' -c 1 -n 1 --prompt-tokens 16 \
      --seed 99 >/dev/null
    local before after
    before=$(chat_requests "$up")
    "$loadgen" "${common[@]}" --prompt-file "$d/faq-r$r.jsonl" -c "$faq_conc" -n "$faq_requests" \
      --json "$d/cached-r$r.json" >/dev/null
    after=$(chat_requests "$up")
    echo "$r $((after - before))" >>"$d/counts.txt"
    stop_all
    echo "  round $r done"
  done
  python3 - "$d" <<'PY' | tee "$d/summary.txt"
import collections, json, statistics, sys
d = sys.argv[1]
def pct(v, p):
    v = sorted(v)
    return v[max(0, -(-p * len(v) // 100) - 1)] if v else float("nan")
saved, by_tier = [], collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(f"{d}/counts.txt"):
    r, upstream = line.split()
    j = json.load(open(f"{d}/cached-r{r}.json"))
    ok = [x for x in j["samples"] if x["outcome"] == "ok"]
    served = collections.Counter(x.get("cache") or "none" for x in ok)
    work = [json.loads(l) for l in open(f"{d}/faq-r{r}.jsonl") if l.strip()]
    items, texts = len({w["item"] for w in work}), len({w["prompt"] for w in work})
    saved.append(1 - int(upstream) / len(ok))
    print(f"  r{r}: {len(ok)} client requests ok ({j['summary']['failed']} failed), upstream answered "
          f"{upstream} -> {1 - int(upstream) / len(ok):.1%} of upstream calls saved (an exact cache at "
          f"most {1 - texts / len(work):.1%}, a perfect paraphrase cache {1 - items / len(work):.1%}); "
          f"served: " + ", ".join(f"{k} {v}" for k, v in sorted(served.items())))
    for x in ok:
        if x["ttft_ms"] is not None:
            by_tier[x.get("cache") or "none"][int(r)].append(x["ttft_ms"])
print(f"upstream calls saved, median of {len(saved)} rounds: {statistics.median(saved):.1%}")
print("TTFT by how the front served it (median over rounds of each round's P50 / P99; n in all):")
for tier in ("miss", "l1", "l3", "coalesced"):
    if tier in by_tier:
        rs = by_tier[tier].values()
        print(f"  {tier:9s} n {sum(len(v) for v in rs):4d}  P50 {statistics.median(pct(v, 50) for v in rs):8.1f} ms"
              f"  P99 {statistics.median(pct(v, 99) for v in rs):8.1f} ms")
PY
}

# --- 6. instructions per forwarded request ----------------------------------------

# The front's own work per request, counted exactly: user-space instructions
# (callgrind) of `strata serve --backend` forwarding $INSTR_REQUESTS requests
# of each kind from one kept-alive client, after a warm-up. Unlike requests/s
# on a shared machine it does not move with the load, so two builds compare
# to the instruction.
part_instructions() {
  local d="$out/instructions"
  mkdir -p "$d"
  local up=$port front=$((port + 1)) n="${INSTR_REQUESTS:-300}"
  demo_upstream "$d"
  local model="$d/demo.gguf"
  cat >"$d/client.py" <<'PY'
import http.client, sys
port, body, n = int(sys.argv[1]), open(sys.argv[2], "rb").read(), int(sys.argv[3])
c = http.client.HTTPConnection("127.0.0.1", port)
for _ in range(n):
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    if r.status != 200:
        sys.exit(f"HTTP {r.status}")
PY
  start "$d/upstream.log" "$strata" serve -m "$model" --alias demo --port "$up" --log-level warn
  wait_ready "$up" "$d/upstream.log"
  local bin kind
  : >"$d/summary.txt"
  for bin in ${INSTR_BUILDS:-$strata}; do
    start "$d/front.log" valgrind --tool=callgrind --instr-atstart=no \
      --callgrind-out-file="$d/callgrind.%p" "$bin" serve --backend "openai:http://127.0.0.1:$up" \
      --backend-name demo --l1-bytes 0 --no-coalesce --port "$front" --log-level warn
    local pid=${pids[-1]}
    wait_ready "$front" "$d/front.log"
    local line="  $bin:"
    for kind in chat stream; do
      python3 "$d/client.py" "$front" "$d/$kind.json" 20  # warm-up: pooled connections, caches
      callgrind_control -i on "$pid" >/dev/null 2>&1
      python3 "$d/client.py" "$front" "$d/$kind.json" "$n"
      callgrind_control -i off "$pid" >/dev/null 2>&1
      callgrind_control -d "$pid" >/dev/null 2>&1
      local dump ir
      dump=$(ls -t "$d/callgrind.$pid".* | head -1)
      ir=$(awk '/^totals:/ {print $2; exit}' "$dump")
      mv "$dump" "$d/callgrind-$(basename "$bin")-$kind.out"
      callgrind_control -z "$pid" >/dev/null 2>&1
      line="$line $kind $((ir / n))"
    done
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    echo "$line" | tee -a "$d/summary.txt"
  done
  stop_all
  echo "  (user-space instructions of the front per forwarded request: non-streaming, streaming;" \
    "$n requests each; callgrind_annotate $d/callgrind-*.out shows where)" | tee -a "$d/summary.txt"
}

for p in $parts; do
  echo "== $p"
  "part_$p"
done
