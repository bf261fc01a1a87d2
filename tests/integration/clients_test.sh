#!/usr/bin/env bash
# Real clients against the real server: starts `strata serve` on a free
# loopback port and runs tests/integration/clients (the official `openai` and
# `@anthropic-ai/sdk` npm packages, pinned in its package-lock.json) with
# Node's test runner. Run by ctest from the repository root:
#   tests/integration/clients_test.sh path/to/strata
#
# Three configurations, one after the other, each with its own servers:
#   direct     the SDKs talk to `strata serve -m MODEL --alias test-model`
#   openai     ... to a front `strata serve --backend openai:URL` whose
#              upstream is that server (the front speaks OpenAI to it)
#   anthropic  the same with `--backend anthropic:URL` (Anthropic Messages)
#   (every server also runs with --audit-log and --watermark-key-file; each
#   log must pass `strata audit verify` after its server stopped)
#   dashboard  GET /dashboard in headless Chromium (Debian's chromium, driven
#              by playwright-core) against a server with two tenants' keys
#              and an RT-Switcher that steps down; its screenshot goes to
#              build/test-artifacts/dashboard.png
# Every server records request snapshots (--snapshots), so each SDK flow also
# goes through the recording hook, which must change nothing a client sees.
# The tests learn which from STRATA_CHAIN and skip, naming why, only what
# that chain cannot carry; chain.test.js runs in the chains only.
# STRATA_CLIENTS_CHAINS="direct openai" runs a subset.
#
# Needs npm and the npm registry (`npm ci`), and node >= 20.10 (where the
# machine's node is older, as Debian 12's 18 is, a node 22 binary is taken
# from the npm registry); without them it fails with a message saying so, it
# never passes silently.
#
# The model: ../shared/models/stories260K.gguf when present (it writes plain
# English, so stop strings taken from the middle of a reply cut real text at a
# real place), else a synthetic model from `strata mkmodel`, so the test never
# needs ../shared. STRATA_CLIENTS_MODEL=synthetic (or a GGUF path) overrides.
set -u
STRATA="${1:?usage: clients_test.sh path/to/strata}"
STRATA="$(cd "$(dirname "$STRATA")" && pwd)/$(basename "$STRATA")"
ROOT="$(pwd)"
CLIENTS="$ROOT/tests/integration/clients"
tmp=$(mktemp -d)
pids=()  # every server started, killed on exit if still running

die() {
  echo "FAIL: $*" >&2
  exit 1
}

cleanup() {
  local pid
  for pid in ${pids[@]+"${pids[@]}"}; do
    if kill -0 "$pid" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
    fi
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

# --- Node and the SDKs --------------------------------------------------------
command -v npm >/dev/null 2>&1 || die "npm is not installed: these tests need Node.js >= 20.10 and npm"
# 20.10 brought --test-concurrency; the SDKs need 20 too.
node_recent() {
  node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 10) ? 0 : 1)' 2>/dev/null
}
# Debian 12 ships node 18: then take a node 22 binary from the npm registry
# (package node-linux-<arch>), kept in the user's cache for later runs.
# STRATA_CLIENTS_FETCH_NODE=1 does so even when the machine's node is recent.
if ! command -v node >/dev/null 2>&1 || ! node_recent || [ -n "${STRATA_CLIENTS_FETCH_NODE:-}" ]; then
  case "$(uname -m)" in
    x86_64) arch=x64 ;;
    aarch64) arch=arm64 ;;
    *) die "node $(node --version 2>/dev/null || echo '(none)') is too old and no node package exists for $(uname -m)" ;;
  esac
  nodedir="${XDG_CACHE_HOME:-$HOME/.cache}/strata/node22-$arch"
  if [ ! -x "$nodedir/node_modules/node-linux-$arch/bin/node" ]; then
    echo "node $(node --version 2>/dev/null || echo '(none)') (need >= 20.10, or STRATA_CLIENTS_FETCH_NODE is set): installing node-linux-$arch@22 from the npm registry into $nodedir"
    mkdir -p "$nodedir" &&
      npm install --prefix "$nodedir" --no-save --no-audit --no-fund --loglevel=error "node-linux-$arch@22" >"$tmp/node.log" 2>&1 ||
      { cat "$tmp/node.log" >&2; die "could not install node-linux-$arch@22 from the npm registry"; }
  fi
  export PATH="$nodedir/node_modules/node-linux-$arch/bin:$PATH"
  node_recent || die "node $(node --version) is too old: these tests need Node.js >= 20.10"
fi
echo "node $(node --version), npm $(npm --version)"

# npm ci empties node_modules first, so two runs from one source tree (say a
# Release and a sanitizer build) would pull the packages from under each
# other: one run at a time per tree (the lock is freed when this script exits).
if command -v flock >/dev/null 2>&1; then
  lock="${TMPDIR:-/tmp}/strata-clients-test.$(printf '%s' "$CLIENTS" | cksum | cut -d' ' -f1).lock"
  exec 9>"$lock"
  flock -w 600 9 || die "another client test run from $CLIENTS held $lock for 10 minutes"
fi

# npm ci: exactly the versions in package-lock.json (integrity-checked), into
# tests/integration/clients/node_modules (ignored by git).
if ! (cd "$CLIENTS" && npm ci --no-audit --no-fund --loglevel=error >"$tmp/npm.log" 2>&1); then
  cat "$tmp/npm.log" >&2
  die "'npm ci' in $CLIENTS failed (is the npm registry $(npm config get registry) reachable?)"
fi
echo "installed: $(cd "$CLIENTS" && node -p 'const l=require("./package-lock.json").packages; ["openai","@anthropic-ai/sdk"].map(n=>n+"@"+l["node_modules/"+n].version).join(", ")')"

# --- The model ----------------------------------------------------------------
model="${STRATA_CLIENTS_MODEL:-}"
if [ -z "$model" ] && [ -f "$ROOT/../shared/models/stories260K.gguf" ]; then
  model="$ROOT/../shared/models/stories260K.gguf"
fi
if [ -z "$model" ] || [ "$model" = synthetic ]; then
  model="$tmp/m.gguf"
  "$STRATA" mkmodel --dims n_embd=64,n_layers=2,n_heads=4,n_kv_heads=2,n_ff=128 --type f32 \
    -o "$model" >"$tmp/mkmodel.log" 2>&1 || { cat "$tmp/mkmodel.log"; die "strata mkmodel failed"; }
fi
echo "model: $model"

# The watermark key every server signs with (watermark.test.js checks it).
export STRATA_WATERMARK_KEY="$tmp/watermark.key"
printf 'clients-test-watermark-secret-0123456789\n' >"$STRATA_WATERMARK_KEY"
export STRATA_BIN="$STRATA"

# --- The servers --------------------------------------------------------------
# start_server WHAT LOG ARGS...: `strata serve ARGS` on a port the kernel
# picks (--port 0: no race with other processes; the server logs it as
# "listening on http://127.0.0.1:PORT"), then a bounded wait for GET /health
# 200 (it answers 503 while the model loads). Sets server_pid and
# server_port; on failure prints the log and returns 1.
start_server() {
  local what=$1 log=$2
  shift 2
  "$STRATA" serve "$@" --port 0 --grace 10 --audit-log "$log.audit" \
    --watermark-key-file "$STRATA_WATERMARK_KEY" >"$log" 2>&1 &
  server_pid=$!
  pids+=("$server_pid")
  server_port=""
  for _ in $(seq 1 300); do
    server_port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9][0-9]*\).*|\1|p' "$log" | head -n 1)
    [ -n "$server_port" ] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$server_port" ]; then
    cat "$log"
    echo "FAIL: $what did not say where it listens within 30 s"
    return 1
  fi
  if ! node -e '
    const [url, pid] = process.argv.slice(1);
    const end = Date.now() + 60000;
    (async () => {
      for (;;) {
        try { process.kill(Number(pid), 0); } catch { console.error("the server exited"); process.exit(1); }
        try { if ((await fetch(url)).status === 200) process.exit(0); } catch {}
        if (Date.now() > end) { console.error("no 200 from " + url + " within 60 s"); process.exit(1); }
        await new Promise((r) => setTimeout(r, 100));
      }
    })();' "http://127.0.0.1:$server_port/health" "$server_pid"; then
    cat "$log"
    echo "FAIL: $what did not become healthy"
    return 1
  fi
  echo "$what: pid $server_pid, http://127.0.0.1:$server_port"
}

# stop_server WHAT PID LOG: SIGTERM drains and exits 0, with nothing
# alarming in the log; else says what went wrong, shows the log's tail and
# returns 1.
stop_server() {
  local what=$1 pid=$2 log=$3 rc="" bad=0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 300); do
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid"
      rc=$?
      break
    fi
    sleep 0.1
  done
  if [ -z "$rc" ]; then
    echo "FAIL: $what did not exit within 30 s of SIGTERM"
    bad=1
  elif [ "$rc" -ne 0 ]; then
    echo "FAIL: $what exited with $rc after SIGTERM (want 0)"
    bad=1
  fi
  if grep -nE 'CHECK failed|AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:|ThreadSanitizer' "$log"; then
    echo "FAIL: the log of $what has the lines above"
    bad=1
  fi
  # Its audit log: every request recorded, the chain intact.
  if ! "$STRATA" audit verify "$log".audit* >"$log.verify" 2>&1; then
    echo "FAIL: the audit log of $what does not verify:"
    cat "$log.verify"
    bad=1
  fi
  if [ "$bad" -ne 0 ]; then
    echo "--- log of $what (last 60 lines) ---"
    tail -n 60 "$log"
  fi
  return "$bad"
}

# run_config CHAIN: the servers of one configuration, the tests, the
# shutdown. Returns 1 when anything of it failed.
run_config() {
  local chain=$1 dir="$tmp/$1" fail=0
  local up_pid up_port up_log="$tmp/$1/upstream.log"
  local front_pid="" front_log="$tmp/$1/front.log"
  mkdir -p "$dir"
  local what="[$chain] the server"
  local files=(openai.test.js anthropic.test.js tools.test.js watermark.test.js) extra=()
  case "$chain" in
    direct) ;;
    dashboard)
      # Two tenants; latency bounds below any real TTFT, evaluated every
      # 0.5 s, so the switcher steps down under the test's traffic and
      # never back up while the page is compared with /metrics.
      # The page is behind the admin key (the browser logs in with it).
      printf 'dash-key-alpha-0001 alpha\ndash-key-beta-00002 beta\n' >"$dir/keys"
      printf 'dash-admin-key-0123456789\n' >"$dir/admin.key"
      export STRATA_DASHBOARD_KEYS="$(cat "$dir/keys")"
      export STRATA_ADMIN_KEY="dash-admin-key-0123456789"
      extra=(--api-keys "$dir/keys" --admin-key-file "$dir/admin.key" --rt-switcher on --rt-interval 0.5 --rt-window 2
        --rt-breach 1 --rt-calm 1000000 --rt-dwell 0 --rt-ttft-floor 0.00001 --rt-ttft-slo 0.00001
        --rt-tpot-floor 0.00001 --rt-tpot-slo 0.00001)
      files=(dashboard.test.js)
      ;;
    *) what="[$chain] the upstream" ;;
  esac
  # Every request is recorded as a request snapshot (docs/api.md): the
  # recording must be invisible to the clients, whatever they send.
  local snaps=(--snapshots "$dir/snapshots" --snapshot-key-file "$tmp/snapshot.key")
  start_server "$what" "$up_log" -m "$model" --alias test-model -t 2 "${snaps[@]}" \
    ${extra[@]+"${extra[@]}"} || return 1
  up_pid=$server_pid
  up_port=$server_port
  local base="http://127.0.0.1:$up_port" log="$up_log"
  if [ "$chain" = openai ] || [ "$chain" = anthropic ]; then
    if start_server "[$chain] the front" "$front_log" --backend "$chain:$base" \
      --backend-name test-model --backend-model test-model \
      --snapshots "$dir/front-snapshots" --snapshot-key-file "$tmp/snapshot.key"; then
      front_pid=$server_pid
      base="http://127.0.0.1:$server_port"
      log="$front_log"
      files+=(chain.test.js)
    else
      fail=1
    fi
  fi

  # One test file at a time, so no other request is running when a test
  # checks that the engine went idle.
  if [ "$fail" -eq 0 ]; then
    (cd "$CLIENTS" && STRATA_CHAIN="$chain" STRATA_BASE_URL="$base" STRATA_SERVER_LOG="$log" \
      STRATA_ENGINE_URL="http://127.0.0.1:$up_port" STRATA_ENGINE_LOG="$up_log" \
      STRATA_ARTIFACTS_DIR="${STRATA_ARTIFACTS_DIR:-$ROOT/build/test-artifacts}" \
      node --test --test-concurrency=1 "${files[@]}") || { echo "FAIL: [$chain] client tests failed"; fail=1; }
  fi

  # The front first: its upstream stays up while it drains.
  if [ -n "$front_pid" ]; then
    stop_server "[$chain] the front" "$front_pid" "$front_log" || fail=1
  fi
  stop_server "$what" "$up_pid" "$up_log" || fail=1
  if ! ls "$dir/snapshots/"*.snap >/dev/null 2>&1; then
    echo "FAIL: [$chain] no request snapshot was recorded"
    fail=1
  fi
  return "$fail"
}

# --- The configurations ---------------------------------------------------------
openssl rand -hex 32 >"$tmp/snapshot.key" || die "openssl cannot make a snapshot key"
failed=()
summary=()
for chain in ${STRATA_CLIENTS_CHAINS:-direct openai anthropic dashboard}; do
  case "$chain" in
    direct | openai | anthropic | dashboard) ;;
    *) die "STRATA_CLIENTS_CHAINS has '$chain': want direct, openai, anthropic or dashboard" ;;
  esac
  echo "=== configuration $chain"
  t0=$(date +%s%N)
  if run_config "$chain"; then result=passed; else result=FAILED; failed+=("$chain"); fi
  ms=$((($(date +%s%N) - t0) / 1000000))
  summary+=("$chain $result in $((ms / 1000)).$((ms % 1000 / 100)) s")
  echo "=== configuration $chain: $result in $((ms / 1000)).$((ms % 1000 / 100)) s"
done
printf '%s\n' "${summary[@]}"
if [ "${#failed[@]}" -ne 0 ]; then
  echo "FAIL: configuration(s) failed: ${failed[*]}"
  exit 1
fi
echo "ok: client tests passed in every configuration; servers stopped cleanly"
exit 0
