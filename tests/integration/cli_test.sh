#!/usr/bin/env bash
# The real binary on bad input: a clear message and a non-zero exit code, never
# a crash (exit codes >= 128 are signals). Run by ctest from the repository root.
set -u
STRATA="$1"
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect CODE NEEDLE -- ARGS...: runs strata, checks the exit code and that
# stdout+stderr contain NEEDLE.
expect() {
  local code="$1" needle="$2"
  shift 3
  local out rc
  out=$("$STRATA" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qF -- "$needle" <<<"$out"; then
    echo "FAIL: strata $* -> exit $rc (want $code), output:"
    echo "$out" | head -n 8
    echo "  (wanted the text: $needle)"
    fail=1
  else
    echo "ok: strata $* -> $rc"
  fi
}

expect 0 "generate" -- --help
expect 0 "--temp" -- generate --help
expect 0 "inspect" -- inspect --help
expect 2 "A subcommand is required" --
expect 2 "unknown command 'bogus'" -- bogus
expect 1 "cannot open" -- generate -m "$tmp/missing.gguf" -n 1
echo "this is not a model" > "$tmp/text.gguf"
expect 1 "not a GGUF file" -- generate -m "$tmp/text.gguf" -n 1
: > "$tmp/empty.gguf"
expect 1 "too short" -- generate -m "$tmp/empty.gguf" -n 1
expect 1 "is not a regular file" -- generate -m "$tmp" -n 1
expect 2 "-n -5 must be >= 0" -- generate -n -5
expect 2 "temperature -1 is outside" -- generate --temp -1
expect 2 "top_p 2 is outside" -- generate --top-p 2
expect 2 "-t 0 is outside" -- generate -t 0
expect 2 "Could not convert: --n-predict = abc" -- generate -n abc
expect 1 "cannot open" -- inspect "$tmp/missing.gguf"

# strata serve: every --rt-* flag's bad value is refused before anything
# starts, naming the flag as typed (the missing model is never reached, so a
# value that slipped through fails with "cannot open" instead of hanging).
serve_bad() { expect 2 "$1" -- serve --port 0 -m "$tmp/missing.gguf" "${@:2}"; }
serve_bad "--rt-switcher 'maybe' is not on or off" --rt-switcher maybe
serve_bad "--rt-levels: rt levels: item 1 '2:topk:0:0'" --rt-levels 1:entropy:0:0,2:topk:0:0
serve_bad "--rt-interval 0 is outside [0.01, 3600] seconds" --rt-interval 0
serve_bad "--rt-window 1 is outside [2, 100000] intervals" --rt-window 1
serve_bad "--rt-window 100001 is outside" --rt-window 100001
serve_bad "Could not convert: --rt-window = abc" --rt-window abc
serve_bad "--rt-ttft-floor -1 is outside [0, 86400] seconds" --rt-ttft-floor -1
serve_bad "--rt-ttft-slo -0.5 is outside" --rt-ttft-slo -0.5
serve_bad "--rt-tpot-floor inf is outside" --rt-tpot-floor inf
serve_bad "--rt-tpot-slo 0.1 is below --rt-tpot-floor 0.5" --rt-tpot-floor 0.5 --rt-tpot-slo 0.1
serve_bad "--rt-ttft-slo 1 is below --rt-ttft-floor 2" --rt-ttft-floor 2 --rt-ttft-slo 1
serve_bad "--rt-breach 0 is outside [1, 1000000] intervals" --rt-breach 0
serve_bad "--rt-calm -3 is outside [1, 1000000] intervals" --rt-calm -3
serve_bad "--rt-dwell -1 is outside [0, 86400] seconds" --rt-dwell -1
serve_bad "--rt-kv-pressure 1 is outside [0, 1)" --rt-kv-pressure 1
# Tracing: a bad endpoint or value names its flag; a tracing flag without
# --otlp-endpoint would change nothing and is refused; an unreadable or
# malformed headers file is an error that never echoes a value.
serve_bad "--otlp-endpoint 'ftp://collector' is not an http:// or https:// URL" --otlp-endpoint ftp://collector
serve_bad "--otlp-endpoint 'http://:4318' has no host" --otlp-endpoint http://:4318
serve_bad "--otlp-endpoint 'http://collector:99999' has a port outside [1, 65535]" --otlp-endpoint http://collector:99999
serve_bad "--otlp-endpoint 'http://collector:43x8' has a port that is not a number" --otlp-endpoint http://collector:43x8
serve_bad "--otlp-endpoint 'http://collector/v1?x=1' has a query or fragment" --otlp-endpoint "http://collector/v1?x=1"
serve_bad "has user information" --otlp-endpoint http://user:pw@collector:4318
serve_bad "--trace-sample 1.5 is outside [0, 1]" --otlp-endpoint http://127.0.0.1:4318 --trace-sample 1.5
serve_bad "--trace-sample -0.1 is outside [0, 1]" --otlp-endpoint http://127.0.0.1:4318 --trace-sample -0.1
serve_bad "--otlp-timeout-ms 50 is outside [100, 600000]" --otlp-endpoint http://127.0.0.1:4318 --otlp-timeout-ms 50
serve_bad "--otlp-interval-ms 0 is outside [1, 60000]" --otlp-endpoint http://127.0.0.1:4318 --otlp-interval-ms 0
serve_bad "--otlp-queue-spans 0 is outside [1, 1048576]" --otlp-endpoint http://127.0.0.1:4318 --otlp-queue-spans 0
serve_bad "--otlp-batch-spans 600 is outside [1, 8192] or above --otlp-queue-spans 500" --otlp-endpoint http://127.0.0.1:4318 --otlp-queue-spans 500 --otlp-batch-spans 600
serve_bad "--otlp-service-name must have 1 to 128 bytes" --otlp-endpoint http://127.0.0.1:4318 --otlp-service-name ""
serve_bad "--trace-sample needs --otlp-endpoint" --trace-sample 0.5
serve_bad "--otlp-headers-file needs --otlp-endpoint" --otlp-headers-file "$tmp/h.txt"
expect 1 "--otlp-headers-file '$tmp/missing.txt'" -- serve --port 0 -m "$tmp/missing.gguf" \
  --otlp-endpoint http://127.0.0.1:4318 --otlp-headers-file "$tmp/missing.txt"
printf '# the collector key\nx-api-key: s3cr3t-value\nnot a header line\n' > "$tmp/headers.txt"
expect 1 "--otlp-headers-file '$tmp/headers.txt' line 3: is not 'Name: value'" -- serve --port 0 \
  -m "$tmp/missing.gguf" --otlp-endpoint http://127.0.0.1:4318 --otlp-headers-file "$tmp/headers.txt"
if "$STRATA" serve --port 0 -m "$tmp/missing.gguf" --otlp-endpoint http://127.0.0.1:4318 \
    --otlp-headers-file "$tmp/headers.txt" 2>&1 | grep -q "s3cr3t"; then
  echo "FAIL: a header value from --otlp-headers-file was printed"; fail=1
fi
printf 'Content-Type: text/plain\n' > "$tmp/reserved.txt"
expect 1 "line 1: sets a field the exporter sets" -- serve --port 0 -m "$tmp/missing.gguf" \
  --otlp-endpoint http://127.0.0.1:4318 --otlp-headers-file "$tmp/reserved.txt"

# The --backend-* flags' bad values, refused before anything starts (port 1
# on loopback: nothing is ever sent there).
backend_bad() {
  expect 2 "$1" -- serve --port 0 --backend openai:http://127.0.0.1:1 --backend-name b "${@:2}"
}
backend_bad "--backend 'grpc:http://x' must be KIND:URL" --backend grpc:http://x
backend_bad "--backend-routing 'random' is not affinity" --backend-routing random
backend_bad "--backend-retries 10 is outside [0, 9]" --backend-retries 10
backend_bad "--backend-idle-timeout 0 is outside" --backend-idle-timeout 0
backend_bad "--backend-affinity-bytes 5 is outside [16, 1048576]" --backend-affinity-bytes 5
backend_bad "--backend-max-answer-bytes 5 is outside [65536, 1073741824]" --backend-max-answer-bytes 5
backend_bad "--backend-io-threads 0 is outside [1, 64]" --backend-io-threads 0
backend_bad "--backend-load-bound 0.5 is outside [1, 100]" --backend-load-bound 0.5
backend_bad "--backend-affinity-floor 0 is outside [1, 1048576]" --backend-affinity-floor 0

# Request snapshots: the flags' bad values and the key file, refused before
# anything starts; `strata replay`'s arguments and a snapshot that is not there.
openssl rand -hex 32 > "$tmp/snap.key" 2>/dev/null || printf '%064d\n' 7 > "$tmp/snap.key"
printf 'too short' > "$tmp/short.key"
serve_bad "--snapshots needs --snapshot-key-file" --snapshots "$tmp/snaps"
serve_bad "--snapshot-key-file needs --snapshots DIR" --snapshot-key-file "$tmp/snap.key"
serve_bad "snapshot key file $tmp/short.key holds 9 bytes" --snapshots "$tmp/snaps" --snapshot-key-file "$tmp/short.key"
serve_bad "--snapshot-retention '10y' is not a duration" --snapshots "$tmp/snaps" --snapshot-key-file "$tmp/snap.key" --snapshot-retention 10y
serve_bad "--snapshot-retention '3651d' is not a duration" --snapshots "$tmp/snaps" --snapshot-key-file "$tmp/snap.key" --snapshot-retention 3651d
serve_bad "--snapshot-max-bytes 1000 is outside [2^20, 2^50]" --snapshots "$tmp/snaps" --snapshot-key-file "$tmp/snap.key" --snapshot-max-bytes 1000
serve_bad "--snapshot-queue 0 is outside [1, 65536]" --snapshots "$tmp/snaps" --snapshot-key-file "$tmp/snap.key" --snapshot-queue 0
serve_bad "--snapshot-tenants: 'a b' is not a tenant name" --snapshots "$tmp/snaps" --snapshot-key-file "$tmp/snap.key" --snapshot-tenants "x,a b"
expect 0 "identical (exit 0), different (1)" -- replay --help
expect 2 "request id 'a/b' is not" -- replay a/b --snapshots "$tmp/snaps" --snapshot-key-file "$tmp/snap.key"
expect 2 "--snapshots DIR is required" -- replay r1 --snapshot-key-file "$tmp/snap.key"
expect 2 "--snapshot-key-file FILE is required" -- replay r1 --snapshots "$tmp/snaps"
expect 2 "holds 9 bytes" -- replay r1 --snapshots "$tmp/snaps" --snapshot-key-file "$tmp/short.key"
expect 2 "no snapshot of request 'r1' for tenant 'acme'" -- replay r1 --snapshots "$tmp" --snapshot-key-file "$tmp/snap.key" --tenant acme
expect 2 "-t 0 is outside" -- replay r1 --snapshots "$tmp" --snapshot-key-file "$tmp/snap.key" -t 0

shared=../shared/models
if [ -f "$shared/stories260K.gguf" ]; then
  expect 0 "Once upon a time, there was a little girl named Lily" -- generate -m "$shared/stories260K.gguf" --temp 0 -n 12
  expect 1 "context length exceeded" -- generate -m "$shared/stories260K.gguf" -c 8 -p "Once upon a time there was a little girl named Lily who loved to play" -n 4
  expect 1 "version 1 is not supported" -- generate -m "$shared/legacy/tinyllamas-stories-260k-f32.gguf" -n 1
  expect 1 "architecture 'bert' is not supported" -- generate -m "$shared/vocab/ggml-vocab-bert-bge.gguf" -n 1
  expect 1 "tensor 'token_embd.weight' is missing" -- generate -m "$shared/vocab/ggml-vocab-llama-spm.gguf" -n 1
  expect 0 "llama.block_count" -- inspect "$shared/stories260K.gguf"
else
  echo "skip: ../shared/models/stories260K.gguf is not present; real-model CLI checks skipped"
fi

# Synthetic models and the benchmark.
expect 0 "wrote" -- mkmodel --dims n_embd=64,n_layers=1,n_heads=4,n_kv_heads=2,n_ff=128 --type q8_0 -o "$tmp/m.gguf" -t 2
expect 0 "" -- generate -m "$tmp/m.gguf" -n 4 --temp 0
expect 0 "tg4" -- bench -m "$tmp/m.gguf" -p 16 -n 4 -r 1 --no-bandwidth --json "$tmp/bench.json"
if ! grep -q '"median"' "$tmp/bench.json"; then echo "FAIL: bench JSON lacks results"; fail=1; fi
expect 2 "unknown --shape 'nope'" -- mkmodel --shape nope -o "$tmp/x.gguf"
expect 2 "--type 'q9' is not one strata can write" -- mkmodel --shape demo --type q9 -o "$tmp/x.gguf"
expect 2 "exactly one of --shape and --dims" -- mkmodel -o "$tmp/x.gguf"
expect 2 "is not key=value" -- mkmodel --dims n_embd -o "$tmp/x.gguf"
expect 2 "--output is required" -- mkmodel --shape demo
expect 2 "-r 0 is outside" -- bench -m "$tmp/m.gguf" -r 0
# KV cache types: Q8_0 needs heads of whole blocks of 32 (m.gguf's are 16 wide).
expect 2 "KV type 'q4' is not one of f32, f16, q8_0" -- bench -m "$tmp/m.gguf" --kv-type q4
expect 2 "KV type 'x' is not one of" -- generate -m "$tmp/m.gguf" --kv-type x
expect 2 "KV type 'bf16' is not one of" -- serve -m "$tmp/m.gguf" --kv-type bf16
expect 1 "multiple of 32; this model's is 16" -- bench -m "$tmp/m.gguf" --kv-type q8_0 -p 0 -n 2 -r 1 --no-bandwidth
expect 0 "wrote" -- mkmodel --dims n_embd=128,n_layers=1,n_heads=4,n_kv_heads=2,n_ff=128 --type q8_0 -o "$tmp/m32.gguf" -t 2
expect 0 "tg4 @ d40" -- bench -m "$tmp/m32.gguf" --kv-type q8_0 -d 40 -p 8 -n 4 -r 1 --no-bandwidth --json "$tmp/bench-kv.json"
if ! grep -q '"kv_type": "Q8_0"' "$tmp/bench-kv.json"; then echo "FAIL: bench JSON lacks kv_type"; fail=1; fi
if ! grep -q '"attention_share"' "$tmp/bench-kv.json"; then echo "FAIL: bench JSON lacks attention_share"; fail=1; fi
expect 0 "" -- generate -m "$tmp/m32.gguf" --kv-type f32 -n 4 --temp 0
expect 1 "cannot open" -- bench -m "$tmp/missing.gguf"

# strata eval l3 on a tiny made-up copy of the prompt sets (the QQP file as a
# real tar.gz, as in ../shared); missing or damaged files are named.
d="$tmp/prompts"
mkdir -p "$d" "$tmp/qqp/examples/benchmark"
printf '1\tWhat is 2+3?\tWhat is 2 + 3?\t1\r\n2\tWhat is 2+3?\tWhat is 2+4?\t0\r\n' \
  > "$d/paws_wiki_labeled_final_dev.tsv"
cp "$d/paws_wiki_labeled_final_dev.tsv" "$d/paws_wiki_labeled_final_test.tsv"
printf '[{"text_a":"How do I learn C++?","text_b":"how do i learn c++","label":1},%s\n' \
  '{"text_a":"How do I learn C++?","text_b":"How do I learn Java?","label":0}]' \
  > "$tmp/qqp/examples/benchmark/similiar_qqp_full.json"
tar czf "$d/gptcache_similiar_qqp_full.json.tar.gz" -C "$tmp/qqp" examples
printf '[{"origin":"Explain what a hash map is.","similar":"Explain what a hashmap is"}]' \
  > "$d/gptcache_mock_data.json"
printf '{"cluster":"c","prompt":"Write a haiku about rain"}\n{"cluster":"c","prompt":"Write a limerick"}\n' \
  > "$d/arena_hard_v0.1_question.jsonl"
cp "$d/arena_hard_v0.1_question.jsonl" "$d/arena_hard_v2.0_question.jsonl"
expect 0 "Cache lookups through NearDupIndex" -- eval l3 --data-dir "$d" --svg "$tmp/l3.svg" --json "$tmp/l3.json"
if ! grep -q '"default_threshold"' "$tmp/l3.json" || ! grep -q '</svg>' "$tmp/l3.svg"; then
  echo "FAIL: eval l3 JSON or SVG incomplete"; fail=1
fi
head -c 100 "$d/gptcache_similiar_qqp_full.json.tar.gz" > "$tmp/cut.tar.gz"
expect 1 "not valid gzip data" -- eval l3 --data-dir "$d" --qqp "$tmp/cut.tar.gz" --svg ""
expect 1 "paws_wiki_labeled_final_dev.tsv is not present" -- eval l3 --data-dir "$tmp/none"
expect 2 "--threshold 2 is outside" -- eval l3 --threshold 2
expect 0 "strata-hash qqp d64 b2^13" -- eval semantic --data-dir "$d" --encoder builtin

# The built-in encoder is what `strata train-encoder` writes by default from
# the QQP training split, byte for byte (training is deterministic).
qqp=../shared/data/prompts/gptcache_similiar_qqp_full.json.tar.gz
if [ -f "$qqp" ]; then
  expect 0 "wrote" -- train-encoder -o "$tmp/enc.gguf"
  if ! cmp -s "$tmp/enc.gguf" src/model/data/strata-hash.gguf; then
    echo "FAIL: train-encoder no longer reproduces src/model/data/strata-hash.gguf"; fail=1
  fi
else
  echo "skip: $qqp is not present; the built-in encoder is not retrained"
fi
expect 2 "--buckets-log2 30 is outside" -- train-encoder -o "$tmp/x.gguf" --buckets-log2 30

# strata cache export: the admin key file is required; an unreachable
# server is a clear failure.
expect 2 "--admin-key-file" -- cache export -o "$tmp/snap.bin"
printf 'admin-key-0123456789\n' >"$tmp/admin.key"
expect 1 "127.0.0.1:9" -- cache export --url http://127.0.0.1:9 --admin-key-file "$tmp/admin.key" -o "$tmp/snap.bin"
printf 'not a snapshot' >"$tmp/bad.snap"
expect 1 "not a strata cache snapshot" -- serve -m "$tmp/m.gguf" --port 0 --warm-from "$tmp/bad.snap"
expect 1 "--warm-from" -- serve -m "$tmp/m.gguf" --port 0 --warm-from "$tmp/missing.snap"

# strata config: the defaults file is complete and checks clean; each kind
# of problem is named with its line, and the check ends in exit 1.
expect 0 "strata serve configuration" -- config defaults
"$STRATA" config defaults >"$tmp/defaults.toml"
expect 0 "ok (" -- config check "$tmp/defaults.toml"
printf '[l1]\nttl = 0\ntll = 3\n[l3]\nmode = "always"\n[engine]\nparallel = "4"\n' >"$tmp/bad.toml"
for needle in "bad.toml:2: l1.ttl: 0 is outside [0.001, 2592000] s" \
  "bad.toml:3: l1.tll: unknown key (not a knob of strata serve); did you mean 'l1.ttl'?" \
  "bad.toml:5: l3.mode: 'always' is not one of off, opt-in, on" \
  "bad.toml:7: engine.parallel: expected integer, got a string" "4 problems"; do
  expect 1 "$needle" -- config check "$tmp/bad.toml"
done
printf '[[backend]]\nkind = "openai"\nurls = ["http://127.0.0.1:9"]\napi_key = "sk-live-0123456789abcdefghij"\n' \
  >"$tmp/secret.toml"
expect 1 "would hold a secret" -- config check "$tmp/secret.toml"
if "$STRATA" config check "$tmp/secret.toml" 2>&1 | grep -q "0123456789abcdefghij"; then
  echo "FAIL: config check repeated a secret"; fail=1
fi
printf '[rt]\nswitcher = "on"\nttft_floor = 2\nttft_slo = 1\n' >"$tmp/combo.toml"
expect 1 "rt.ttft_slo 1 is below rt.ttft_floor 2" -- config check "$tmp/combo.toml"
printf '[auth]\napi_keys_file = "%s"\n' "$tmp/absent-keys" >"$tmp/files.toml"
expect 1 "absent-keys" -- config check "$tmp/files.toml"
printf '[l1\n' >"$tmp/syntax.toml"
expect 1 "syntax.toml:1:" -- config check "$tmp/syntax.toml"
expect 1 "cannot" -- config check "$tmp/missing.toml"
expect 2 "FILE is required" -- config check
expect 2 "config file '$tmp/bad.toml' has 4 problems" -- serve --config "$tmp/bad.toml"

# strata tune: the repository's scenarios list; a simulated sensitivity run
# and a Pareto search over two small scenarios write every output, the
# chosen point is a configuration `config check` accepts, and a resumed run
# replays its journal instead of measuring again. Bad flags and scenario
# files are named.
expect 0 "paraphrase-heavy" -- tune scenarios
mkdir -p "$tmp/scen"
printf 'name = "chat"\n[arrival]\nrate = 2\nduration = 30\n[prompts]\ntokens = 60\nsystem_tokens = 300\nrepeat = 0.3\n[output]\ntokens = 40\n[metrics]\nttft_p99_slo = 30\n' >"$tmp/scen/chat.toml"
printf 'name = "batch"\n[arrival]\nprocess = "closed"\nconcurrency = 4\nmax_requests = 40\n[output]\ntokens = 60\ntemperature = 1\n[metrics]\nttft_p99_slo = 30\n' >"$tmp/scen/batch.toml"
expect 0 "frozen" -- tune sensitivity --simulate --budget-s 60 --scenarios-dir "$tmp/scen" --out "$tmp/sens"
for f in sensitivity.csv sensitivity.svg frozen.txt journal.jsonl; do
  [ -s "$tmp/sens/$f" ] || [ "$f" = frozen.txt ] || { echo "FAIL: tune sensitivity wrote no $f"; fail=1; }
done
grep -q '^chat,engine.parallel,' "$tmp/sens/sensitivity.csv" || { echo "FAIL: no chat x engine.parallel row"; fail=1; }
expect 0 "0 trials simulated" -- tune sensitivity --simulate --budget-s 60 --scenarios-dir "$tmp/scen" --resume "$tmp/sens"
expect 0 "chosen" -- tune pareto --simulate --budget-s 60 --population 8 --generations 3 --scenarios-dir "$tmp/scen" --out "$tmp/par" --frozen-from "$tmp/sens"
for f in front.csv front.html best.toml journal.jsonl; do
  [ -s "$tmp/par/$f" ] || { echo "FAIL: tune pareto wrote no $f"; fail=1; }
done
expect 0 "ok (" -- config check "$tmp/par/best.toml"
expect 2 "goes with --simulate" -- tune pareto --check 1 --budget-s 60 --scenarios-dir "$tmp/scen" --out "$tmp/par2"
expect 2 "--trial-s" -- tune pareto --trial-s -1 --budget-s 60 --scenarios-dir "$tmp/scen" --out "$tmp/par2"
expect 2 "another run" -- tune pareto --simulate --budget-s 60 --scenarios-dir "$tmp/scen" --resume "$tmp/sens"
expect 2 "no journal" -- tune pareto --simulate --budget-s 60 --scenarios-dir "$tmp/scen" --resume "$tmp/nothing"
expect 2 "--budget-s" -- tune pareto --simulate --budget-s 0 --scenarios-dir "$tmp/scen" --out "$tmp/par3"
expect 2 "no scenario 'nope'" -- tune pareto --simulate --scenario nope --scenarios-dir "$tmp/scen" --out "$tmp/par4"
printf 'name = "x"\n[arrival]\nprocess = "trace"\nrat = 2\n' >"$tmp/scen/bad.toml"
expect 2 "bad.toml:4: arrival.rat" -- tune sensitivity --simulate --scenarios-dir "$tmp/scen" --out "$tmp/sens2"
rm "$tmp/scen/bad.toml"
printf '{"step_s": -1}' >"$tmp/cost.json"
expect 2 "--cost: cost model: step_s" -- tune sensitivity --simulate --cost "$tmp/cost.json" --scenarios-dir "$tmp/scen" --out "$tmp/sens3"
expect 1 "cannot open" -- tune calibrate -m "$tmp/missing.gguf" -o "$tmp/c.json"

# Real trials: each configuration served by its own `strata serve` of a
# tiny model, the scenarios (greedy repeats and rewordings; sampled
# two-turn sessions) replayed over HTTP. The journal, every trial's
# configuration, log and per-request records are written; a resumed run
# replays instead of serving; --check runs the simulator's picks for real
# and reports its error; a model that cannot be served stops the run.
mkdir -p "$tmp/live"
printf 'name = "faq"\n[arrival]\nrate = 6\nduration = 4\n[prompts]\ntokens = 20\nsystem_tokens = 30\nrepeat = 0.4\nreword = 0.2\n[output]\ntokens = 8\n[metrics]\nttft_p99_slo = 30\n' >"$tmp/live/faq.toml"
printf 'name = "chat"\n[arrival]\nrate = 4\nduration = 4\n[prompts]\ntokens = 20\nturns = 2\n[output]\ntokens = 8\ntemperature = 0.7\n[metrics]\nttft_p99_slo = 30\n' >"$tmp/live/chat.toml"
expect 0 "trials run on a server" -- tune pareto --budget-s 120 --population 4 --generations 0 --scenarios-dir "$tmp/live" -m "$tmp/m.gguf" --out "$tmp/real"
grep -q '"mode":"real"' "$tmp/real/journal.jsonl" || { echo "FAIL: the real run's journal says no real mode"; fail=1; }
for f in trials/1.toml trials/1.log trials/1.jsonl trials/2.jsonl front.html; do
  [ -s "$tmp/real/$f" ] || { echo "FAIL: tune pareto (real) wrote no $f"; fail=1; }
done
answered=$(cat "$tmp/real/trials/"*.jsonl | grep -c '"ok":true')
[ "$answered" -ge 20 ] || { echo "FAIL: real trials answered only $answered requests"; fail=1; }
grep -q '"cache":"l1"' "$tmp/real/trials/"*.jsonl || { echo "FAIL: no repeat was an L1 hit in a real trial"; fail=1; }
grep -q '"quality":' "$tmp/real/journal.jsonl" || { echo "FAIL: no quality in the real journal"; fail=1; }
expect 0 "0 trials run on a server" -- tune pareto --budget-s 120 --population 4 --generations 0 --scenarios-dir "$tmp/live" -m "$tmp/m.gguf" --resume "$tmp/real"
expect 0 "median absolute error" -- tune pareto --simulate --check 1 --budget-s 60 --population 4 --generations 1 --scenarios-dir "$tmp/live" -m "$tmp/m.gguf" --out "$tmp/check"
grep -q '^base,faq,' "$tmp/check/check.csv" || { echo "FAIL: check.csv has no base,faq row"; fail=1; }
expect 1 "did not start" -- tune sensitivity --budget-s 60 --scenarios-dir "$tmp/live" -m "$tmp/text.gguf" --out "$tmp/nomodel"
printf '[[backend]]\nkind = "openai"\nurls = ["http://127.0.0.1:9"]\n' >"$tmp/upstream.toml"
expect 2 "[[backend]] upstreams are not carried" -- tune pareto --config "$tmp/upstream.toml" --budget-s 60 --scenarios-dir "$tmp/live" -m "$tmp/m.gguf" --out "$tmp/upstream"

# strata plan: a model split over two small nodes of a topology file, one
# that fits nowhere, and bad topologies.
"$STRATA" mkmodel --dims n_embd=256,n_layers=8,n_heads=4,n_ff=512 -o "$tmp/plan.gguf" \
  --log-level error >/dev/null 2>&1
printf '{"nodes": [{"id": 0, "memory_gib": 0.02, "cpus": "0-3"}, {"id": 1, "memory_gib": 0.02, "cpus": "4-7"}], "distances": [[10, 21], [21, 10]]}\n' >"$tmp/topo.json"
expect 0 "2 run(s); 1024 B cross nodes per token" -- plan -m "$tmp/plan.gguf" --topology "$tmp/topo.json" --ctx 64
expect 0 '"cross_node_bytes_per_token": 1024' -- plan -m "$tmp/plan.gguf" --topology "$tmp/topo.json" --ctx 64 --json
expect 0 "1 run(s); 0 B cross nodes per token" -- plan -m "$tmp/plan.gguf" --ctx 64
expect 1 "needs" -- plan -m "$tmp/plan.gguf" --topology "$tmp/topo.json" --ctx 100000
printf '{"nodes": [{"id": 0}]}\n' >"$tmp/topo_bad.json"
expect 1 "needs \"memory_gib\"" -- plan -m "$tmp/plan.gguf" --topology "$tmp/topo_bad.json"
printf '{"nodes": [{"memory_gib": 1}, {"memory_gib": 1}], "distances": [[10, 21], [30, 10]]}\n' >"$tmp/topo_asym.json"
expect 1 "not symmetric" -- plan -m "$tmp/plan.gguf" --topology "$tmp/topo_asym.json"
expect 1 "cannot" -- plan -m "$tmp/missing.gguf"
expect 2 "--model is required" -- plan
expect 1 "--headroom must be within" -- plan -m "$tmp/plan.gguf" --headroom 0.5

# No model anywhere: the demo model, with its notice.
(cd "$tmp" && STRATA_MODEL= "$STRATA" generate -n 8 --temp 0 >out.txt 2>err.txt)
rc=$?
if [ $rc -ne 0 ] || ! grep -q "gibberish" "$tmp/err.txt"; then
  echo "FAIL: demo model run exited $rc"; cat "$tmp/err.txt"; fail=1
else
  echo "ok: demo model"
fi
exit $fail
