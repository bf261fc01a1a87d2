# tests/integration/lib.sh — shell helpers the integration scripts share;
# sourced, not run.

# free_port: prints a loopback port nobody listens on (bash's /dev/tcp
# connects when something does). A server may still lose a race for it, so
# callers retry their start on another port.
free_port() {
  local p
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 20000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  return 1
}
