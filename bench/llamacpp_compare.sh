#!/usr/bin/env bash
# Interleaved `strata bench` and the `llama-bench` of one or more llama.cpp
# engines (llama.cpp, ik_llama.cpp) on the same files, threads and sizes, so
# every side sees the same machine state (docs/benchmarks.md).
#
#   bench/llamacpp_compare.sh PEERS OUT_DIR MODEL.gguf...
#
# PEERS: a llama-bench path (labelled llama.cpp), or LABEL=PATH[,LABEL=PATH...]
# (e.g. llama.cpp=~/llama.cpp/build/bin/llama-bench,ik_llama.cpp=~/ik/build/bin/llama-bench).
# Env: THREADS (2), REPS (3), ROUNDS (1), N_PROMPT (512), N_GEN (128),
# STRATA (build/release/strata); KV (a KV cache type, f32 | f16 | q8_0, or
# several separated by spaces: each is measured in turn, strata with
# --kv-type, the peers with -ctk/-ctv and flash attention on; unset = each
# side's default) and DEPTH (tokens already in the context of every test,
# strata's -d and llama-bench's -d; 0). Writes
# OUT_DIR/{strata,LABEL}-NAME[-KV][-dDEPTH]-ROUND.json and prints one line
# per model, KV type and round: strata's pp and tg with the share of the
# machine's limit each reached (int8 peak, read bandwidth; `strata bench`),
# then each peer's with strata's ratio to it.
set -euo pipefail
if [ $# -lt 3 ] || [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
  [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ] && exit 0
  exit 2
fi
peers_arg="$1"
out="$2"
shift 2
strata="${STRATA:-build/release/strata}"
threads="${THREADS:-2}" reps="${REPS:-3}" rounds="${ROUNDS:-1}"
np="${N_PROMPT:-512}" ng="${N_GEN:-128}"
depth="${DEPTH:-0}" kv_types="${KV:-}"
for kv in $kv_types; do
  case "$kv" in f32 | f16 | q8_0) ;; *) echo "error: KV type '$kv' is not f32, f16 or q8_0" >&2; exit 2 ;; esac
done
labels=() paths=()
IFS=',' read -r -a specs <<< "$peers_arg"
for spec in "${specs[@]}"; do
  if [[ "$spec" == *=* ]]; then label="${spec%%=*}" path="${spec#*=}"; else label=llama.cpp path="$spec"; fi
  [[ "$label" =~ ^[A-Za-z0-9._-]+$ ]] || { echo "error: peer label '$label' is not [A-Za-z0-9._-]+" >&2; exit 2; }
  [ -x "$path" ] || { echo "error: '$path' ($label) is not an executable llama-bench" >&2; exit 2; }
  labels+=("$label") paths+=("$path")
done
[ -x "$strata" ] || { echo "error: '$strata' is not built (cmake --build --preset release)" >&2; exit 2; }
mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
  for model in "$@"; do
    [ -f "$model" ] || { echo "error: no model file '$model'" >&2; exit 2; }
    for kv in ${kv_types:-default}; do
      name=$(basename "$model" .gguf)
      # -d only where asked: ik_llama.cpp's llama-bench has no -d.
      strata_args=(-d "$depth") peer_args=()
      [ "$depth" -gt 0 ] && peer_args+=(-d "$depth")
      if [ "$kv" != default ]; then
        name="$name-$kv"
        strata_args+=(--kv-type "$kv")
        peer_args+=(-ctk "$kv" -ctv "$kv" -fa 1)
      fi
      [ "$depth" -gt 0 ] && name="$name-d$depth"
      s="$out/strata-$name-$round.json"
      "$strata" bench -m "$model" -p "$np" -n "$ng" -t "$threads" -r "$reps" "${strata_args[@]}" \
        --json "$s" >/dev/null
      results=()
      for k in "${!labels[@]}"; do
        l="$out/${labels[$k]}-$name-$round.json"
        # A peer that refuses the settings (some llama-bench builds take no
        # f32 KV cache) is left out of this line, with a note.
        if "${paths[$k]}" -m "$model" -p "$np" -n "$ng" -t "$threads" -r "$reps" "${peer_args[@]}" \
          -o json >"$l" 2>"$l.err"; then
          results+=("${labels[$k]}=$l")
        else
          echo "note: ${labels[$k]} failed on $name: $(grep -m1 -i error "$l.err" || tail -n1 "$l.err")" >&2
        fi
      done
      python3 - "$s" "$name" "$round" "${results[@]}" <<'PY'
import json, sys
s, name, rnd = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
st = {("pp" if t["n_prompt"] > 0 else "tg"): t for t in s["tests"]}
parts = []
if "pp" in st:
    parts.append(f"pp {st['pp']['median']:.1f} "
                 f"({100 * st['pp'].get('fraction_of_limit', 0):.0f}% of int8 peak)")
if "tg" in st:
    parts.append(f"tg {st['tg']['median']:.1f} "
                 f"({100 * st['tg'].get('fraction_of_limit', 0):.0f}% of bandwidth)")
line = f"{name} round {rnd}: strata " + " ".join(parts)
for spec in sys.argv[4:]:
    label, path = spec.split("=", 1)
    peer = {("pp" if x["n_prompt"] > 0 else "tg"): x["avg_ts"] for x in json.load(open(path))}
    line += f" | {label}"
    for k in ("pp", "tg"):
        if k in st and k in peer:
            line += f" {k} {peer[k]:.1f} ({st[k]['median'] / peer[k]:.2f}x)"
line += (f" | strata KV {s.get('kv_type', '?')} {s.get('kv_bytes_per_token', 0) / 1024:.1f} KiB/token,"
         f" RSS peak {s['peak_rss_bytes'] / 2**20:.0f} MiB, "
         f"load-to-first-token {s['load_to_first_token_ms']:.0f} ms")
print(line)
PY
    done
  done
done
