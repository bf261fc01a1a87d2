// The canary's split of one served model's traffic, its outcomes and its
// mirrored runs.
#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>

#include <fmt/format.h>

#include "tune/canary.h"
#include "tune/live.h"
#include "util/hash.h"

namespace strata::tune {

using backend::Event;
using backend::Prepared;
using backend::Run;
using backend::Sink;

std::string_view RequestClass(const backend::Request& r) {
  if (!r.tools.empty()) return "tools";
  if (r.response_format != backend::ResponseFormat::kText) return "json";
  return r.completion() ? "completion" : "chat";
}

struct CanaryBackend::Mirrors {
  std::atomic<int32_t> in_flight{0};
};

namespace {

constexpr uint64_t kRouteSeed = 0x63616e617279'0001;   // "canary" 1
constexpr uint64_t kMirrorSeed = 0x63616e617279'0002;  // "canary" 2
constexpr size_t kMaxComparedBytes = 64 << 10;         // of each answer

// A uniform number in [0, 1) from a hash.
double Unit(uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }

// Whether a failed choice failed on the backend's side: a client's bad
// request (or its cancel) says nothing of the backend.
bool BackendFailure(const util::Status& st) {
  return !st.ok() && st.code() != util::StatusCode::kInvalidArgument &&
         st.code() != util::StatusCode::kCancelled;
}

// What Prepare decided: the side, its Prepared, and the baseline's for a
// mirrored run.
struct CanaryPrepared final : Prepared {
  bool candidate = false;
  bool store = true;  // the answer may be stored in the response tiers
  std::string segment;
  std::shared_ptr<const Prepared> inner;
  std::shared_ptr<const Prepared> mirror;  // null: not mirrored
};

// The two answers of a mirrored request, compared once both are in.
class MirrorPair {
 public:
  MirrorPair(CanaryController& controller, std::string segment, double similarity)
      : controller_(controller), segment_(std::move(segment)), similarity_(similarity) {}
  // Each side's choice-0 text once it finished, or nullopt when it failed
  // or was cut short (then nothing is compared).
  void Set(bool candidate, std::optional<std::string> text) {
    std::optional<std::string> a, b;
    {
      std::lock_guard lock(mu_);
      (candidate ? candidate_ : baseline_) = std::move(text);
      if (++done_ < 2) return;
      a = std::move(candidate_);
      b = std::move(baseline_);
    }
    if (!a || !b) return;
    controller_.RecordAgreement(segment_, Agree(*a, *b));
  }

 private:
  bool Agree(const std::string& a, const std::string& b) const {
    return AnswersAgree(a, b, similarity_);
  }

  CanaryController& controller_;
  const std::string segment_;
  const double similarity_;
  std::mutex mu_;
  std::optional<std::string> candidate_;  // guarded by mu_
  std::optional<std::string> baseline_;   // guarded by mu_
  int done_ = 0;                          // guarded by mu_
};

// Watches one run's events on their way (to the client's sink, or nowhere
// for a mirrored baseline run): when every choice finished it records the
// request's outcome, and hands choice 0's text to its mirror pair.
class OutcomeSink final : public Sink {
 public:
  OutcomeSink(std::shared_ptr<Sink> next, CanaryController& controller, std::string segment,
              bool candidate, int32_t choices, std::shared_ptr<MirrorPair> pair,
              std::function<void()> on_done)
      : next_(std::move(next)),
        controller_(controller),
        segment_(std::move(segment)),
        candidate_(candidate),
        unfinished_(std::max(1, choices)),
        pair_(std::move(pair)),
        on_done_(std::move(on_done)) {}

  void Push(Event&& e) override {
    const bool finish = e.kind == Event::Kind::kFinish;
    bool last = false;
    {
      std::lock_guard lock(mu_);
      if (pair_ && e.index == 0) {
        if (!finish) {
          if (text_.size() < kMaxComparedBytes) text_ += e.text;
        } else {
          compared_ok_ = e.status.ok() && e.finish != backend::FinishReason::kCancelled;
        }
      }
      if (finish) {
        error_ = error_ || BackendFailure(e.status);
        const auto& t = e.timing;
        if (t.first_token != std::chrono::steady_clock::time_point{} &&
            t.submitted != std::chrono::steady_clock::time_point{}) {
          const auto ttft =
              std::chrono::duration_cast<std::chrono::nanoseconds>(t.first_token - t.submitted);
          if (!ttft_ || ttft < *ttft_) ttft_ = ttft;
        }
        last = --unfinished_ == 0;
      }
    }
    if (next_) next_->Push(std::move(e));
    if (last) Done();
  }
  void OnFirstToken(std::chrono::nanoseconds ttft) override {
    if (next_) next_->OnFirstToken(ttft);
  }
  void DoNotStore() override {
    if (next_) next_->DoNotStore();
  }

 private:
  void Done() {
    controller_.Record(
        {.segment = segment_, .candidate = candidate_, .error = error_, .ttft = ttft_});
    if (pair_)
      pair_->Set(candidate_,
                 compared_ok_ ? std::optional<std::string>(std::move(text_)) : std::nullopt);
    if (on_done_) on_done_();
  }

  const std::shared_ptr<Sink> next_;  // null: a mirrored run, its events dropped
  CanaryController& controller_;
  const std::string segment_;
  const bool candidate_;
  std::mutex mu_;
  int32_t unfinished_;                            // guarded by mu_
  bool error_ = false;                            // guarded by mu_
  std::optional<std::chrono::nanoseconds> ttft_;  // guarded by mu_
  std::string text_;                              // guarded by mu_: choice 0's, when mirrored
  bool compared_ok_ = false;                      // guarded by mu_
  const std::shared_ptr<MirrorPair> pair_;
  const std::function<void()> on_done_;
};

// The client's run and its mirror: a cancel stops both.
class CanaryRun final : public Run {
 public:
  CanaryRun(std::shared_ptr<Run> inner, std::shared_ptr<Run> mirror)
      : inner_(std::move(inner)), mirror_(std::move(mirror)) {}
  void Cancel() override {
    inner_->Cancel();
    if (mirror_) mirror_->Cancel();
  }

 private:
  const std::shared_ptr<Run> inner_;
  const std::shared_ptr<Run> mirror_;
};

}  // namespace

CanaryBackend::CanaryBackend(backend::Backend& baseline, backend::Backend& candidate,
                             CanaryController& controller)
    : baseline_(baseline),
      candidate_(candidate),
      controller_(controller),
      mirrors_(std::make_shared<Mirrors>()) {}

CanaryBackend::~CanaryBackend() = default;

backend::Backend& CanaryBackend::Primary() const {
  return controller_.phase() == CanaryPhase::kPromoted ? candidate_ : baseline_;
}

int32_t CanaryBackend::n_ctx() const { return Primary().n_ctx(); }

util::StatusOr<std::shared_ptr<const Prepared>> CanaryBackend::Prepare(
    const backend::Request& r) const {
  const CanaryPhase phase = controller_.phase();
  const std::string segment = fmt::format("{}/{}", r.tenant, RequestClass(r));
  const uint64_t key = r.session_id.empty()
                           ? util::Hash64(r.request_id, kRouteSeed)
                           : util::Hash64(r.session_id, util::Hash64(r.tenant, kRouteSeed));
  const bool to_candidate = Unit(key) < controller_.Weight();
  auto p = std::make_shared<CanaryPrepared>();
  p->segment = segment;
  p->store = !to_candidate || phase == CanaryPhase::kPromoted;
  if (to_candidate) {
    auto inner = candidate_.Prepare(r);
    if (inner.ok()) {
      p->candidate = true;
      p->inner = *std::move(inner);
      const CanaryOptions& o = controller_.options();
      const bool greedy = r.sampling.temperature <= 0 && r.n <= 1;
      if (phase == CanaryPhase::kRamping && greedy && o.mirror > 0 &&
          Unit(util::Hash64(r.request_id, kMirrorSeed)) < o.mirror &&
          mirrors_->in_flight.load(std::memory_order_relaxed) < o.max_mirrors) {
        auto mirror = baseline_.Prepare(r);
        if (mirror.ok()) p->mirror = *std::move(mirror);
      }
    } else {
      // The baseline serves it; if it refuses too, the request is at fault.
      auto base = baseline_.Prepare(r);
      if (!base.ok()) return base.status();
      controller_.Record({.segment = segment, .candidate = true, .error = true, .ttft = {}});
      p->inner = *std::move(base);
      p->store = true;
    }
  } else {
    STRATA_ASSIGN_OR_RETURN(p->inner, baseline_.Prepare(r));
  }
  static_cast<Prepared&>(*p) = *p->inner;  // the fields the gateway reads
  return std::shared_ptr<const Prepared>(std::move(p));
}

util::StatusOr<std::shared_ptr<Run>> CanaryBackend::Start(const backend::Request& r,
                                                          std::shared_ptr<const Prepared> prepared,
                                                          std::shared_ptr<Sink> sink,
                                                          backend::Governor* governor) {
  std::shared_ptr<const CanaryPrepared> cp =
      std::dynamic_pointer_cast<const CanaryPrepared>(prepared);
  if (cp == nullptr) {
    STRATA_ASSIGN_OR_RETURN(auto fresh, Prepare(r));
    cp = std::static_pointer_cast<const CanaryPrepared>(fresh);
  }
  std::shared_ptr<MirrorPair> pair;
  if (cp->mirror) {
    pair = std::make_shared<MirrorPair>(controller_, cp->segment,
                                        controller_.options().agree_similarity);
  }
  if (!cp->store) sink->DoNotStore();
  backend::Backend& side = cp->candidate ? candidate_ : baseline_;
  auto run = side.Start(r, cp->inner,
                        std::make_shared<OutcomeSink>(sink, controller_, cp->segment, cp->candidate,
                                                      r.n, pair, nullptr),
                        governor);
  if (!run.ok()) {
    if (!cp->candidate || !BackendFailure(run.status())) return run.status();
    // The candidate could not start it: counted against it, and served by the baseline.
    controller_.Record({.segment = cp->segment, .candidate = true, .error = true, .ttft = {}});
    STRATA_ASSIGN_OR_RETURN(auto base, baseline_.Prepare(r));
    return baseline_.Start(
        r, std::move(base),
        std::make_shared<OutcomeSink>(sink, controller_, cp->segment, false, r.n, nullptr, nullptr),
        governor);
  }
  std::shared_ptr<Run> mirror_run;
  if (pair) {
    mirrors_->in_flight.fetch_add(1, std::memory_order_relaxed);
    auto done = [mirrors = mirrors_] {
      mirrors->in_flight.fetch_sub(1, std::memory_order_relaxed);
    };
    backend::Request shadow = r;
    shadow.trace = nullptr;  // the client's trace shows the run it got
    auto m = baseline_.Start(
        shadow, cp->mirror,
        std::make_shared<OutcomeSink>(nullptr, controller_, cp->segment, false, 1, pair, done),
        nullptr);
    if (m.ok()) {
      mirror_run = *std::move(m);
    } else {
      done();
      pair->Set(false, std::nullopt);
    }
  }
  return std::shared_ptr<Run>(std::make_shared<CanaryRun>(*std::move(run), std::move(mirror_run)));
}

util::StatusOr<backend::EmbeddingResult> CanaryBackend::Embed(
    const backend::EmbeddingRequest& r, std::chrono::steady_clock::time_point deadline) {
  return Primary().Embed(r, deadline);
}

util::StatusOr<int64_t> CanaryBackend::ForgetPrefixes(const backend::PrefixInvalidation& what,
                                                      std::chrono::milliseconds timeout) {
  STRATA_ASSIGN_OR_RETURN(int64_t a, baseline_.ForgetPrefixes(what, timeout));
  STRATA_ASSIGN_OR_RETURN(int64_t b, candidate_.ForgetPrefixes(what, timeout));
  return a + b;
}

util::StatusOr<std::vector<backend::CachedPrefix>> CanaryBackend::CachedPrefixes(
    size_t max, std::chrono::milliseconds timeout) {
  return Primary().CachedPrefixes(max, timeout);
}

util::StatusOr<int64_t> CanaryBackend::WarmPrefixes(
    const std::vector<backend::CachedPrefix>& prefixes, std::chrono::milliseconds timeout) {
  return Primary().WarmPrefixes(prefixes, timeout);
}

util::StatusOr<std::vector<int32_t>> CanaryBackend::EncodeText(std::string_view text,
                                                               bool add_special,
                                                               bool parse_special) const {
  return Primary().EncodeText(text, add_special, parse_special);
}

util::StatusOr<std::string> CanaryBackend::DecodeTokens(std::span<const int32_t> ids) const {
  return Primary().DecodeTokens(ids);
}

util::StatusOr<std::string> CanaryBackend::TokenBytes(int32_t id) const {
  return Primary().TokenBytes(id);
}

util::StatusOr<int32_t> CanaryBackend::PromptTokens(const backend::Request& r) const {
  return Primary().PromptTokens(r);
}

util::StatusOr<backend::Backend::Relayed> CanaryBackend::CountTokensUpstream(
    std::string_view body, std::chrono::steady_clock::time_point deadline) const {
  return Primary().CountTokensUpstream(body, deadline);
}

}  // namespace strata::tune
