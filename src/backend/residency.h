// backend/residency.h — several local models in one process under a memory
// budget (L7): each loads on first use and stays while the budget allows.
//
// Promise: ModelResidency serves each added model through a Backend
// (backend(i)) that loads the model when a request needs it and it is not
// resident. Loads run one at a time. Before a load, resident models no
// request is using are unloaded, in the order the eviction policy names
// (dual-factor by default: score = exp(-λ·age) · n/(n+k), cache/
// eviction_policy.h), until the new model's bytes fit the budget; when the
// models that would have to go are in use, the load waits for one of them
// to finish (until `max_wait`), then fails with Unavailable, reason
// kModelMemory, naming the models in the way. A model larger than the whole
// budget is refused when it is added. A request holds its model from
// Prepare (or an Embed, a tokenization) until its Prepared is released and
// its run's last choice has finished: a model is never unloaded under a
// request. A failed load fails the requests that waited for it with the
// loader's error; the next request tries again.
//
// Everything the backend answers without the model (name, kind,
// fingerprint, n_ctx) comes from the ModelSpec, which the caller learns by
// opening the file once when it adds the model, so cache keys are the same
// before and after a load.
//
// Metrics (docs/metrics.md): strata_model_loads_total{model},
// strata_model_load_failures_total{model}, strata_model_evictions_total{model},
// strata_model_load_duration_seconds{model} (histogram), strata_model_resident{model}
// (0/1), strata_model_resident_bytes{model}, strata_model_requests_waiting{model},
// strata_models_memory_budget_bytes, strata_models_resident_bytes; and the
// schedulers' gauges and counters (ExportSchedulerMetrics, backend/local.h)
// summed over the resident models, counters kept across unloads
// (scheduler_stats(), which the caller also hands to the L2 series of
// gateway/prefix_metrics.h).
//
// Threading: thread-safe. mu_ guards the models' states; it is never held
// while a model loads or unloads (a load runs on the requesting thread, an
// unload on the thread whose load needs the room), so a request for a
// resident model never waits behind a load.
//
// Usage:
//   auto res = ModelResidency::Create({.budget_bytes = 8 << 30}, metrics, clock, log);
//   (*res)->Add({.name = "small", .bytes = 2 << 30, ...}, [] { return LoadSmall(); });
//   Gateway::Create({(*res)->backend(0), ...}, ...);
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cache/eviction_policy.h"
#include "engine/scheduler.h"
#include "obs/metrics.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::backend {

// A resident model: whatever serves it (for the embedded engine, the model,
// its engine and scheduler and the LocalBackend over them). Destroying it
// unloads the model; it is destroyed only when no request uses it.
class LoadedModel {
 public:
  virtual ~LoadedModel() = default;
  virtual Backend& backend() = 0;
  // The bytes it holds while resident (weights and KV pool).
  virtual uint64_t resident_bytes() const = 0;
  // Its scheduler's live state (for the summed metrics); thread-safe.
  virtual engine::SchedulerStats stats() const = 0;
  // Stops taking new work and lets running work finish until `deadline`;
  // true when nothing had to be cancelled.
  virtual bool Drain(std::chrono::steady_clock::time_point deadline) = 0;
};

using ModelLoader = std::function<util::StatusOr<std::unique_ptr<LoadedModel>>()>;

// What is known of a model before it loads.
struct ModelSpec {
  std::string name;          // the id clients use
  std::string path;          // its file, for messages
  uint64_t fingerprint = 0;  // Backend::fingerprint of the loaded model
  int32_t n_ctx = 0;         // Backend::n_ctx of the loaded model
  uint64_t bytes = 0;        // what it will hold resident (an estimate until it loads)
};

struct ResidencyOptions {
  uint64_t budget_bytes = 0;  // > 0: the bytes resident models may hold together
  cache::PolicyKind policy = cache::PolicyKind::kDualFactor;
  cache::PolicyOptions policy_options = {};
  // How long a request waits for its model to load (the load itself and
  // the wait for room), > 0.
  std::chrono::milliseconds max_wait{60'000};
};

struct ModelResidencyStats {
  std::string name;
  bool resident = false;
  bool loading = false;
  uint64_t bytes = 0;  // resident: as loaded; else the estimate
  int32_t leases = 0;  // requests holding it
  uint64_t loads = 0, evictions = 0, load_failures = 0;
};

class ModelResidency {
 public:
  // InvalidArgument for a zero budget or wait. `metrics`, `clock` and `log`
  // must outlive the residency.
  static util::StatusOr<std::unique_ptr<ModelResidency>> Create(const ResidencyOptions& options,
                                                                obs::MetricsRegistry& metrics,
                                                                const util::Clock& clock,
                                                                util::Logger& log);
  // Unloads every model; no request may still use one.
  ~ModelResidency();
  ModelResidency(const ModelResidency&) = delete;
  ModelResidency& operator=(const ModelResidency&) = delete;

  // Adds a model (not loaded) and returns its index. InvalidArgument when
  // the name is taken, and ResourceExhausted (kModelMemory) when its bytes
  // alone exceed the budget. Call before serving.
  util::StatusOr<int32_t> Add(ModelSpec spec, ModelLoader loader);
  // The backend serving model `i` (owned here).
  Backend* backend(int32_t i) const;
  int32_t size() const;

  // Loads model `i` now (start-up: --preload), making room as a request
  // would; the load's error, or Unavailable when it does not fit beside
  // models in use.
  util::Status Load(int32_t i);
  // Whether a request for model `i` may wait for a load: it is not
  // resident, or the models do not all fit the budget at once (a resident
  // one may be unloaded before the request holds it).
  bool MayLoad(int32_t i) const;

  // Refuses loads from now on (Unavailable, kShuttingDown) and drains every
  // resident model until `deadline`; true when none had to cancel work.
  bool Drain(std::chrono::steady_clock::time_point deadline);
  // Calls `f` with each resident model's LoadedModel (a reload's new
  // limits), holding each so it stays resident meanwhile; models loaded
  // later are the loader's to configure.
  void ForEachResident(const std::function<void(LoadedModel&)>& f);

  std::vector<ModelResidencyStats> Stats() const;
  uint64_t budget_bytes() const { return options_.budget_bytes; }
  uint64_t resident_bytes() const;
  // The resident models' schedulers summed, with the counters of unloaded
  // ones kept (for metrics that read several schedulers as one).
  engine::SchedulerStats scheduler_stats() const;

 private:
  class ResidentBackend;
  class Lease;
  struct Model;
  ModelResidency(const ResidencyOptions& options, obs::MetricsRegistry& metrics,
                 const util::Clock& clock, util::Logger& log);
  // Model `i` held for a request: loaded first when it is not resident.
  util::StatusOr<std::shared_ptr<Lease>> Acquire(int32_t i);
  // A hold on model i only if it is resident now (nullptr otherwise); never
  // loads it and does not count as a use for the eviction policy.
  std::shared_ptr<Lease> AcquireIfResident(int32_t i);
  void Release(int32_t i);
  // mu_ held: the idle resident models to unload (in the policy's order)
  // so that `bytes` more fit, or nullopt when models in use are in the way.
  std::optional<std::vector<int32_t>> VictimsLocked(int32_t loading, uint64_t bytes);
  util::Status NoRoomLocked(int32_t i) const;

  const ResidencyOptions options_;
  const util::Clock& clock_;
  util::Logger& log_;
  obs::MetricsRegistry& metrics_;
  obs::Family<obs::HistogramValue>& load_seconds_;
  struct Families {
    obs::Family<obs::CounterValue>& loads;
    obs::Family<obs::CounterValue>& failures;
    obs::Family<obs::CounterValue>& evictions;
    obs::Family<obs::GaugeValue>& resident;
    obs::Family<obs::GaugeValue>& bytes;
    obs::Family<obs::GaugeValue>& waiting;
  };
  const Families families_;  // each labelled by model

  mutable std::mutex mu_;
  std::condition_variable changed_;                // a load ended, a lease ended, a model unloaded
  std::vector<std::unique_ptr<Model>> models_;     // guarded by mu_ (states)
  std::unique_ptr<cache::EvictionPolicy> policy_;  // guarded by mu_: resident models
  uint64_t used_bytes_ = 0;                        // guarded by mu_
  bool loading_ = false;                           // guarded by mu_: one load at a time
  bool draining_ = false;                          // guarded by mu_
  engine::SchedulerStats retired_;                 // guarded by mu_: unloaded counters
  std::atomic<bool> all_fit_{true};  // every model's bytes fit the budget together (set by Add)
};

}  // namespace strata::backend
