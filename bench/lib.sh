# Sourced by the bench/*.sh scripts that run one server at a time.
# Start the server in the background and set pid=$!; stop_server ends it
# (SIGTERM, then waits for it to exit) and runs on exit, whatever the exit.

pid=""
stop_server() {
  if [ -n "$pid" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=""
  fi
}
trap stop_server EXIT

# wait_healthy PORT LOG: waits up to 60 s for the server on PORT to answer
# GET /health with 200; otherwise says so, naming LOG, and exits 1.
wait_healthy() {
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "error: the server did not start (see $2)" >&2
  exit 1
}
