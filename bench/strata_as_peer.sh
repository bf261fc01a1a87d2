#!/usr/bin/env bash
# Stands in for llama-server in bench/shared_prompt_warm.sh (and
# bench/shared_prompt.sh), so two strata builds can be compared with the same
# pairs and requests: it takes the llama-server flags those scripts pass and
# starts the strata build named by OTHER_STRATA with the flags they give
# strata (bench/shared_prompt_servers.sh).
#
#   OTHER_STRATA=old/strata PAIRS=4 bench/shared_prompt_warm.sh \
#     bench/strata_as_peer.sh model.gguf out/
#
# The ratios printed as "strata / llama-server" are then STRATA / OTHER_STRATA.
set -euo pipefail
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
[ -x "${OTHER_STRATA:-}" ] || { echo "error: set OTHER_STRATA to a strata binary" >&2; exit 2; }
model="" threads="" slots="" kv="" port=""
while [ $# -gt 0 ]; do
  case "$1" in
    -m) model="$2"; shift 2 ;;
    -t) threads="$2"; shift 2 ;;
    -np) slots="$2"; shift 2 ;;
    -c) kv="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --cache-reuse) shift 2 ;;
    *) echo "error: unexpected llama-server flag '$1'" >&2; exit 2 ;;
  esac
done
for v in model threads slots kv port; do
  [ -n "${!v}" ] || { echo "error: missing the llama-server flag for $v" >&2; exit 2; }
done
# The per-sequence context shared_prompt_warm.sh gives strata: the KV room per
# slot, rounded up to 256.
ctx=$(( (kv / slots + 255) / 256 * 256 ))
strata="$OTHER_STRATA" users="$slots"
# shellcheck source=bench/shared_prompt_servers.sh
source "$(dirname "$0")/shared_prompt_servers.sh"
pid=""
trap '[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; wait' TERM INT
start_strata_server "$port" /dev/stdout
wait "$pid"
