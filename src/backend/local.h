// backend/local.h — the embedded engine as a backend: strata's own CPU
// scheduler over a GGUF model.
//
// Promise: Prepare renders the model's chat template (message content never
// becomes a control token; a completion prompt's control-token text does
// only with prompt_special_tokens), tokenizes, checks the context
// (OutOfRange with kContextLengthExceeded) and fixes max_tokens (the
// request's, or what is left of the context, at most max_tokens_cap) and the
// stop strings (the request's, then the template's turn ends). Start submits
// one scheduler request per choice, each sampling with its own seed (the
// request's seed + i; an unseeded request draws a fresh base from the seed
// stream when one is set), detokenizing to complete UTF-8, matching stop
// strings even split across tokens (they never appear in the text), and
// reporting logprobs when asked; a failed submit cancels what was submitted.
// A JSON Schema (response_format json_schema) or a GBNF grammar is compiled
// in Prepare (InvalidField naming the field, with the compiler's message,
// when it does not compile) and cached by its text (the 16 most recent);
// each choice then masks its logits to what the grammar allows, allows the
// end-of-generation tokens only where the text is a whole sentence, ends
// when nothing can extend it, and fails where nothing is allowed.
// With a Governor, each choice takes its terms when the scheduler admits it
// (sampling tier, max_tokens cap) and reports its TTFT and time per token.
// Embed pools the final hidden states of each input (mean, unit length).
// The scheduler's live state is exported as metrics (queue depth, running
// sequences, KV blocks, preemptions, steps).
//
// Threading: thread-safe. Each choice's sink runs on the scheduler thread.
//
// Usage:
//   STRATA_ASSIGN_OR_RETURN(auto local, LocalBackend::Create(model, *sched, {.name = "m"},
//                                                            metrics, clock, log));
//   GatewayOptions go; ... Gateway::Create({local.get()}, metrics, go, clock, log);
#pragma once

#include <atomic>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/scheduler.h"
#include "grammar/grammar_mask.h"
#include "grammar/token_mask.h"
#include "model/transformer.h"
#include "obs/metrics.h"
#include "text/chat_template.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata::backend {

struct LocalOptions {
  std::string name;                    // the id clients use ("model" field)
  int32_t max_tokens_cap = 4096;       // [1, n_ctx] tokens generated per choice at most
  int32_t max_embedding_inputs = 256;  // [1, 65536] inputs per embeddings request
  // A completion prompt's control-token text ("<s>", "<|im_start|>") becomes
  // those tokens; off, it is plain text like any other.
  bool prompt_special_tokens = false;
  bool prefix_cache = true;                     // the shared-prefix KV cache (L2) for every request
  std::optional<text::ChatFormat> chat_format;  // override the template detected in the GGUF
  // Requests without a seed: nullopt = seed 0 (reproducible, for tests); a
  // value = each such request draws its base seed from a stream started here.
  std::optional<uint64_t> unseeded_seed_base;
  // Register the scheduler's gauges and counters (ExportSchedulerMetrics)
  // at Create; off where an owner of several schedulers registers their
  // sum once (backend/residency.h).
  bool export_metrics = true;
};

// The scheduler's live state as metrics (strata_queue_depth,
// strata_running_sequences, strata_kv_blocks_used/free,
// strata_preemptions_total, strata_engine_steps_total), each read from
// `read` at render time; `read` must stay callable for every render.
void ExportSchedulerMetrics(obs::MetricsRegistry& metrics,
                            std::function<engine::SchedulerStats()> read);

class LocalBackend final : public Backend {
 public:
  // `model`, `scheduler`, `metrics`, `clock` and `log` are borrowed and must
  // outlive the backend (and every render of `metrics`).
  static util::StatusOr<std::unique_ptr<LocalBackend>> Create(
      const model::Model& model, engine::Scheduler& scheduler, const LocalOptions& options,
      obs::MetricsRegistry& metrics, const util::Clock& clock, util::Logger& log);

  const std::string& name() const override { return options_.name; }
  std::string_view kind() const override { return "local"; }
  uint64_t fingerprint() const override;
  int32_t n_ctx() const override { return n_ctx_; }
  util::StatusOr<std::shared_ptr<const Prepared>> Prepare(const Request& r) const override;
  util::StatusOr<std::shared_ptr<Run>> Start(const Request& r,
                                             std::shared_ptr<const Prepared> prepared,
                                             std::shared_ptr<Sink> sink,
                                             Governor* governor) override;
  util::StatusOr<EmbeddingResult> Embed(const EmbeddingRequest& r,
                                        std::chrono::steady_clock::time_point deadline) override;

  util::StatusOr<std::vector<int32_t>> EncodeText(std::string_view text, bool add_special,
                                                  bool parse_special) const override;
  util::StatusOr<std::string> DecodeTokens(std::span<const int32_t> ids) const override;
  util::StatusOr<std::string> TokenBytes(int32_t id) const override;
  util::StatusOr<int32_t> PromptTokens(const Request& r) const override;
  util::StatusOr<int64_t> ForgetPrefixes(const PrefixInvalidation& what,
                                         std::chrono::milliseconds timeout) override;
  util::StatusOr<std::vector<CachedPrefix>> CachedPrefixes(
      size_t max, std::chrono::milliseconds timeout) override;
  util::StatusOr<int64_t> WarmPrefixes(const std::vector<CachedPrefix>& prefixes,
                                       std::chrono::milliseconds timeout) override;
  // The prompt's tokens as Prepare computes them (tests, usage reporting).
  util::StatusOr<std::vector<int32_t>> Tokenize(const Request& r) const;
  // New caps for requests prepared from now on (a reload): max_tokens_cap
  // in [1, n_ctx], max_embedding_inputs in [1, 65536]; InvalidArgument,
  // changing nothing, outside them. Thread-safe.
  util::Status SetLimits(int32_t max_tokens_cap, int32_t max_embedding_inputs);
  const text::ChatStyle& chat_style() const { return style_; }

 private:
  LocalBackend(const model::Model& model, engine::Scheduler& scheduler, const LocalOptions& options,
               const util::Clock& clock, util::Logger& log);
  // The prefix-cache namespace of a tenant: cached blocks are shared only
  // among requests of one tenant on one model.
  uint64_t CacheNamespace(const std::string& tenant) const;

  const model::Model& model_;
  engine::Scheduler& scheduler_;
  const LocalOptions options_;
  const util::Clock& clock_;
  util::Logger& log_;
  const int32_t n_ctx_;
  text::ChatStyle style_;
  std::atomic<uint64_t> unseeded_count_{0};    // requests given a seed from unseeded_seed_base
  std::atomic<int32_t> max_tokens_cap_;        // options_'s, until SetLimits
  std::atomic<int32_t> max_embedding_inputs_;  // options_'s, until SetLimits
  // The vocabulary's trie for JSON-constrained choices, built by the first
  // request that needs it (once: json_once_), read-only after.
  mutable std::once_flag json_once_;
  mutable std::unique_ptr<const grammar::JsonTokenMask> json_mask_;
  // The mask of the request's json_schema or grammar (null for neither):
  // compiled once per text (InvalidField naming the field when it does not
  // compile), then kept in a small LRU.
  util::StatusOr<std::shared_ptr<const grammar::GrammarTokenMask>> GrammarFor(
      const Request& r) const;
  // The mask of a grammar strata writes itself (a forced tool call's), kept
  // in the same LRU. Thread-safe.
  util::StatusOr<std::shared_ptr<const grammar::GrammarTokenMask>> GrammarMask(
      const std::string& gbnf) const;
  static constexpr size_t kGrammarCacheEntries = 16;
  mutable std::once_flag vocab_once_;
  mutable std::shared_ptr<const grammar::VocabIndex> vocab_;  // built by the first grammar
  mutable std::mutex grammar_mu_;
  // guarded by grammar_mu_: (kind + text, mask), the most recently used first
  mutable std::list<std::pair<std::string, std::shared_ptr<const grammar::GrammarTokenMask>>>
      grammars_;
  std::vector<int32_t> eog_ids_;  // the vocabulary's end-of-generation tokens
};

}  // namespace strata::backend
