// tune/canary.h — a canary rollout: a candidate backend (another model, a
// new upstream, a new build of a model server) takes a growing share of one
// served model's traffic, step by step, and is rolled back the moment its
// requests do measurably worse than the baseline's.
//
// Promise:
//  - CanaryBackend is the served model's Backend while the canary lives. It
//    sends each request to the candidate with the controller's weight: a
//    hash of the request's session (every turn of a conversation on one
//    side), else of its id, against the weight, so the split is exact over
//    many requests and never random per turn. Before promotion, the
//    candidate's answers are served and never stored in the response tiers
//    (the tiers keep the baseline's answers only), and the backend's
//    fingerprint (what cache keys hold) stays the baseline's; after
//    promotion everything is the candidate's.
//  - Quality is measured, not assumed: a share (`mirror`) of the candidate's
//    greedy requests (temperature 0) also runs on the baseline, whose answer
//    is discarded; the two answers agree when their texts are equal or L3's
//    similarity of the two (cache/near_dup.h, guards on) is at least
//    `agree_similarity`. At most `max_mirrors` such runs are in flight.
//  - CanaryController keeps, per segment (tenant and request class: chat,
//    completion, tools, json) and for all requests together, the candidate's
//    outcomes in the current step and the baseline's most recent ones (the
//    mirrored runs count as baseline samples: they keep a reference at 100 %),
//    and judges them on every Tick:
//      errors:  the Wilson lower bound (95 %) of the candidate's error rate
//               above max(max_error_rate, the baseline's rate);
//      ttft:    the candidate's P99 time to first token above
//               ttft_ratio · the baseline's P99 + ttft_slack, or above the
//               SLO while the baseline's is within it;
//      quality: the Wilson upper bound of the agreement rate below
//               min_agreement.
//    A segment is judged once it has min_samples candidate outcomes
//    (min_pairs mirrored pairs for quality). The first failing gate rolls
//    the canary back at once: weight 0, the reason logged as a warning,
//    counted in strata_canary_rollbacks_total{reason}, listed in Events.
//    When a step's time is over and the candidate has min_samples outcomes
//    in it without a failure, the next step begins (its window starts
//    empty); after the last step (100 %) the candidate is promoted. A step
//    with too few outcomes is held until it has them.
//  - The ramp survives a restart: every transition is written atomically to
//    `state_file` (JSON, docs/api.md "Canary rollout"); a controller started
//    with the same candidate `id` resumes the step it was in (its window
//    starts again), stays promoted, or stays rolled back (a canary known to
//    be bad is not ramped again until the file is removed or the candidate
//    changes).
//
// Threading: CanaryController is thread-safe: request threads and backend
// threads call Weight, Record and RecordAgreement (one short lock); one
// thread calls Tick (the controller's own, started by Start, or a test).
// CanaryBackend is thread-safe as every Backend is.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "obs/metrics.h"
#include "util/clock.h"
#include "util/file_system.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::tune {

struct CanaryOptions {
  // What the candidate is (its --canary spec): a state file written for
  // another candidate is not resumed.
  std::string id;
  std::vector<int32_t> steps{5, 25, 50, 100};  // percent, rising, each in [1, 100], the last 100
  std::chrono::milliseconds step_time{std::chrono::minutes(5)};  // [1 s, 7 days]
  int32_t min_samples = 50;        // [1, 10^6] candidate outcomes before a segment is judged
  int32_t min_pairs = 10;          // [1, 10^6] mirrored pairs before quality is judged
  double max_error_rate = 0.0002;  // [0, 1) the SLA's error rate
  double ttft_ratio = 1.5;         // [1, 100]
  std::chrono::milliseconds ttft_slack{100};  // [0, 1 h]
  std::chrono::milliseconds ttft_slo{800};    // [1 ms, 1 h] P99 time to first token
  double min_agreement = 0.9;                 // (0, 1]
  double agree_similarity = 0.8;              // (0, 1]
  double mirror = 0.2;                        // [0, 1] share of greedy candidate requests
  int32_t max_mirrors = 4;                    // [0, 1024] in flight
  int32_t max_segments = 64;            // [1, 4096] more segments than this are judged as "other"
  std::chrono::milliseconds tick{250};  // [10 ms, 1 min] how often Start's thread judges
  std::string state_file;               // "" = the ramp is not persisted
};

// InvalidArgument naming the first option out of range.
util::Status ValidateCanaryOptions(const CanaryOptions& options);

// "5,25,50,100" → {5, 25, 50, 100}; InvalidArgument for anything else
// (ValidateCanaryOptions's rules).
util::StatusOr<std::vector<int32_t>> ParseCanarySteps(std::string_view text);

enum class CanaryPhase { kRamping, kPromoted, kRolledBack };
std::string_view CanaryPhaseName(CanaryPhase phase);  // "ramping", "promoted", "rolled_back"

// One finished request, on one side.
struct CanaryOutcome {
  std::string segment;  // "tenant/class"
  bool candidate = false;
  bool error = false;  // failed on the backend's side (not a client's bad request or cancel)
  std::optional<std::chrono::nanoseconds> ttft;
};

// A step taken, a promotion or a rollback, for the log, the dashboard and tests.
struct CanaryEvent {
  int64_t at_unix_ms = 0;
  int32_t from_percent = 0;
  int32_t to_percent = 0;
  std::string what;    // "step", "promoted", "rolled_back", "resumed"
  std::string reason;  // rolled_back: "errors", "ttft", "quality"; else ""
  std::string detail;  // the measurement, in words
};

class CanaryController {
 public:
  // Reads `state_file` when given (a missing file is a fresh ramp; one that
  // does not parse is logged and ignored). `clock`, `fs`, `metrics` and
  // `log` must outlive the controller; `metrics` may be null.
  static util::StatusOr<std::unique_ptr<CanaryController>> Create(const CanaryOptions& options,
                                                                  const util::Clock& clock,
                                                                  util::FileSystem& fs,
                                                                  obs::MetricsRegistry* metrics,
                                                                  util::Logger& log);
  ~CanaryController();
  CanaryController(const CanaryController&) = delete;
  CanaryController& operator=(const CanaryController&) = delete;

  // A thread that calls Tick every options.tick until the controller is
  // destroyed. Call once.
  void Start();

  // The candidate's share of new requests, in [0, 1].
  double Weight() const;
  CanaryPhase phase() const;
  // The step's percent (0 once rolled back).
  int32_t percent() const;

  void Record(const CanaryOutcome& outcome);
  void RecordAgreement(const std::string& segment, bool agreed);
  // Judges every segment, then steps or promotes when the step's time is up.
  void Tick();

  std::vector<CanaryEvent> Events() const;
  // {"phase", "percent", "step", "steps", "step_started_unix_ms", "events": [...],
  //  "segments": [{"segment", "candidate", "baseline", "candidate_errors",
  //  "baseline_errors", "candidate_ttft_p99_ms", "baseline_ttft_p99_ms",
  //  "pairs", "agreed"}]}: the dashboard's and GET /admin/canary's view.
  std::string StateJson() const;

  const CanaryOptions& options() const { return options_; }

 private:
  struct Impl;
  explicit CanaryController(std::unique_ptr<Impl> impl, const CanaryOptions& options);
  std::unique_ptr<Impl> impl_;
  const CanaryOptions options_;
};

// The class of a request for segmenting: "tools" (it offers tools), "json"
// (a response_format other than text), "completion" or "chat".
std::string_view RequestClass(const backend::Request& r);

// The served backend while a canary lives: `baseline` and `candidate`
// (borrowed; they must outlive it) under the baseline's name. `controller`
// must outlive it too.
class CanaryBackend final : public backend::Backend {
 public:
  CanaryBackend(backend::Backend& baseline, backend::Backend& candidate,
                CanaryController& controller);
  ~CanaryBackend() override;

  const std::string& name() const override { return baseline_.name(); }
  std::string_view kind() const override { return Primary().kind(); }
  uint64_t fingerprint() const override { return Primary().fingerprint(); }
  int32_t n_ctx() const override;
  util::StatusOr<std::shared_ptr<const backend::Prepared>> Prepare(
      const backend::Request& r) const override;
  util::StatusOr<std::shared_ptr<backend::Run>> Start(
      const backend::Request& r, std::shared_ptr<const backend::Prepared> prepared,
      std::shared_ptr<backend::Sink> sink, backend::Governor* governor) override;
  util::StatusOr<backend::EmbeddingResult> Embed(
      const backend::EmbeddingRequest& r, std::chrono::steady_clock::time_point deadline) override;
  util::StatusOr<int64_t> ForgetPrefixes(const backend::PrefixInvalidation& what,
                                         std::chrono::milliseconds timeout) override;
  util::StatusOr<std::vector<backend::CachedPrefix>> CachedPrefixes(
      size_t max, std::chrono::milliseconds timeout) override;
  util::StatusOr<int64_t> WarmPrefixes(const std::vector<backend::CachedPrefix>& prefixes,
                                       std::chrono::milliseconds timeout) override;
  bool defers_stream_head() const override {
    return baseline_.defers_stream_head() || candidate_.defers_stream_head();
  }
  bool may_block() const override { return baseline_.may_block() || candidate_.may_block(); }
  util::StatusOr<std::vector<int32_t>> EncodeText(std::string_view text, bool add_special,
                                                  bool parse_special) const override;
  util::StatusOr<std::string> DecodeTokens(std::span<const int32_t> ids) const override;
  util::StatusOr<std::string> TokenBytes(int32_t id) const override;
  util::StatusOr<int32_t> PromptTokens(const backend::Request& r) const override;
  util::StatusOr<Relayed> CountTokensUpstream(
      std::string_view body, std::chrono::steady_clock::time_point deadline) const override;

 private:
  // The side that answers everything but generations: the candidate once promoted.
  backend::Backend& Primary() const;

  backend::Backend& baseline_;
  backend::Backend& candidate_;
  CanaryController& controller_;
  struct Mirrors;  // the count of mirrored runs in flight
  std::shared_ptr<Mirrors> mirrors_;
};

}  // namespace strata::tune
