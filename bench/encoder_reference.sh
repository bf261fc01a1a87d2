#!/usr/bin/env bash
# Regenerates tests/model/testdata/encoder_reference.json: the sentence
# vectors llama.cpp's llama-embedding computes for the random-weight encoders
# `strata mkmodel` writes (the cases below), which tests/model/encoder_test.cpp
# compares strata's encoder against (cosine >= 0.9999).
#
#   bench/encoder_reference.sh LLAMA_EMBEDDING [OUT.json]
#
# LLAMA_EMBEDDING: the llama-embedding binary of a llama.cpp build
# (../shared/PEERS.md says how to build one). Env: STRATA
# (build/release/strata), VOCAB (../shared/models/vocab/ggml-vocab-bert-bge.gguf,
# for the bge-small case; skipped when absent).
set -euo pipefail
if [ $# -lt 1 ] || [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
  [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ] && exit 0
  exit 2
fi
embedding="$1"
out="${2:-tests/model/testdata/encoder_reference.json}"
strata="${STRATA:-build/release/strata}"
vocab="${VOCAB:-../shared/models/vocab/ggml-vocab-bert-bge.gguf}"
work="$(mktemp -d)"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT

# name | mkmodel arguments | type | vocab (or -) | texts file
texts_plain="$work/plain.txt"
printf '%s\n' "the cat saw the dog" "what is a model, and why is it fast?" \
  "hello world" "the little bird went to the park with her friend" > "$texts_plain"
texts_bge="$work/bge.txt"
printf '%s\n' "Hello, World!" "How do I reset my password?" \
  "The quick brown fox jumps over the lazy dog." "Äpfel und Birnen kosten 3,50 €" > "$texts_bge"
cases=(
  "minilm-l6-f32|--shape minilm-l6|f32|-|$texts_plain|shape=minilm-l6"
  "nomic-bert-q8_0|--dims arch=nomic-bert,n_embd=256,n_layers=2,n_heads=4,n_ff=512,n_ctx=128|q8_0|-|$texts_plain|dims=nomic-bert,256,2,4,512,128"
  "bge-small-f16|--shape bge-small|f16|$vocab|$texts_bge|shape=bge-small"
)
json_cases=()
for c in "${cases[@]}"; do
  IFS='|' read -r name args type voc texts desc <<< "$c"
  vocab_args=()
  if [ "$voc" != "-" ]; then
    if [ ! -f "$voc" ]; then echo "skipping $name: $voc is absent" >&2; continue; fi
    vocab_args=(--vocab "$voc")
  fi
  # shellcheck disable=SC2086
  "$strata" mkmodel $args --type "$type" --seed 42 "${vocab_args[@]}" -o "$work/$name.gguf" \
    --log-level warn
  # One text per run, each into its own file, read whole. llama-embedding
  # prints a number at a time through an asynchronous logger that can lose
  # the end of its output at exit: a run whose output is not a whole JSON
  # array is repeated (at most 20 times).
  i=0
  while IFS= read -r text; do
    f="$work/$name.$i.out"
    for attempt in $(seq 20); do
      "$embedding" -m "$work/$name.gguf" -p "$text" --embd-output-format array -t 2 \
        2> /dev/null | cat > "$f" || true
      python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$f" 2> /dev/null && break
      [ "$attempt" = 20 ] && { echo "llama-embedding gave no whole output for $name" >&2; exit 1; }
    done
    i=$((i + 1))
  done < "$texts"
  json_cases+=("$name|$type|$desc|$texts|$work/$name")
done
python3 - "$out" "${json_cases[@]}" <<'PY'
import json, sys
out = sys.argv[1]
cases = []
for spec in sys.argv[2:]:
    name, type_, desc, texts, vectors = spec.split("|")
    case = {"name": name, "type": type_, "seed": 42}
    kind, value = desc.split("=", 1)
    if kind == "shape":
        case["shape"] = value
    else:
        arch, e, l, h, f, c = value.split(",")
        case["dims"] = {"arch": arch, "n_embd": int(e), "n_layers": int(l), "n_heads": int(h),
                        "n_ff": int(f), "n_ctx": int(c)}
    case["texts"] = open(texts, encoding="utf-8").read().splitlines()
    case["vectors"] = []
    for i in range(len(case["texts"])):
        run = json.loads(open(f"{vectors}.{i}.out", encoding="utf-8").read())
        case["vectors"].append([round(x, 7) for x in run[0]])
    assert len(case["vectors"]) == len(case["texts"]), name
    cases.append(case)
doc = {"source": "llama.cpp llama-embedding, --embd-output-format array (L2-normalised)",
       "cases": cases}
with open(out, "w", encoding="utf-8") as f:
    json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
    f.write("\n")
print(f"wrote {len(cases)} cases to {out}")
PY
