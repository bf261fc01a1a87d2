#include "engine/generate.h"

#include <algorithm>

#include <fmt/format.h>

namespace strata::engine {

util::StatusOr<int32_t> GreedyChooser::Choose(size_t, std::span<const float> logits) {
  if (logits.empty()) return util::InvalidArgumentError("greedy: empty logits");
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

util::StatusOr<std::vector<GenerationResult>> GenerateAll(
    Engine& engine, std::span<const GenerationRequest> requests, TokenChooser& chooser,
    const TokenCallback& on_token, const GenerateOptions& options, const util::Clock& clock,
    GenerationStats* stats) {
  if (options.max_batch_tokens < 1) {
    return util::InvalidArgumentError("max_batch_tokens must be at least 1");
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    if (r.prompt.empty()) {
      return util::InvalidArgumentError(fmt::format("request {}: the prompt is empty", i));
    }
    if (r.max_tokens < 0) {
      return util::InvalidArgumentError(fmt::format("request {}: max_tokens is negative", i));
    }
    const int64_t need = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;
    if (static_cast<int64_t>(r.prompt.size()) > engine.n_ctx() ||
        (r.max_tokens > 0 && need - 1 > engine.n_ctx())) {
      return util::OutOfRangeError(fmt::format(
          "context length exceeded: request {} needs {} prompt + {} generated tokens, the context "
          "holds {}",
          i, r.prompt.size(), r.max_tokens, engine.n_ctx()));
    }
  }

  const text::Tokenizer& tok = engine.model().tokenizer();
  const size_t n = requests.size();
  std::vector<GenerationResult> results(n);
  std::vector<SeqId> seqs(n);
  for (size_t i = 0; i < n; ++i) seqs[i] = engine.NewSequence();
  // Frees the sequences however we leave.
  struct Cleanup {
    Engine& e;
    std::vector<SeqId>& s;
    ~Cleanup() {
      for (SeqId id : s) e.FreeSequence(id);
    }
  } cleanup{engine, seqs};

  GenerationStats local;
  GenerationStats& st = stats ? *stats : local;
  st = GenerationStats{};

  std::vector<bool> done(n, false);
  std::vector<int32_t> next(n, -1);  // the token to feed next during decode
  auto accept = [&](size_t i, std::span<const float> logits) -> util::Status {
    STRATA_ASSIGN_OR_RETURN(int32_t t, chooser.Choose(i, logits));
    if (t < 0 || t >= engine.n_vocab()) {
      return util::InternalError(
          fmt::format("token chooser returned id {} outside the vocabulary", t));
    }
    results[i].tokens.push_back(t);
    ++st.generated_tokens;
    const bool keep_going = on_token ? on_token(i, t) : true;
    if (requests[i].stop_at_eog && tok.IsEog(t)) {
      done[i] = true;
      results[i].finish = FinishReason::kEndOfTurn;
    } else if (!keep_going) {
      done[i] = true;
      results[i].finish = FinishReason::kCancelled;
    } else if (static_cast<int32_t>(results[i].tokens.size()) >= requests[i].max_tokens) {
      done[i] = true;
      results[i].finish = FinishReason::kLength;
    }
    next[i] = t;
    return util::OkStatus();
  };

  // Prefill: pack prompt chunks of several requests into each pass.
  std::vector<size_t> fed(n, 0);
  for (size_t i = 0; i < n; ++i) {
    st.prompt_tokens += static_cast<int64_t>(requests[i].prompt.size());
    if (requests[i].max_tokens == 0) done[i] = true;
  }
  size_t cursor = 0;
  while (cursor < n) {
    std::vector<Engine::Work> work;
    std::vector<size_t> owners;
    int32_t budget = options.max_batch_tokens;
    for (size_t i = cursor; i < n && budget > 0; ++i) {
      const auto& p = requests[i].prompt;
      const size_t take = std::min<size_t>(p.size() - fed[i], static_cast<size_t>(budget));
      const bool last = fed[i] + take == p.size();
      work.push_back(
          {seqs[i], std::span<const int32_t>(p).subspan(fed[i], take), last && !done[i]});
      owners.push_back(i);
      budget -= static_cast<int32_t>(take);
    }
    const auto t0 = clock.Now();
    STRATA_ASSIGN_OR_RETURN(std::span<const float> logits, engine.Step(work));
    st.prompt_seconds += util::SecondsBetween(t0, clock.Now());
    ++st.forward_passes;
    size_t li = 0;
    for (size_t k = 0; k < work.size(); ++k) {
      const size_t i = owners[k];
      fed[i] += work[k].tokens.size();
      if (work[k].logits) {
        STRATA_RETURN_IF_ERROR(accept(i, logits.subspan(li * engine.n_vocab(), engine.n_vocab())));
        ++li;
      }
    }
    while (cursor < n && fed[cursor] == requests[cursor].prompt.size()) ++cursor;
  }

  // Decode: every unfinished request advances by one token per pass.
  while (true) {
    std::vector<Engine::Work> work;
    std::vector<size_t> owners;
    for (size_t i = 0; i < n; ++i) {
      if (done[i]) continue;
      work.push_back({seqs[i], std::span<const int32_t>(&next[i], 1), true});
      owners.push_back(i);
    }
    if (work.empty()) break;
    const auto t0 = clock.Now();
    STRATA_ASSIGN_OR_RETURN(std::span<const float> logits, engine.Step(work));
    st.decode_seconds += util::SecondsBetween(t0, clock.Now());
    ++st.forward_passes;
    for (size_t k = 0; k < work.size(); ++k) {
      STRATA_RETURN_IF_ERROR(
          accept(owners[k], logits.subspan(k * engine.n_vocab(), engine.n_vocab())));
    }
  }
  return results;
}

}  // namespace strata::engine
