# shellcheck shell=bash disable=SC2154,SC2034  # globals of the sourcing script
# Sourced by bench/shared_prompt.sh and bench/shared_prompt_warm.sh: the two
# servers as both benchmarks start them, so their flags cannot drift apart.
# Reads llama_server, strata, model, threads, users, ctx and kv (and KV_TYPE,
# strata's --kv-type, from the environment when set); each function
# starts one server in the background on port $1, logging to $2, and sets pid.

start_llama_server() {
  "$llama_server" -m "$model" -t "$threads" -np "$users" -c "$kv" --cache-reuse 256 \
    --port "$1" >"$2" 2>&1 &
  pid=$!
}

# No response cache or coalescing: every request is generated, as llama-server does.
start_strata_server() {
  "$strata" serve -m "$model" -t "$threads" --parallel "$users" --ctx "$ctx" --kv-tokens "$kv" \
    --port "$1" --l1-bytes 0 --no-coalesce --log-level warn ${KV_TYPE:+--kv-type "$KV_TYPE"} \
    >"$2" 2>&1 &
  pid=$!
}
