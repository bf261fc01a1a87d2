#include "server/internal/snapshot_tap.h"

#include <fmt/format.h>

namespace strata::server {
namespace {

const char* ApiName(ApiKind kind) {
  switch (kind) {
    case ApiKind::kOpenAIChat:
      return "openai.chat";
    case ApiKind::kOpenAICompletion:
      return "openai.completions";
    case ApiKind::kAnthropicMessages:
      return "anthropic.messages";
  }
  return "openai.chat";
}

class SnapshotTap final : public gateway::Generation {
 public:
  SnapshotTap(std::unique_ptr<gateway::Generation> inner, const SnapshotRecorder& recorder,
              std::unique_ptr<SnapshotRecord> record)
      : inner_(std::move(inner)),
        recorder_(recorder),
        record_(std::move(record)),
        finished_(record_->choices.size(), false) {
    set_provenance(inner_->provenance());
  }

  util::StatusOr<gateway::Event> Next(std::chrono::steady_clock::time_point deadline) override {
    auto e = inner_->Next(deadline);
    if (e.ok()) {
      Observe(*e);
    } else if (e.status().code() == util::StatusCode::kOutOfRange) {
      Complete();
    }
    return e;
  }
  void NotifyWhenReady(std::function<void()> ready) override {
    inner_->NotifyWhenReady(std::move(ready));
  }
  void Cancel() override {
    failed_ = true;
    inner_->Cancel();
  }
  int32_t prompt_tokens() const override { return inner_->prompt_tokens(); }
  int32_t n_choices() const override { return inner_->n_choices(); }
  gateway::CacheOutcome cache_outcome() const override { return inner_->cache_outcome(); }
  std::optional<double> cache_similarity() const override { return inner_->cache_similarity(); }
  bool defers_stream_head() const override { return inner_->defers_stream_head(); }

 private:
  void Observe(const gateway::Event& e) {
    if (failed_ || e.index < 0 || static_cast<size_t>(e.index) >= record_->choices.size()) {
      failed_ = true;
      return;
    }
    SnapshotChoice& c = record_->choices[static_cast<size_t>(e.index)];
    if (e.kind == gateway::Event::Kind::kDelta) {
      c.text += e.text;
      backend::AppendToolCallDeltas(c.tool_calls, e.tool_calls);
      return;
    }
    if (!e.status.ok() || e.finish == gateway::FinishReason::kCancelled) {
      failed_ = true;
      return;
    }
    finished_[static_cast<size_t>(e.index)] = true;
    c.finish = e.finish;
    c.stop_sequence = e.stop_sequence;
    c.usage = e.usage;
    c.seed = e.seed;
    c.tokens = e.token_ids;
    c.terms = e.terms;
    c.replica = e.replica;
    if (!c.seed && record_->backend.kind == "local") {
      // An answer replayed from the shared tier carries no seed; such an
      // answer was deterministic, and its choice j sampled with seed + j.
      const int32_t n = std::max(record_->request.n, 1);
      c.seed = record_->request.sampling.seed + static_cast<uint64_t>(e.index % n);
    }
  }

  void Complete() {
    if (done_) return;
    done_ = true;
    if (failed_ || std::find(finished_.begin(), finished_.end(), false) != finished_.end()) return;
    const auto& sources = provenance();
    for (size_t i = 0; i < record_->prompts.size() && i < sources.size(); ++i) {
      SnapshotPrompt& p = record_->prompts[i];
      if (p.tokens.empty()) continue;
      auto text = sources[i].backend->DecodeTokens(p.tokens);
      if (text.ok()) p.text = std::move(text).value();
    }
    recorder_.Record(std::move(*record_));
  }

  const std::unique_ptr<gateway::Generation> inner_;
  const SnapshotRecorder& recorder_;
  std::unique_ptr<SnapshotRecord> record_;
  std::vector<bool> finished_;  // per choice: its finish event was read
  bool failed_ = false;         // a choice failed, or the reader cancelled
  bool done_ = false;           // the record was handed over (or refused)
};

}  // namespace

std::unique_ptr<gateway::Generation> TapForSnapshot(std::unique_ptr<gateway::Generation> gen,
                                                    const SnapshotRecorder& recorder, ApiKind kind,
                                                    const char* endpoint,
                                                    const ParsedRequest& parsed,
                                                    int64_t created_ms) {
  const gateway::CompletionRequest& r = parsed.request;
  const std::vector<gateway::Provenance>& sources = gen->provenance();
  if (!recorder.Records(r.tenant) || sources.empty() ||
      sources.size() != 1 + parsed.more_prompts.size() || sources[0].backend == nullptr) {
    return gen;
  }
  auto record = std::make_unique<SnapshotRecord>();
  record->request_id = r.request_id;
  record->tenant = r.tenant;
  record->created_ms = created_ms;
  record->api = ApiName(kind);
  record->endpoint = endpoint;
  record->stream = parsed.stream;
  const backend::Backend& b = *sources[0].backend;
  record->backend.name = b.name();
  record->backend.kind = std::string(b.kind());
  record->backend.fingerprint = b.fingerprint();
  record->backend.n_ctx = b.n_ctx();
  record->cache = std::string(gateway::CacheOutcomeName(gen->cache_outcome()));
  record->similarity = gen->cache_similarity();
  record->request = r;
  for (size_t i = 0; i < sources.size(); ++i) {
    SnapshotPrompt p;
    if (i > 0) {
      p.prompt = parsed.more_prompts[i - 1].text;
      p.prompt_ids = parsed.more_prompts[i - 1].ids;
    }
    if (sources[i].prepared != nullptr) {
      p.tokens = sources[i].prepared->tokens;
      p.max_tokens = sources[i].prepared->max_tokens;
      p.stops = sources[i].prepared->stops;
    }
    record->prompts.push_back(std::move(p));
  }
  record->choices.resize(static_cast<size_t>(gen->n_choices()));
  for (size_t i = 0; i < record->choices.size(); ++i) {
    record->choices[i].index = static_cast<int32_t>(i);
  }
  return std::make_unique<SnapshotTap>(std::move(gen), recorder, std::move(record));
}

}  // namespace strata::server
