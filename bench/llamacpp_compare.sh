#!/usr/bin/env bash
# Interleaved `strata bench` and llama.cpp's `llama-bench` on the same files,
# threads and sizes, so both see the same machine state (docs/benchmarks.md).
#
#   bench/llamacpp_compare.sh LLAMA_BENCH OUT_DIR MODEL.gguf...
#
# Env: THREADS (2), REPS (3), ROUNDS (1), N_PROMPT (512), N_GEN (128),
# STRATA (build/release/strata). Writes OUT_DIR/{strata,llama}-NAME-ROUND.json
# and prints one line per model and round with both sides and the ratios.
set -euo pipefail
if [ $# -lt 3 ] || [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ] && exit 0
  exit 2
fi
llama_bench="$1"
out="$2"
shift 2
strata="${STRATA:-build/release/strata}"
threads="${THREADS:-2}" reps="${REPS:-3}" rounds="${ROUNDS:-1}"
np="${N_PROMPT:-512}" ng="${N_GEN:-128}"
[ -x "$llama_bench" ] || { echo "error: '$llama_bench' is not an executable llama-bench" >&2; exit 2; }
[ -x "$strata" ] || { echo "error: '$strata' is not built (cmake --build --preset release)" >&2; exit 2; }
mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
  for model in "$@"; do
    [ -f "$model" ] || { echo "error: no model file '$model'" >&2; exit 2; }
    name=$(basename "$model" .gguf)
    s="$out/strata-$name-$round.json" l="$out/llama-$name-$round.json"
    "$strata" bench -m "$model" -p "$np" -n "$ng" -t "$threads" -r "$reps" --json "$s" >/dev/null
    "$llama_bench" -m "$model" -p "$np" -n "$ng" -t "$threads" -r "$reps" -o json >"$l" 2>/dev/null
    python3 - "$s" "$l" "$name" "$round" <<'PY'
import json, sys
s, l, name, rnd = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4]
st = {t["name"][:2]: t["median"] for t in s["tests"]}
ll = {("pp" if x["n_prompt"] > 0 else "tg"): x["avg_ts"] for x in l}
print(f"{name} round {rnd}: pp strata {st['pp']:.1f} llama.cpp {ll['pp']:.1f} ({st['pp'] / ll['pp']:.2f}x)  "
      f"tg strata {st['tg']:.1f} llama.cpp {ll['tg']:.1f} ({st['tg'] / ll['tg']:.2f}x)  "
      f"RSS peak {s['peak_rss_bytes'] / 2**20:.0f} MiB  load-to-first-token {s['load_to_first_token_ms']:.0f} ms")
PY
  done
done
