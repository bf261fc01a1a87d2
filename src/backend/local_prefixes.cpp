// The local engine's prefix cache (L2) as the admin API sees it: an
// invalidation's selection forgotten, and a warm-up's shared prefixes read
// out and computed in (backend/local.h). Each runs on the scheduler thread
// through Scheduler::RunOnEngine.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>

#include "backend/local.h"

namespace strata::backend {

util::StatusOr<int64_t> LocalBackend::ForgetPrefixes(const PrefixInvalidation& what,
                                                     std::chrono::milliseconds timeout) {
  std::optional<uint64_t> root;
  if (what.tenant) root = CacheNamespace(*what.tenant);
  // Decides each block from its chain's tokens (engine::ChainVisit).
  auto visit = [&tok = model_.tokenizer(), prompt = what.prompt,
                text_prefix = what.text_prefix](std::span<const int32_t> chain) {
    if (prompt) {
      const size_t n = prompt->size();
      const size_t shared = std::min(n, chain.size());
      if (n == 0 || !std::equal(chain.begin(), chain.begin() + static_cast<ptrdiff_t>(shared),
                                prompt->begin())) {
        return engine::ChainVisit::kSkip;
      }
      // The block holding the prompt's last token: it and what follows it go.
      if (chain.size() >= n) return engine::ChainVisit::kForget;
    }
    if (text_prefix) {
      std::string text;
      for (int32_t id : chain) text += tok.Piece(id, /*render_special=*/true);
      if (text.find(*text_prefix) != std::string::npos) return engine::ChainVisit::kForget;
      if (text.size() > text_prefix->size() + PrefixInvalidation::kMaxPrefixLead) {
        return engine::ChainVisit::kSkip;
      }
      return engine::ChainVisit::kDescend;
    }
    return prompt ? engine::ChainVisit::kDescend : engine::ChainVisit::kForget;
  };
  // Owned by the task: it may run after this call gave up waiting.
  auto forgotten = std::make_shared<std::atomic<int64_t>>(0);
  STRATA_RETURN_IF_ERROR(scheduler_.RunOnEngine(
      [root, visit, forgotten](engine::Engine& engine) {
        forgotten->store(engine.ForgetCachedPrefixes(root, visit));
      },
      timeout));
  return forgotten->load();
}

util::StatusOr<std::vector<CachedPrefix>> LocalBackend::CachedPrefixes(
    size_t max, std::chrono::milliseconds timeout) {
  if (!options_.prefix_cache) return std::vector<CachedPrefix>();
  auto out = std::make_shared<std::vector<CachedPrefix>>();  // the task may outlive the wait
  STRATA_RETURN_IF_ERROR(scheduler_.RunOnEngine(
      [out, max](engine::Engine& engine) {
        engine.kv_pool().ForEachSharedChain(max, [&](uint64_t root, std::span<const int32_t> t) {
          out->push_back({root, std::vector<int32_t>(t.begin(), t.end())});
        });
      },
      timeout));
  return *out;
}

util::StatusOr<int64_t> LocalBackend::WarmPrefixes(const std::vector<CachedPrefix>& prefixes,
                                                   std::chrono::milliseconds timeout) {
  if (!options_.prefix_cache || prefixes.empty()) return 0;
  const int32_t n_vocab = model_.tokenizer().n_vocab();
  auto valid = std::make_shared<std::vector<CachedPrefix>>();
  for (const CachedPrefix& p : prefixes) {
    // From a file: only ids of this vocabulary are computed.
    if (std::all_of(p.tokens.begin(), p.tokens.end(),
                    [n_vocab](int32_t t) { return t >= 0 && t < n_vocab; })) {
      valid->push_back(p);
    }
  }
  // The prefill stops at the deadline: a task the caller stopped waiting
  // for would otherwise keep the scheduler thread (and the first requests)
  // waiting for the rest of the list.
  // (Real time, as RunOnEngine's wait: the task owns all it uses.)
  auto published = std::make_shared<std::atomic<int64_t>>(0);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const util::Status st = scheduler_.RunOnEngine(
      [valid, published, deadline](engine::Engine& engine) {
        for (const CachedPrefix& p : *valid) {
          if (std::chrono::steady_clock::now() >= deadline) break;
          auto n = engine.WarmPrefix(p.cache_namespace, p.tokens);
          if (!n.ok()) break;  // the KV pool is full: the rest would not fit either
          published->fetch_add(*n);
        }
      },
      timeout);
  if (!st.ok()) return st;
  return published->load();
}

}  // namespace strata::backend
