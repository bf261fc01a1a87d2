#!/usr/bin/env bash
# Real clients against the real server: starts `strata serve` on a free
# loopback port and runs tests/integration/clients (the official `openai` and
# `@anthropic-ai/sdk` npm packages, pinned in its package-lock.json) with
# Node's test runner. Run by ctest from the repository root:
#   tests/integration/clients_test.sh path/to/strata
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
server_pid=""

die() {
  echo "FAIL: $*" >&2
  exit 1
}

cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -KILL "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
  fi
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

# --- The server ---------------------------------------------------------------
# --port 0: the kernel picks a free port (no race with other processes); the
# server logs it as "listening on http://127.0.0.1:PORT".
log="$tmp/serve.log"
"$STRATA" serve -m "$model" --port 0 --alias test-model -t 2 --grace 10 >"$log" 2>&1 &
server_pid=$!
port=""
for _ in $(seq 1 300); do
  port=$(sed -n 's|.*listening on http://127\.0\.0\.1:\([0-9][0-9]*\).*|\1|p' "$log" | head -n 1)
  [ -n "$port" ] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$port" ]; then
  cat "$log"
  die "the server did not say where it listens within 30 s"
fi
# Bounded wait for GET /health 200 (it answers 503 while the model loads).
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
  })();' "http://127.0.0.1:$port/health" "$server_pid"; then
  cat "$log"
  die "the server did not become healthy"
fi
echo "server: pid $server_pid, http://127.0.0.1:$port"

# --- The tests ----------------------------------------------------------------
# One test file at a time, so no other request is running when a test checks
# that the server went idle.
fail=0
(cd "$CLIENTS" && STRATA_BASE_URL="http://127.0.0.1:$port" STRATA_SERVER_LOG="$log" \
  node --test --test-concurrency=1 openai.test.js anthropic.test.js) || fail=1

# --- Shutdown: SIGTERM drains and exits 0, with nothing alarming in the log ----
kill -TERM "$server_pid"
rc=""
for _ in $(seq 1 300); do
  if ! kill -0 "$server_pid" 2>/dev/null; then
    wait "$server_pid"
    rc=$?
    break
  fi
  sleep 0.1
done
if [ -z "$rc" ]; then
  echo "FAIL: the server did not exit within 30 s of SIGTERM"
  fail=1
elif [ "$rc" -ne 0 ]; then
  echo "FAIL: the server exited with $rc after SIGTERM (want 0)"
  fail=1
fi
server_pid=""
if grep -nE 'CHECK failed|AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:|ThreadSanitizer' "$log"; then
  echo "FAIL: the server log has the lines above"
  fail=1
fi
if [ "$fail" -ne 0 ]; then
  echo "--- server log (last 60 lines) ---"
  tail -n 60 "$log"
  exit 1
fi
echo "ok: client tests passed; server stopped cleanly"
exit 0
