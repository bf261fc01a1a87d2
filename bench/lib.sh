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
