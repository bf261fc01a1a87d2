#!/usr/bin/env bash
# Repeated-FAQ workload: strata serve with its response tiers on (L1 exact and
# L3 near-duplicate, --l3 on) against the same server with every cache off,
# on real questions repeated with a Zipf popularity (docs/benchmarks.md,
# "Repeated FAQ").
#
#   bench/faq.sh MODEL.gguf OUT_DIR PROMPTS_DIR
#
# PROMPTS_DIR holds gptcache_mock_data.json (GPTCache's mock FAQ set: texts
# with a ChatGPT paraphrase each) and mt_bench_question.jsonl (MT-Bench; the
# first turn of each question). The pool is the 80 MT-Bench questions and the
# first GPTCache texts, $FAQS in all, shuffled; request i asks item
# rank ~ Zipf($ZIPF) of the pool, worded as users reword a question they
# retype: verbatim (50 %), lowercased (15 %), its end punctuation changed
# (10 %), a greeting or "please" in front (10 %), spaced differently (5 %), or
# GPTCache's paraphrase (10 %; verbatim for MT-Bench items). The workload is
# written to OUT_DIR/faq-rR.jsonl (one request per line, in order, with its
# item and wording) and replayed with loadgen --prompt-file: $CONC clients,
# closed loop, temperature 0, exactly $GEN tokens per generated answer.
# Sides, one server at a time (order alternating per round), each starting cold:
#   cached   strata serve --l3 on (L1 64 MiB and coalescing on, their defaults)
#   nocache  strata serve --l1-bytes 0 --l3 off --no-coalesce, requests with
#            "no_cache": true (no KV prefix reuse either)
# Checks, per round: every cached-side response carries x-strata-cache; no
# request whose exact text was not asked before is marked l1; l3 answers and
# the fastest generated (miss) answer are listed, so an unmarked reuse would
# show as a miss faster than any generation.
#
# Env: THREADS (2), CONC (4), REQUESTS (240), FAQS (160), ZIPF (1.0), GEN (32),
# ROUNDS (1), FIRST_ROUND (1), SIDES ("cached nocache"), STRATA
# (build/release/strata), LOADGEN (build/release/bench/loadgen), PORT (18380).
set -euo pipefail
if [ $# -lt 3 ] || [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
  sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'
  [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ] && exit 0
  exit 2
fi
model="$1" out="$2" data="$3"
strata="${STRATA:-build/release/strata}" loadgen="${LOADGEN:-build/release/bench/loadgen}"
threads="${THREADS:-2}" conc="${CONC:-4}" requests="${REQUESTS:-240}" faqs="${FAQS:-160}"
zipf="${ZIPF:-1.0}" gen="${GEN:-32}" rounds="${ROUNDS:-1}" first="${FIRST_ROUND:-1}"
sides="${SIDES:-cached nocache}" port="${PORT:-18380}"
[ -x "$strata" ] || { echo "error: '$strata' is not built (cmake --build --preset release)" >&2; exit 2; }
[ -x "$loadgen" ] || { echo "error: '$loadgen' is not built" >&2; exit 2; }
[ -f "$model" ] || { echo "error: no model file '$model'" >&2; exit 2; }
for f in gptcache_mock_data.json mt_bench_question.jsonl; do
  [ -f "$data/$f" ] || { echo "error: no '$data/$f'" >&2; exit 2; }
done
mkdir -p "$out"

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

# make_workload ROUND: writes OUT_DIR/faq-rROUND.jsonl.
make_workload() {
  python3 "$(dirname "$0")/faq_workload.py" "$data" "$out/faq-r$1.jsonl" "$1" "$requests" "$faqs" "$zipf"
}

# run_side SIDE ROUND INDEX
run_side() {
  local side="$1" round="$2" i="$3"
  local p=$((port + 2 * round + i)) extra=() flags=()
  if [ "$side" = cached ]; then
    flags=(--l3 on)
  else
    flags=(--l1-bytes 0 --l3 off --no-coalesce)
    extra=(--extra-body '{"no_cache":true}')
  fi
  "$strata" serve -m "$model" -t "$threads" --parallel "$conc" --port "$p" --log-level warn \
    "${flags[@]}" >"$out/$side-r$round.log" 2>&1 &
  pid=$!
  local common=(--url "http://127.0.0.1:$p" --endpoint chat --max-tokens "$gen" --ignore-eos
                --temperature 0 -q)
  # Warm-up outside the workload (and outside every cache): loads the model pages.
  "$loadgen" "${common[@]}" --extra-body '{"no_cache":true}' --wait-ready 120 -c 1 -n 1 \
    --prompt-tokens 16 --seed 99 >/dev/null
  "$loadgen" "${common[@]}" "${extra[@]}" --prompt-file "$out/faq-r$round.jsonl" -c "$conc" \
    -n "$requests" --json "$out/$side-r$round.json" >/dev/null
  stop_server
}

read -r -a side_list <<<"$sides"
for round in $(seq "$first" $((first + rounds - 1))); do
  make_workload "$round"
  k=$(( (round - 1) % ${#side_list[@]} ))
  order=("${side_list[@]:$k}" "${side_list[@]:0:$k}")
  for side in "${order[@]}"; do
    idx=0
    for s in "${side_list[@]}"; do [ "$s" = "$side" ] && break; idx=$((idx + 1)); done
    run_side "$side" "$round" "$idx"
  done
done

python3 - "$out" <<'PY'
import collections, glob, json, os, re, sys
out = sys.argv[1]
def pct(v, p):
    v = sorted(v)
    if not v:
        return float("nan")
    k = max(0, -(-p * len(v) // 100) - 1)
    return v[int(k)]
for wl in sorted(glob.glob(os.path.join(out, "faq-r*.jsonl"))):
    rnd = re.search(r"faq-r(\d+)\.jsonl$", wl).group(1)
    work = [json.loads(l) for l in open(wl) if l.strip()]
    distinct = len({w["prompt"] for w in work})
    items = len({w["item"] for w in work})
    print(f"round {rnd}: {len(work)} requests, {items} distinct questions, {distinct} distinct texts "
          f"(an exact cache can answer at most {1 - distinct / len(work):.1%}; "
          f"a perfect paraphrase cache {1 - items / len(work):.1%})")
    for side in ("cached", "nocache"):
        p = os.path.join(out, f"{side}-r{rnd}.json")
        if not os.path.exists(p):
            continue
        j = json.load(open(p))
        sm, samples = j["summary"], j["samples"]
        ok = [x for x in samples if x["outcome"] == "ok"]
        by = collections.Counter(x.get("cache") or "none" for x in ok)
        n = max(1, len(ok))
        hits = by["l1"] + by["l3"] + by["coalesced"]
        line = (f"  {side:8s} {sm['request_rate_per_s']:.2f} req/s  TTFT P50 {sm['ttft_ms']['p50']:.0f} "
                f"P99 {sm['ttft_ms']['p99']:.0f} ms  E2E P50 {sm['e2e_ms']['p50']:.0f} P99 "
                f"{sm['e2e_ms']['p99']:.0f} ms  failed {sm['failed']}  served: "
                + ", ".join(f"{k} {v}" for k, v in sorted(by.items())))
        if side == "cached":
            line += (f"  -> L1 {by['l1'] / n:.1%}, L3 {by['l3'] / n:.1%}, coalesced "
                     f"{by['coalesced'] / n:.1%}, combined {hits / n:.1%}")
        print(line)
        if side == "cached":
            for kind in ("miss", "l1", "l3", "coalesced"):
                t = [x["ttft_ms"] for x in ok if x.get("cache") == kind and x["ttft_ms"] is not None]
                e = [x["e2e_ms"] for x in ok if x.get("cache") == kind]
                if e:
                    print(f"    {kind:9s} n {len(e):4d}  TTFT P50 {pct(t, 50):8.1f} P99 {pct(t, 99):8.1f} ms"
                          f"  E2E P50 {pct(e, 50):8.1f} P99 {pct(e, 99):8.1f} ms")
            wording = collections.Counter()
            for x in ok:
                wording[(work[x["index"]]["wording"], x.get("cache") or "none")] += 1
            print("    by wording: " + "; ".join(
                f"{w}: " + ", ".join(f"{c} {wording[(w, c)]}" for c in ("miss", "l1", "l3", "coalesced")
                                     if wording[(w, c)])
                for w in ("verbatim", "lower", "punct", "filler", "space", "paraphrase")))
            unmarked = sum(1 for x in ok if not x.get("cache"))
            bad_l1 = [x["index"] for x in ok if x.get("cache") == "l1" and not work[x["index"]]["repeat"]]
            l3_new = sum(1 for x in ok if x.get("cache") == "l3" and not work[x["index"]]["repeat"])
            miss_t = [x["ttft_ms"] for x in ok if x.get("cache") == "miss" and x["ttft_ms"] is not None]
            print(f"    checks: responses without x-strata-cache {unmarked}; l1 answers to a text "
                  f"not asked before {len(bad_l1)}" + ("  OK" if not (unmarked or bad_l1) else "  FAILED")
                  + f"; l3 answers {by['l3']}, {l3_new} of them to a wording never asked before; "
                  f"fastest miss TTFT {min(miss_t) if miss_t else float('nan'):.1f} ms")
    c, u = (os.path.join(out, f"{s}-r{rnd}.json") for s in ("cached", "nocache"))
    if os.path.exists(c) and os.path.exists(u):
        cs, us = json.load(open(c))["summary"], json.load(open(u))["summary"]
        print(f"  cached / nocache: TTFT P50 {cs['ttft_ms']['p50'] / us['ttft_ms']['p50']:.3f}x "
              f"P99 {cs['ttft_ms']['p99'] / us['ttft_ms']['p99']:.3f}x, E2E P50 "
              f"{cs['e2e_ms']['p50'] / us['e2e_ms']['p50']:.3f}x P99 {cs['e2e_ms']['p99'] / us['e2e_ms']['p99']:.3f}x, "
              f"throughput {cs['request_rate_per_s'] / us['request_rate_per_s']:.2f}x")
PY
