#!/usr/bin/env bash
# The semantic tier end to end: strata serve with L3 and the semantic tier on
# (--encoder ENCODER.gguf) answers GPTCache's mock texts, then their ChatGPT
# paraphrases, then texts it never saw. Reports the paraphrases answered by
# each tier, the false hits (a paraphrase answered with another text's
# answer, or an unseen text answered at all) and the latency of hits and of
# generated answers (docs/benchmarks.md, "Semantic tier").
#
#   bench/semantic.sh MODEL.gguf ENCODER.gguf PROMPTS_DIR
#
# ENCODER.gguf: strata train-encoder's output, or a bert / nomic-bert file.
# Env: THREADS (2), N (300 pairs), UNSEEN (100), SIMILARITY (0.75), GEN (16),
# VERIFY (0.05: --semantic-verify; 0 serves every would-be hit unverified),
# PORT (18700), STRATA (build/release/strata).
set -euo pipefail
if [ $# -lt 3 ] || [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
  [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ] && exit 0
  exit 2
fi
model="$1" encoder="$2" prompts="$3"
strata="${STRATA:-build/release/strata}"
port="${PORT:-18700}"
source "$(dirname "$0")/lib.sh"
"$strata" serve -m "$model" --encoder "$encoder" --semantic on --l3 on \
  --semantic-similarity "${SIMILARITY:-0.75}" --semantic-verify "${VERIFY:-0.05}" -t "${THREADS:-2}" --port "$port" \
  --log-level warn &
pid=$!
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
  sleep 0.1
done
python3 - "$port" "$prompts/gptcache_mock_data.json" "${N:-300}" "${UNSEEN:-100}" \
  "${GEN:-16}" <<'PY'
import json, statistics, sys, time, urllib.request
port, path, n, unseen, gen = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
pairs = json.load(open(path))
model = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models"))["data"][0]["id"]
def ask(text):
    body = {"model": model, "messages": [{"role": "user", "content": text}],
            "max_tokens": gen, "temperature": 0, "ignore_eos": True}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req) as r:
        answer = json.load(r)["choices"][0]["message"]["content"]
        return r.headers.get("x-strata-cache"), answer, time.perf_counter() - t0
first = {}
miss_s, hit_s = [], []
for p in pairs[:n]:
    tier, answer, s = ask(p["origin"])
    first[p["origin"]] = answer
    (miss_s if tier == "miss" else hit_s).append(s)
tiers, false_hits = {}, 0
for p in pairs[:n]:
    tier, answer, s = ask(p["similar"])
    tiers[tier] = tiers.get(tier, 0) + 1
    if tier in ("l3", "semantic"):
        hit_s.append(s)
        if answer != first[p["origin"]]:
            false_hits += 1
    elif tier == "miss":
        miss_s.append(s)
unseen_hits = 0
for p in pairs[n:n + unseen]:
    tier, _, s = ask(p["similar"])
    unseen_hits += tier in ("l3", "semantic")
def ms(v): return f"{1000 * statistics.median(v):.1f}" if v else "-"
print(f"paraphrases of {n} answered texts: " +
      ", ".join(f"{k} {v}" for k, v in sorted(tiers.items())))
print(f"false hits: {false_hits} paraphrases answered with another text's answer; "
      f"{unseen_hits} of {unseen} unseen texts answered from a cache")
print(f"median latency: hits {ms(hit_s)} ms ({len(hit_s)}), generated {ms(miss_s)} ms ({len(miss_s)})")
metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
print("verification: " + "; ".join(
    line for line in metrics.splitlines()
    if line.startswith(("strata_semantic_verifications_total", "strata_semantic_threshold",
                        "strata_semantic_false_hit_rate"))))
PY
