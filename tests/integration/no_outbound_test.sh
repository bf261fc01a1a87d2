#!/usr/bin/env bash
# A default `strata serve` opens no outbound connection: under strace, while
# it serves every kind of request, reloads and shuts down, the process makes
# no connect() and sends nothing to an address of its choosing; its only
# sockets are the ones it listens on. No telemetry leaves the process unless
# an exporter or a backend is configured. A second run with a --backend
# proves the check sees an outbound connection when there is one.
# Usage (ctest runs it from the repository root): no_outbound_test.sh STRATA
set -u
STRATA="$1"
if ! command -v strace >/dev/null || ! strace -f -qq -o /dev/null true 2>/dev/null; then
  echo "skip: strace is missing or may not trace here (scripts/test installs it)"
  exit 77
fi
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail=0
bad() {
  echo "FAIL: $*"
  fail=1
}

model="$tmp/demo.gguf"
if ! "$STRATA" mkmodel --dims n_embd=64,n_layers=2,n_heads=4,n_ff=128,n_ctx=512 -o "$model" \
  --log-level error >"$tmp/mkmodel.log" 2>&1; then
  cat "$tmp/mkmodel.log"
  exit 1
fi

# serve NAME ARGS...: strata serve under strace (its calls to NAME.trace),
# waited on until ready; sets port, and pid to the server's own (strace's
# child: a signal to strace would only detach it).
serve() {
  local name="$1"
  shift
  strace -f -qq -e trace=socket,connect,sendto,sendmsg,sendmmsg -o "$tmp/$name.trace" \
    "$STRATA" serve -m "$model" --port 0 -t 1 "$@" >"$tmp/$name.log" 2>&1 &
  local tracer=$!
  pids+=("$tracer")
  for _ in $(seq 1 200); do
    port=$(grep -o 'ready in .* at http://127.0.0.1:[0-9]*' "$tmp/$name.log" | grep -o '[0-9]*$')
    pid=$(pgrep -P "$tracer" | head -1)
    if [ -n "$port" ] && [ -n "$pid" ]; then
      pids+=("$pid")
      return 0
    fi
    sleep 0.05
  done
  cat "$tmp/$name.log"
  return 1
}

post() { curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' "$@"; }

serve default || exit 1
base="http://127.0.0.1:$port"
[ "$(post "$base/v1/chat/completions" -d '{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":4}')" = 200 ] || bad "chat"
[ "$(post "$base/v1/chat/completions" -d '{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":true}')" = 200 ] || bad "stream"
[ "$(post "$base/v1/completions" -d '{"model":"demo","prompt":"once","max_tokens":4,"temperature":0}')" = 200 ] || bad "completions"
[ "$(post "$base/v1/completions" -d '{"model":"demo","prompt":"once","max_tokens":4,"temperature":0}')" = 200 ] || bad "an L1 hit"
[ "$(post "$base/v1/messages" -d '{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":4}')" = 200 ] || bad "messages"
[ "$(post "$base/v1/embeddings" -d '{"model":"demo","input":"hi"}')" = 200 ] || bad "embeddings"
[ "$(post "$base/v1/chat/completions" -d '{"model":"demo"')" = 400 ] || bad "a bad request"
for path in /health /metrics /v1/models /dashboard /dashboard/state; do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$base$path")" = 200 ] || bad "GET $path"
done
kill -HUP "$pid"
sleep 0.3
kill -TERM "$pid"
tracer=$(jobs -p | tail -1)
wait "$tracer" || bad "serve exited $?"

trace="$tmp/default.trace"
if grep -q 'connect(' "$trace"; then
  bad "a default strata serve connected somewhere:"
  grep 'connect(' "$trace" | head -5
fi
# Sends go to connected peers (the clients), never to an address given with them.
if grep -E 'send(to|msg|mmsg)\(' "$trace" | grep -vE 'msg_name=NULL|, NULL, 0\) ' | grep -q .; then
  bad "a default strata serve sent to an address of its own choosing:"
  grep -E 'send(to|msg|mmsg)\(' "$trace" | grep -vE 'msg_name=NULL|, NULL, 0\) ' | head -5
fi
sockets=$(grep -c 'socket(' "$trace")
listeners=$(grep -c 'socket(AF_INET6\?, SOCK_STREAM' "$trace")
if [ "$sockets" -ne "$listeners" ] || [ "$listeners" -gt 2 ]; then
  bad "a default strata serve opened $sockets sockets, $listeners of them TCP (want only its listener):"
  grep 'socket(' "$trace" | head -5
fi
echo "default serve: $sockets socket(s), 0 connect() calls"

# The check is not blind: in front of the first server as its backend, the
# front connects to it.
serve upstream || exit 1
up="http://127.0.0.1:$port"
up_pid=$pid
serve front --backend "openai:$up" --backend-name up --backend-model demo || exit 1
[ "$(post "http://127.0.0.1:$port/v1/chat/completions" -d '{"model":"up","messages":[{"role":"user","content":"hi"}],"max_tokens":4}')" = 200 ] || bad "through the front"
kill -TERM "$pid" "$up_pid"
wait
grep -q "connect(.*htons(${up##*:})" "$tmp/front.trace" || bad "the control run's connect() to its backend was not seen"

[ $fail -eq 0 ] && echo "ok: no outbound connection from a default strata serve"
exit $fail
