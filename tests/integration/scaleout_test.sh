#!/usr/bin/env bash
# Two `strata serve` instances sharing one Redis, behind nginx configured by
# the real deploy/nginx/strata.conf and strata_route.js (rendered by
# `deploy/strata-cluster nginx-conf` with this test's ports):
#  a. an answer generated on instance A is an L1 hit on instance B;
#  b. every request of one session_id through nginx lands on one instance,
#     and different sessions use both;
#  c. one session's turns alternating between A and B (each request sends
#     only its new message) are all stored, in order, readable on either;
#  d. kill -9 of the instance that owns a session: its next turns through
#     nginx are served by the other instance, and the session still holds
#     every acknowledged turn.
# It also prints the latency of an L1 hit directly and through nginx (not
# asserted: docs/scaling.md quotes it). Needs nginx with the njs module,
# redis-server and redis-cli, curl, and jq or python3; skips without them.
# Usage (ctest runs it from the repository root): scaleout_test.sh STRATA
set -u
STRATA="$1"
root=$(cd "$(dirname "$0")/../.." && pwd)
conf_template="$root/deploy/nginx/strata.conf"
cluster="$root/deploy/strata-cluster"

for tool in curl nginx redis-server redis-cli; do
  if ! command -v "$tool" >/dev/null; then
    echo "skip: $tool is not installed (scripts/test installs it)"
    exit 0
  fi
done
njs_module=$(sed -n 's/^load_module[[:space:]]*\([^;]*ngx_http_js_module\.so\);.*/\1/p' "$conf_template")
if [ ! -r "$njs_module" ]; then
  echo "skip: nginx's njs module is not at ${njs_module:-the path strata.conf names} (libnginx-mod-http-js)"
  exit 0
fi
if command -v jq >/dev/null; then
  json=jq
elif command -v python3 >/dev/null; then
  json=python3
else
  echo "skip: neither jq nor python3 is installed"
  exit 0
fi

tmp=$(mktemp -d)
redis_pid=""
nginx_pid=""
declare -A pid_of=()  # instance name (a, b) -> pid
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  local p
  if [ -n "$nginx_pid" ]; then
    # nginx's workers do not follow a killed master: ask it to stop, and
    # take the workers too if it does not in time.
    local workers
    workers=$(pgrep -P "$nginx_pid" 2>/dev/null)
    kill -TERM "$nginx_pid" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$nginx_pid" 2>/dev/null || break; sleep 0.1; done
    for p in "$nginx_pid" $workers; do kill -KILL "$p" 2>/dev/null; done
  fi
  for p in "${pid_of[@]}" "$redis_pid"; do
    [ -n "$p" ] && kill -KILL "$p" 2>/dev/null
  done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail=0
bad() {
  echo "FAIL: $*"
  fail=1
}

# jget EXPR: a value of the JSON on stdin ("null" when absent); EXPR is a
# jq path of keys and [indexes], e.g. .choices[0].message.content
jget() {
  if [ "$json" = jq ]; then
    jq -r "$1"
  else
    python3 -c 'import json, re, sys
d = json.load(sys.stdin)
try:
    for key, idx in re.findall(r"([A-Za-z_][A-Za-z_0-9]*)|\[(\d+)\]", sys.argv[1]):
        d = d[key] if key else d[int(idx)]
except (KeyError, IndexError, TypeError):
    d = None
print("null" if d is None else d)' "$1"
  fi
}

# free_port (a start that loses the race for its port is retried).
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"

model="$tmp/demo.gguf"
if ! "$STRATA" mkmodel --dims n_embd=64,n_layers=2,n_heads=4,n_ff=128,n_ctx=512 -o "$model" \
    --log-level error >"$tmp/mkmodel.log" 2>&1; then
  echo "FAIL: strata mkmodel"
  cat "$tmp/mkmodel.log"
  exit 1
fi

# Redis as the session store wants it: every write fsynced before it is
# acknowledged, no snapshots.
mkdir -p "$tmp/redis"
for attempt in 1 2 3; do
  redis_port=$(free_port) || { echo "FAIL: no free port"; exit 1; }
  redis-server --bind 127.0.0.1 --port "$redis_port" --dir "$tmp/redis" --save '' \
    --appendonly yes --appendfsync always --daemonize no --logfile "" \
    >"$tmp/redis.log" 2>&1 &
  redis_pid=$!
  for _ in $(seq 1 100); do  # 10 s
    [ "$(timeout 5 redis-cli -p "$redis_port" ping 2>/dev/null)" = PONG ] && break
    kill -0 "$redis_pid" 2>/dev/null || break
    sleep 0.1
  done
  [ "$(timeout 5 redis-cli -p "$redis_port" ping 2>/dev/null)" = PONG ] && break
  echo "note: redis-server on port $redis_port did not start (attempt $attempt)"
  kill -KILL "$redis_pid" 2>/dev/null
  wait "$redis_pid" 2>/dev/null
  redis_pid=""
done
[ -n "$redis_pid" ] || { tail -n 5 "$tmp/redis.log"; echo "FAIL: redis-server did not start"; exit 1; }
redis="127.0.0.1:$redis_port"

# start_instance NAME: strata serve on a port of its choosing, sharing
# Redis; sets port_of[NAME] once it answers /health. A Redis lookup may
# take a second (not 50 ms): on a busy machine a slow one would be a miss,
# and strata would then skip Redis for a while, which is not under test.
declare -A port_of=()
start_instance() {
  local name="$1" log="$tmp/strata-$1.log" port=""
  "$STRATA" serve -m "$model" --port 0 -t 1 --redis "$redis" --redis-timeout-ms 1000 \
    --sessions "redis://$redis" >"$log" 2>&1 &
  pid_of[$name]=$!
  for _ in $(seq 1 300); do  # 30 s on a busy machine
    kill -0 "${pid_of[$name]}" 2>/dev/null || break
    port=$(grep -o 'ready in .* at http://127.0.0.1:[0-9]*' "$log" | grep -o '[0-9]*$')
    if [ -n "$port" ] &&
       [ "$(curl -s -m 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ]; then
      port_of[$name]=$port
      return 0
    fi
    sleep 0.1
  done
  echo "FAIL: strata serve $name did not become ready; its log:"
  tail -n 10 "$log"
  exit 1
}
start_instance a
start_instance b
A="http://127.0.0.1:${port_of[a]}"
B="http://127.0.0.1:${port_of[b]}"
echo "ok: instances a at $A, b at $B, Redis at $redis"

# nginx with the deploy configuration, its upstreams and port replaced.
mkdir -p "$tmp/nginx/logs" "$tmp/nginx/temp"
for attempt in 1 2 3; do
  nginx_port=$(free_port) || { echo "FAIL: no free port"; exit 1; }
  if ! "$cluster" nginx-conf --listen "127.0.0.1:$nginx_port" \
      --servers "127.0.0.1:${port_of[a]},127.0.0.1:${port_of[b]}" >"$tmp/nginx/strata.conf"; then
    echo "FAIL: deploy/strata-cluster nginx-conf"
    exit 1
  fi
  nginx -e stderr -p "$tmp/nginx/" -c "$tmp/nginx/strata.conf" -g 'daemon off;' \
    >"$tmp/nginx.log" 2>&1 &
  nginx_pid=$!
  for _ in $(seq 1 100); do
    kill -0 "$nginx_pid" 2>/dev/null || break
    [ "$(curl -s -m 2 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$nginx_port/health")" = 200 ] &&
      break 2
    sleep 0.1
  done
  echo "note: nginx on port $nginx_port did not start (attempt $attempt):"
  tail -n 5 "$tmp/nginx.log"
  kill -TERM "$nginx_pid" 2>/dev/null
  wait "$nginx_pid" 2>/dev/null
  nginx_pid=""
done
[ -n "$nginx_pid" ] || { echo "FAIL: nginx did not start"; exit 1; }
N="http://127.0.0.1:$nginx_port"
echo "ok: nginx at $N"

# post URL BODY [REQUEST_ID]: POSTs JSON; the status is printed, the body
# is in $tmp/body and the headers in $tmp/headers.
post() {
  local with_id=()
  [ $# -ge 3 ] && with_id=(-H "X-Request-Id: $3")
  curl -s -m 30 -o "$tmp/body" -D "$tmp/headers" -w '%{http_code}' \
    -H 'Content-Type: application/json' "${with_id[@]}" "$1" -d "$2"
}
header() { tr -d '\r' <"$tmp/headers" | sed -n "s/^$1: //Ip" | head -n 1; }

# served_by REQUEST_ID: the instance (a or b) whose log names the request.
# strata writes the access line as the response ends, so it is waited for.
served_by() {
  local name
  for _ in $(seq 1 50); do
    for name in a b; do
      if grep -qF "[req=$1]" "$tmp/strata-$name.log"; then
        echo "$name"
        return 0
      fi
    done
    sleep 0.1
  done
  echo "none"
}

# chat SESSION TEXT: a chat request body with only its new user message.
chat() {
  printf '{"model":"demo","session_id":"%s","messages":[{"role":"user","content":"%s"}],"max_tokens":4}' \
    "$1" "$2"
}

# --- a. Answers generated on A are L1 hits on B.
# det I: a deterministic request, the I-th of its kind.
det() {
  printf '{"model":"demo","messages":[{"role":"user","content":"shared across instances %s"}],"max_tokens":8,"temperature":0}' "$1"
}
declare -A text_on_a=()
for i in $(seq 1 10); do
  status=$(post "$A/v1/chat/completions" "$(det "$i")")
  cache=$(header x-strata-cache)
  text_on_a[$i]=$(jget '.choices[0].message.content' <"$tmp/body")
  if [ "$status" != 200 ] || [ "$cache" != miss ]; then
    bad "a: request $i on A: $status, x-strata-cache '$cache' (want 200, miss)"
  fi
done
# Writes to Redis are queued off the request path: wait until all ten are there.
for _ in $(seq 1 100); do
  [ "$(timeout 5 redis-cli -p "$redis_port" --scan --pattern 'strata:v1:*:l1:*' | wc -l)" -ge 10 ] && break
  sleep 0.05
done
hits=0
for i in $(seq 1 10); do
  status=$(post "$B/v1/chat/completions" "$(det "$i")")
  cache=$(header x-strata-cache)
  text=$(jget '.choices[0].message.content' <"$tmp/body")
  if [ "$status" = 200 ] && [ "$cache" = l1 ] && [ "$text" = "${text_on_a[$i]}" ]; then
    hits=$((hits + 1))
  else
    bad "a: request $i on B: $status, x-strata-cache '$cache', text '$text' (want 200, l1, '${text_on_a[$i]}')"
  fi
done
[ "$hits" = 10 ] &&
  echo "ok: a: 10 of 10 answers generated on A (miss) were answered on B from Redis (l1), same text"

# --- b. One session through nginx stays on one instance; sessions spread.
sess="route-$RANDOM$RANDOM"
owners=""
for i in 1 2 3 4 5 6; do
  rid="rt-$sess-$i"
  status=$(post "$N/v1/chat/completions" "$(chat "$sess" "routing turn $i")" "$rid")
  [ "$status" = 200 ] || bad "b: turn $i of $sess through nginx: $status $(head -c 300 "$tmp/body")"
  [ "$(header x-request-id)" = "$rid" ] || bad "b: X-Request-Id $rid did not come back through nginx"
  owners+="$(served_by "$rid") "
done
if [ "$(tr ' ' '\n' <<<"$owners" | grep -v '^$' | sort -u | wc -l)" = 1 ] && [[ "$owners" != *none* ]]; then
  echo "ok: b: six turns of one session through nginx all served by instance ${owners%% *}"
else
  bad "b: the turns of $sess were served by: $owners(want one instance)"
fi
# 32 sessions: even at a 75/25 split of the ring, all on one instance
# would happen once in 10,000 runs.
seen=""
for i in $(seq 1 32); do
  rid="spread-$sess-$i"
  post "$N/v1/chat/completions" "$(chat "spread-$sess-$i" "hello")" "$rid" >/dev/null
  seen+="$(served_by "$rid")"
done
on_a=$(tr -cd a <<<"$seen" | wc -c)
on_b=$(tr -cd b <<<"$seen" | wc -c)
if [ "$on_a" -gt 0 ] && [ "$on_b" -gt 0 ] && [ $((on_a + on_b)) = 32 ]; then
  echo "ok: b: 32 sessions through nginx spread over both instances ($on_a on a, $on_b on b)"
else
  bad "b: 32 sessions through nginx were served by: $seen (want both instances)"
fi

# --- c. A session's turns alternate between A and B; all stored, in order.
conv="conv-$RANDOM$RANDOM"
for i in 1 2 3 4 5 6; do
  if [ $((i % 2)) = 1 ]; then url="$A"; else url="$B"; fi
  status=$(post "$url/v1/chat/completions" "$(chat "$conv" "turn $i")")
  [ "$status" = 200 ] || bad "c: turn $i on $url: $status $(head -c 300 "$tmp/body")"
done
# check_session URL ID TURN_TEXT...: the session holds exactly these user
# turns, in order, each followed by an answer.
check_session() {
  local url="$1" id="$2" got status i=0
  shift 2
  status=$(curl -s -m 10 -o "$tmp/session" -w '%{http_code}' "$url/v1/sessions/$id")
  if [ "$status" != 200 ]; then
    echo "GET $url/v1/sessions/$id: $status $(head -c 300 "$tmp/session")"
    return 1
  fi
  got=$(jget '.turns' <"$tmp/session")
  [ "$got" = "$#" ] || { echo "$got turns (want $#)"; return 1; }
  for want in "$@"; do
    got=$(jget ".messages[$((2 * i))].content" <"$tmp/session")
    [ "$got" = "$want" ] || { echo "message $((2 * i)) is '$got' (want '$want')"; return 1; }
    got=$(jget ".messages[$((2 * i + 1))].role" <"$tmp/session")
    [ "$got" = assistant ] || { echo "message $((2 * i + 1)) is a '$got' (want an answer)"; return 1; }
    i=$((i + 1))
  done
}
for url in "$A" "$B"; do
  if why=$(check_session "$url" "$conv" "turn 1" "turn 2" "turn 3" "turn 4" "turn 5" "turn 6"); then
    echo "ok: c: six turns alternating A, B: all six in order on $url"
  else
    bad "c: session $conv on $url: $why"
  fi
done

# Latency directly and through nginx (printed, not asserted; docs/scaling.md
# quotes it): an L1 hit, and a streamed generation that skips the caches
# (time to its first byte, and to its end). Each over a new connection.
# p50 SECONDS...: the median of the arguments.
p50() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
gen='{"model":"demo","messages":[{"role":"user","content":"stream me"}],"max_tokens":16,"stream":true,"no_cache":true}'
hit_direct=() hit_nginx=() ttfb_direct=() ttfb_nginx=() gen_direct=() gen_nginx=()
for _ in $(seq 1 30); do
  hit_direct+=("$(curl -s -m 10 -o /dev/null -w '%{time_total}' -H 'Content-Type: application/json' \
    "$A/v1/chat/completions" -d "$(det 1)")")
  hit_nginx+=("$(curl -s -m 10 -o /dev/null -w '%{time_total}' -H 'Content-Type: application/json' \
    "$N/v1/chat/completions" -d "$(det 1)")")
  read -r t1 t2 < <(curl -s -m 10 -o /dev/null -w '%{time_starttransfer} %{time_total}' \
    -H 'Content-Type: application/json' "$A/v1/chat/completions" -d "$gen")
  ttfb_direct+=("$t1") gen_direct+=("$t2")
  read -r t1 t2 < <(curl -s -m 10 -o /dev/null -w '%{time_starttransfer} %{time_total}' \
    -H 'Content-Type: application/json' "$N/v1/chat/completions" -d "$gen")
  ttfb_nginx+=("$t1") gen_nginx+=("$t2")
done
echo "measured (median of 30, seconds): L1 hit: direct $(p50 "${hit_direct[@]}")," \
  "through nginx $(p50 "${hit_nginx[@]}"); streamed 16-token generation, first byte:" \
  "direct $(p50 "${ttfb_direct[@]}"), through nginx $(p50 "${ttfb_nginx[@]}"); end:" \
  "direct $(p50 "${gen_direct[@]}"), through nginx $(p50 "${gen_nginx[@]}")"

# --- d. kill -9 the session's instance; nginx moves its turns to the other.
fo="failover-$RANDOM$RANDOM"
status=$(post "$N/v1/chat/completions" "$(chat "$fo" "before 1")" "fo-$fo-1")
[ "$status" = 200 ] || bad "d: turn 1 through nginx: $status"
status=$(post "$N/v1/chat/completions" "$(chat "$fo" "before 2")" "fo-$fo-2")
[ "$status" = 200 ] || bad "d: turn 2 through nginx: $status"
owner=$(served_by "fo-$fo-1")
if [ "$owner" = a ]; then other=b; else other=a; fi
if [ "$owner" = none ]; then
  bad "d: no instance logged turn 1 of $fo"
else
  kill -KILL "${pid_of[$owner]}"
  wait "${pid_of[$owner]}" 2>/dev/null
  unset "pid_of[$owner]"
  for i in 3 4; do
    status=$(post "$N/v1/chat/completions" "$(chat "$fo" "after $i")" "fo-$fo-$i")
    by=$(served_by "fo-$fo-$i")
    if [ "$status" = 200 ] && [ "$by" = "$other" ]; then
      echo "ok: d: turn $i after kill -9 of $owner served by $other through nginx"
    else
      bad "d: turn $i after kill -9 of $owner: $status, served by $by (want 200 by $other) $(head -c 300 "$tmp/body")"
    fi
  done
  for url in "$N" "http://127.0.0.1:${port_of[$other]}"; do
    if why=$(check_session "$url" "$fo" "before 1" "before 2" "after 3" "after 4"); then
      echo "ok: d: every acknowledged turn of $fo is in the session, read through $url"
    else
      bad "d: session $fo read through $url: $why"
    fi
  done
fi

if [ "$fail" -ne 0 ]; then
  for name in a b; do
    echo "--- strata $name log (tail)"
    tail -n 15 "$tmp/strata-$name.log"
  done
  echo "--- nginx log (tail)"
  tail -n 15 "$tmp/nginx.log" "$tmp/nginx/logs/access.log"
fi
exit "$fail"
