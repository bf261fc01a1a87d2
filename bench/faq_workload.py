#!/usr/bin/env python3
"""The repeated-FAQ workload of bench/faq.sh (and bench/backends.sh): real
questions repeated with a Zipf popularity, reworded as users retype them.

  bench/faq_workload.py PROMPTS_DIR OUT.jsonl ROUND REQUESTS FAQS ZIPF

PROMPTS_DIR holds mt_bench_question.jsonl and gptcache_mock_data.json. Writes
one request per line, in order: {"prompt", "item", "wording", "src",
"repeat"}. The same arguments give the same bytes (seeded by ROUND)."""
import bisect, json, random, sys
data, path, rnd, n, faqs, s = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
pool, seen = [], set()
for line in open(f"{data}/mt_bench_question.jsonl"):
    if line.strip():
        q = json.loads(line)["turns"][0]
        if q not in seen:
            seen.add(q); pool.append({"text": q, "para": None, "src": "mt_bench"})
for pair in json.load(open(f"{data}/gptcache_mock_data.json")):
    if len(pool) >= faqs:
        break
    if pair["origin"] not in seen:
        seen.add(pair["origin"]); pool.append({"text": pair["origin"], "para": pair["similar"], "src": "gptcache"})
pool = pool[:faqs]
rng = random.Random(1000 + rnd)
rng.shuffle(pool)  # popularity rank is independent of the source
cdf, acc = [], 0.0
for k in range(len(pool)):
    acc += 1.0 / (k + 1) ** s
    cdf.append(acc)
def reword(t, kind):
    if kind == "lower":
        return t.lower()
    if kind == "punct":
        return t[:-1] if t[-1:] in "?.!" else t + "?"
    if kind == "filler":
        return rng.choice(["Please, ", "Hi! ", "Quick question: ", "Hello, "]) + t
    if kind == "space":
        return "  ".join(t.split(" ")) + "\n"
    return t
kinds = [("verbatim", 50), ("lower", 15), ("punct", 10), ("filler", 10), ("space", 5), ("paraphrase", 10)]
asked = set()
with open(path, "w") as f:
    for i in range(n):
        item = bisect.bisect_left(cdf, rng.random() * acc)
        kind = rng.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
        it = pool[item]
        if kind == "paraphrase":
            text = it["para"] if it["para"] else it["text"]
            if not it["para"]:
                kind = "verbatim"
        else:
            text = reword(it["text"], kind)
        f.write(json.dumps({"prompt": text, "item": item, "wording": kind, "src": it["src"],
                            "repeat": text in asked}) + "\n")
        asked.add(text)
