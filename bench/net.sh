#!/usr/bin/env bash
# The HTTP layer under crowds and attacks, and its per-request overhead
# (docs/benchmarks.md, "HTTP layer").
#
#   bench/net.sh OUT_DIR
#
# On a random-weight model written by `strata mkmodel` (the model's speed is
# not what is measured: every generation request is an L1 hit after one warm-up),
# one `strata serve` at a time on 127.0.0.1:
#   1. idle: $IDLE (10000) kept-alive connections, each after one answered
#      request, held while /health is probed; the server's RSS and CPU.
#   2. sse: $STREAMS (2000) concurrent SSE streams (L1 replays) read to the end.
#   3. slowloris: $SLOW (300) sockets sending a header byte a second for
#      $SLOW_S (20) s; a normal client's L1-hit latency quiet and under
#      attack, and /health's.
#   4. overhead: an L1 hit end to end with wrk at concurrency 1 (P50/P99) and
#      64 (requests/s), for this build and, when $BEFORE names another strata
#      binary, for it too, alternating $ROUNDS (3) times; nginx serving a file
#      of the same bytes as the floor.
# Env: STRATA (build/release/strata), NETBENCH (build/release/bench/netbench),
# BEFORE (unset), ROUNDS (3), PORT (18200), WRK_S (10). Needs wrk and nginx
# (installed here when missing). Writes OUT_DIR/*.json and prints a summary.
set -euo pipefail
if [ $# -lt 1 ] || [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
  [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ] && exit 0
  exit 2
fi
out="$1"
cd "$(dirname "$0")/.."
source scripts/lib.sh
STRATA_PACKAGES=(wrk nginx)
strata_ensure_packages
strata="${STRATA:-build/release/strata}" netbench="${NETBENCH:-build/release/bench/netbench}"
before="${BEFORE:-}" rounds="${ROUNDS:-3}" port="${PORT:-18200}" wrk_s="${WRK_S:-10}"
idle="${IDLE:-10000}" streams="${STREAMS:-2000}" slow="${SLOW:-300}" slow_s="${SLOW_S:-20}"
[ -x "$strata" ] || { echo "error: '$strata' is not built (cmake --build --preset release)" >&2; exit 2; }
[ -x "$netbench" ] || { echo "error: '$netbench' is not built" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
ulimit -n "$(ulimit -Hn)"

# shellcheck source=bench/lib.sh
source bench/lib.sh

model="$out/net-demo.gguf"
[ -f "$model" ] || "$strata" mkmodel --dims n_embd=64,n_layers=2,n_heads=2,n_ff=128,n_ctx=2048 \
  -o "$model" --log-level error
chat='{"model":"demo","temperature":0,"max_tokens":32,"messages":[{"role":"user","content":"hello there"}]}'
stream='{"model":"demo","temperature":0,"max_tokens":32,"stream":true,"messages":[{"role":"user","content":"hello there"}]}'
printf '%s' "$chat" > "$out/chat.json"
printf '%s' "$stream" > "$out/stream.json"
cat > "$out/post.lua" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [[$chat]]
EOF

# This build's limits, raised for the crowds (the baseline has no such flags).
crowd=(--max-connections 20000 --max-connections-per-client 20000 --idle-timeout 600
  --max-queued-requests 8192)

# serve BINARY ARGS...: starts one server on $port and waits for /health.
serve() {
  local bin="$1"
  shift
  "$bin" serve -m "$model" --alias demo --port "$port" --log-level warn --parallel 16 "$@" \
    > "$out/serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 200); do
    if bash -c "exec 3<>/dev/tcp/127.0.0.1/$port && printf 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3 && grep -q '200 OK' <&3" 2>/dev/null; then
      # One answer for L1 (and one stream), so every later request is a hit.
      printf 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %s\r\n\r\n%s' \
        "${#chat}" "$chat" | timeout 30 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port; cat >&3; cat <&3 >/dev/null"
      return 0
    fi
    sleep 0.05
  done
  echo "error: the server did not start:" >&2
  cat "$out/serve.log" >&2
  exit 1
}

# wrk_run C NAME: P50/P99 ms and requests/s of L1 hits at concurrency C.
wrk_run() {
  local c="$1" name="$2" url="$3" script="${4:-}"
  local args=(-t "$(( c < 2 ? 1 : 2 ))" -c "$c" -d "${wrk_s}s" --latency)
  [ -n "$script" ] && args+=(-s "$script")
  wrk "${args[@]}" "$url" > "$out/wrk-$name.txt"
  awk -v name="$name" '
    function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
    $1 == "50%" { p50 = ms($2) } $1 == "99%" { p99 = ms($2) } $1 == "Requests/sec:" { rps = $2 }
    / Non-2xx/ { bad = $NF }
    END { printf "%-28s p50 %8.3f ms  p99 %8.3f ms  %10.0f req/s%s\n", name, p50, p99, rps, bad ? "  NON-2XX " bad : "" }
  ' "$out/wrk-$name.txt" | tee -a "$out/overhead.txt"
}

echo "== CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"

echo "== 1. $idle idle kept-alive connections"
serve "$strata" "${crowd[@]}"
"$netbench" idle --port "$port" --connections "$idle" --pid "$pid" --json "$out/idle.json"
stop_server

echo "== 2. $streams concurrent SSE streams (L1 replays)"
serve "$strata" "${crowd[@]}"
"$netbench" sse --port "$port" --streams "$streams" --body "$out/stream.json" --pid "$pid" \
  --path /v1/chat/completions --json "$out/sse.json"
stop_server

echo "== 3. slowloris: $slow sockets for $slow_s s"
serve "$strata" "${crowd[@]}"
"$netbench" slowloris --port "$port" --sockets "$slow" --seconds "$slow_s" \
  --probe-body "$out/chat.json" --path /v1/chat/completions --pid "$pid" --json "$out/slowloris.json"
stop_server

echo "== 4. request-path overhead: L1 hits (wrk, ${wrk_s} s each), $rounds rounds alternating"
: > "$out/overhead.txt"
# nginx serving the same bytes as the L1 answer, as the floor.
mkdir -p "$out/nginx/logs" "$out/nginx/www"
curl_body=$(printf 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %s\r\n\r\n%s' "${#chat}" "$chat")
cat > "$out/nginx/nginx.conf" <<EOF
worker_processes 2;
error_log $out/nginx/logs/error.log;
pid $out/nginx/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  server {
    listen 127.0.0.1:$((port + 1));
    location / { root $out/nginx/www; }
  }
}
EOF
for r in $(seq "$rounds"); do
  serve "$strata" "${crowd[@]}"
  body=$(printf '%s' "$curl_body" | timeout 10 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port; cat >&3; cat <&3" | sed '1,/^\r$/d')
  printf '%s' "$body" > "$out/nginx/www/answer.json"
  wrk_run 1 "after-c1-r$r" "http://127.0.0.1:$port/v1/chat/completions" "$out/post.lua"
  wrk_run 64 "after-c64-r$r" "http://127.0.0.1:$port/v1/chat/completions" "$out/post.lua"
  stop_server
  if [ -n "$before" ]; then
    # Its own port: the baseline's listener does not bind over this build's
    # closed connections still in TIME_WAIT.
    port=$((port + 2)) serve "$before"
    wrk_run 1 "before-c1-r$r" "http://127.0.0.1:$((port + 2))/v1/chat/completions" "$out/post.lua"
    wrk_run 64 "before-c64-r$r" "http://127.0.0.1:$((port + 2))/v1/chat/completions" "$out/post.lua"
    stop_server
  fi
  nginx -p "$out/nginx" -c "$out/nginx/nginx.conf" -g 'daemon off;' &
  pid=$!
  sleep 0.3
  wrk_run 1 "nginx-c1-r$r" "http://127.0.0.1:$((port + 1))/answer.json"
  wrk_run 64 "nginx-c64-r$r" "http://127.0.0.1:$((port + 1))/answer.json"
  stop_server
done
echo "== medians over $rounds rounds"
for name in after-c1 after-c64 before-c1 before-c64 nginx-c1 nginx-c64; do
  grep "^$name-r" "$out/overhead.txt" | awk -v name="$name" '
    { p50[NR] = $3; p99[NR] = $6; rps[NR] = $8 }
    function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t } return a[int((n + 1) / 2)] }
    END { if (NR) printf "%-12s p50 %8.3f ms  p99 %8.3f ms  %10.0f req/s\n", name, med(p50, NR), med(p99, NR), med(rps, NR) }'
done | tee "$out/overhead-medians.txt"
