#include "backend/residency.h"

#include <algorithm>

#include <fmt/format.h>

#include "backend/local.h"

namespace strata::backend {

namespace {

double MiB(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

// One model's state. Everything but the immutable spec, loader and backend
// is guarded by ModelResidency::mu_.
struct ModelResidency::Model {
  enum class State { kAbsent, kLoading, kResident, kUnloading };
  ModelSpec spec;
  ModelLoader loader;
  std::unique_ptr<ResidentBackend> backend;
  State state = State::kAbsent;
  std::unique_ptr<LoadedModel> loaded;  // kResident (moved out while kUnloading)
  uint64_t bytes = 0;                   // resident: as loaded; else spec.bytes
  int32_t leases = 0;
  int32_t waiting = 0;   // requests waiting for it to load
  uint64_t attempt = 0;  // loads started
  util::Status failure;  // why load `attempt` failed (OK once one succeeds)
  uint64_t loads = 0, evictions = 0, load_failures = 0;
  // Its children of the residency's families.
  obs::CounterValue* loads_total = nullptr;
  obs::CounterValue* failures_total = nullptr;
  obs::CounterValue* evictions_total = nullptr;
  obs::GaugeValue* resident_gauge = nullptr;
  obs::GaugeValue* bytes_gauge = nullptr;
  obs::GaugeValue* waiting_gauge = nullptr;
  obs::HistogramValue* load_seconds = nullptr;
  // Mirrors state == kResident, for MayLoad without the lock.
  std::atomic<bool> resident{false};
};

// Model `i` held for one request; releasing the last hold lets it unload.
class ModelResidency::Lease {
 public:
  Lease(ModelResidency& owner, int32_t i, LoadedModel& loaded)
      : owner_(owner), i_(i), loaded_(loaded) {}
  ~Lease() { owner_.Release(i_); }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  Backend& backend() const { return loaded_.backend(); }

 private:
  ModelResidency& owner_;
  const int32_t i_;
  LoadedModel& loaded_;
};

namespace {

// What Prepare returns: the loaded backend's Prepared, its fields copied
// for the gateway, and the hold on the model it belongs to.
struct ResidentPrepared final : Prepared {
  std::shared_ptr<const Prepared> inner;
  std::shared_ptr<const void> lease;
};

// The state a run's sink and its Run share: the hold on the model until the
// run's last choice finished, and the loaded backend's run until then.
struct RunState {
  std::mutex mu;
  std::shared_ptr<const void> lease;  // guarded by mu; reset at the last kFinish
  std::shared_ptr<Run> inner;         // guarded by mu; reset with the lease
  int32_t unfinished = 0;             // guarded by mu: choices without a kFinish yet
};

class ResidentSink final : public Sink {
 public:
  ResidentSink(std::shared_ptr<Sink> sink, std::shared_ptr<RunState> state)
      : sink_(std::move(sink)), state_(std::move(state)) {}
  void Push(Event&& e) override {
    const bool finish = e.kind == Event::Kind::kFinish;
    sink_->Push(std::move(e));
    if (!finish) return;
    std::shared_ptr<const void> lease;  // released after the lock
    std::shared_ptr<Run> inner;
    std::lock_guard<std::mutex> lock(state_->mu);
    if (--state_->unfinished > 0) return;
    lease = std::move(state_->lease);
    inner = std::move(state_->inner);
  }
  void OnFirstToken(std::chrono::nanoseconds ttft) override { sink_->OnFirstToken(ttft); }
  void DoNotStore() override { sink_->DoNotStore(); }

 private:
  const std::shared_ptr<Sink> sink_;
  const std::shared_ptr<RunState> state_;
};

class ResidentRun final : public Run {
 public:
  explicit ResidentRun(std::shared_ptr<RunState> state) : state_(std::move(state)) {}
  void Cancel() override {
    std::shared_ptr<const void> lease;  // keeps the model resident during the call
    std::shared_ptr<Run> inner;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      lease = state_->lease;
      inner = state_->inner;
    }
    if (inner) inner->Cancel();  // a finished run has nothing to cancel
  }

 private:
  const std::shared_ptr<RunState> state_;
};

}  // namespace

// The Backend of model `i`: holds the model for each call, loading it first
// when it is not resident.
class ModelResidency::ResidentBackend final : public Backend {
 public:
  ResidentBackend(ModelResidency& owner, int32_t i, const ModelSpec& spec)
      : owner_(owner), i_(i), spec_(spec) {}

  const std::string& name() const override { return spec_.name; }
  std::string_view kind() const override { return "local"; }
  uint64_t fingerprint() const override { return spec_.fingerprint; }
  int32_t n_ctx() const override { return spec_.n_ctx; }
  bool may_block() const override { return owner_.MayLoad(i_); }

  util::StatusOr<std::shared_ptr<const Prepared>> Prepare(const Request& r) const override {
    STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Lease> lease, owner_.Acquire(i_));
    STRATA_ASSIGN_OR_RETURN(std::shared_ptr<const Prepared> inner, lease->backend().Prepare(r));
    auto p = std::make_shared<ResidentPrepared>();
    static_cast<Prepared&>(*p) = *inner;  // the fields the gateway reads
    p->inner = std::move(inner);
    p->lease = std::move(lease);
    return std::shared_ptr<const Prepared>(std::move(p));
  }

  util::StatusOr<std::shared_ptr<Run>> Start(const Request& r,
                                             std::shared_ptr<const Prepared> prepared,
                                             std::shared_ptr<Sink> sink,
                                             Governor* governor) override {
    const auto* rp = dynamic_cast<const ResidentPrepared*>(prepared.get());
    if (rp == nullptr) {
      return util::InternalError(
          fmt::format("model '{}': a run started from another backend's Prepare", spec_.name));
    }
    auto lease = std::static_pointer_cast<const Lease>(rp->lease);
    auto state = std::make_shared<RunState>();
    state->lease = lease;
    state->unfinished = std::max(1, r.n);
    STRATA_ASSIGN_OR_RETURN(
        std::shared_ptr<Run> inner,
        lease->backend().Start(r, rp->inner, std::make_shared<ResidentSink>(std::move(sink), state),
                               governor));
    {
      std::lock_guard<std::mutex> lock(state->mu);
      if (state->lease) state->inner = std::move(inner);  // not finished already
    }
    return std::shared_ptr<Run>(std::make_shared<ResidentRun>(std::move(state)));
  }

  util::StatusOr<EmbeddingResult> Embed(const EmbeddingRequest& r,
                                        std::chrono::steady_clock::time_point deadline) override {
    STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Lease> lease, owner_.Acquire(i_));
    return lease->backend().Embed(r, deadline);
  }
  util::StatusOr<std::vector<int32_t>> EncodeText(std::string_view text, bool add_special,
                                                  bool parse_special) const override {
    STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Lease> lease, owner_.Acquire(i_));
    return lease->backend().EncodeText(text, add_special, parse_special);
  }
  util::StatusOr<std::string> DecodeTokens(std::span<const int32_t> ids) const override {
    STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Lease> lease, owner_.Acquire(i_));
    return lease->backend().DecodeTokens(ids);
  }
  util::StatusOr<std::string> TokenBytes(int32_t id) const override {
    STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Lease> lease, owner_.Acquire(i_));
    return lease->backend().TokenBytes(id);
  }
  // A model that is not resident holds no prefix blocks, and is not loaded
  // to warm it.
  util::StatusOr<std::vector<CachedPrefix>> CachedPrefixes(
      size_t max, std::chrono::milliseconds timeout) override {
    const std::shared_ptr<Lease> lease = owner_.AcquireIfResident(i_);
    if (lease == nullptr) return std::vector<CachedPrefix>();
    return lease->backend().CachedPrefixes(max, timeout);
  }
  util::StatusOr<int64_t> WarmPrefixes(const std::vector<CachedPrefix>& prefixes,
                                       std::chrono::milliseconds timeout) override {
    const std::shared_ptr<Lease> lease = owner_.AcquireIfResident(i_);
    if (lease == nullptr) return 0;
    return lease->backend().WarmPrefixes(prefixes, timeout);
  }
  // A model that is not resident holds no prefix blocks: nothing to forget.
  util::StatusOr<int64_t> ForgetPrefixes(const PrefixInvalidation& what,
                                         std::chrono::milliseconds timeout) override {
    const std::shared_ptr<Lease> lease = owner_.AcquireIfResident(i_);
    if (lease == nullptr) return 0;
    return lease->backend().ForgetPrefixes(what, timeout);
  }
  util::StatusOr<int32_t> PromptTokens(const Request& r) const override {
    STRATA_ASSIGN_OR_RETURN(std::shared_ptr<Lease> lease, owner_.Acquire(i_));
    return lease->backend().PromptTokens(r);
  }

 private:
  ModelResidency& owner_;
  const int32_t i_;
  const ModelSpec spec_;
};

util::StatusOr<std::unique_ptr<ModelResidency>> ModelResidency::Create(
    const ResidencyOptions& options, obs::MetricsRegistry& metrics, const util::Clock& clock,
    util::Logger& log) {
  if (options.budget_bytes == 0) {
    return util::InvalidArgumentError("the models' memory budget must be above 0 bytes");
  }
  if (options.max_wait <= std::chrono::milliseconds::zero()) {
    return util::InvalidArgumentError("the wait for a model to load must be above 0 ms");
  }
  std::unique_ptr<ModelResidency> r(new ModelResidency(options, metrics, clock, log));
  metrics
      .Gauge("strata_models_memory_budget_bytes",
             "Bytes the resident local models may hold together (--models-memory).")
      .With({})
      .Set(static_cast<double>(options.budget_bytes));
  metrics.GaugeCallback("strata_models_resident_bytes",
                        "Bytes the resident local models hold together.",
                        [p = r.get()] { return static_cast<double>(p->resident_bytes()); });
  ExportSchedulerMetrics(metrics, [p = r.get()] { return p->scheduler_stats(); });
  return r;
}

ModelResidency::ModelResidency(const ResidencyOptions& options, obs::MetricsRegistry& metrics,
                               const util::Clock& clock, util::Logger& log)
    : options_(options),
      clock_(clock),
      log_(log),
      metrics_(metrics),
      load_seconds_(metrics.Histogram("strata_model_load_duration_seconds",
                                      "Seconds a local model took to load (weights mapped and "
                                      "touched, engine and scheduler started), by model.",
                                      {"model"}, obs::ExponentialBuckets(0.01, 2, 14))),
      families_{.loads = metrics.Counter("strata_model_loads_total", "Local model loads, by model.",
                                         {"model"}),
                .failures = metrics.Counter("strata_model_load_failures_total",
                                            "Local model loads that failed, by model.", {"model"}),
                .evictions = metrics.Counter(
                    "strata_model_evictions_total",
                    "Local models unloaded to make room for another, by model.", {"model"}),
                .resident = metrics.Gauge("strata_model_resident",
                                          "1 while a local model is loaded.", {"model"}),
                .bytes = metrics.Gauge("strata_model_resident_bytes",
                                       "Bytes a loaded local model holds (weights and KV pool).",
                                       {"model"}),
                .waiting = metrics.Gauge("strata_model_requests_waiting",
                                         "Requests waiting for a local model to load.", {"model"})},
      policy_(cache::NewEvictionPolicy(options.policy, options.policy_options)) {}

ModelResidency::~ModelResidency() {
  // Unloaded outside the lock, in reverse order of adding.
  std::vector<std::unique_ptr<LoadedModel>> loaded;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = models_.rbegin(); it != models_.rend(); ++it) {
      if ((*it)->loaded) loaded.push_back(std::move((*it)->loaded));
    }
  }
  loaded.clear();
}

util::StatusOr<int32_t> ModelResidency::Add(ModelSpec spec, ModelLoader loader) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& m : models_) {
    if (m->spec.name == spec.name) {
      return util::InvalidArgumentError(
          fmt::format("two local models are named '{}' ({} and {}): name them apart (-m NAME=FILE)",
                      spec.name, m->spec.path, spec.path));
    }
  }
  if (spec.bytes > options_.budget_bytes) {
    return util::ResourceExhaustedError(
               fmt::format("model '{}' ({}) needs {:.0f} MiB resident, more than the whole "
                           "models' memory budget of {:.0f} MiB (--models-memory)",
                           spec.name, spec.path, MiB(spec.bytes), MiB(options_.budget_bytes)))
        .WithReason(util::ErrorReason::kModelMemory);
  }
  const auto i = static_cast<int32_t>(models_.size());
  auto m = std::make_unique<Model>();
  m->spec = std::move(spec);
  m->loader = std::move(loader);
  m->bytes = m->spec.bytes;
  m->backend = std::make_unique<ResidentBackend>(*this, i, m->spec);
  const std::vector<std::string> label{m->spec.name};
  m->loads_total = &families_.loads.With(label);
  m->failures_total = &families_.failures.With(label);
  m->evictions_total = &families_.evictions.With(label);
  m->resident_gauge = &families_.resident.With(label);
  m->bytes_gauge = &families_.bytes.With(label);
  m->waiting_gauge = &families_.waiting.With(label);
  m->load_seconds = &load_seconds_.With(label);
  models_.push_back(std::move(m));
  uint64_t all = 0;
  for (const auto& x : models_) all += x->spec.bytes;
  all_fit_.store(all <= options_.budget_bytes, std::memory_order_release);
  return i;
}

Backend* ModelResidency::backend(int32_t i) const {
  std::lock_guard<std::mutex> lock(mu_);
  return models_.at(static_cast<size_t>(i))->backend.get();
}

int32_t ModelResidency::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int32_t>(models_.size());
}

bool ModelResidency::MayLoad(int32_t i) const {
  // models_ only grows before serving; its elements never move. A resident
  // model stays so for good only when every model fits the budget at once.
  return !all_fit_.load(std::memory_order_acquire) ||
         !models_[static_cast<size_t>(i)]->resident.load(std::memory_order_acquire);
}

util::Status ModelResidency::Load(int32_t i) { return Acquire(i).status(); }

std::optional<std::vector<int32_t>> ModelResidency::VictimsLocked(int32_t loading, uint64_t bytes) {
  std::vector<int32_t> victims;
  uint64_t freed = 0;
  auto fits = [&] { return used_bytes_ - freed + bytes <= options_.budget_bytes; };
  const auto now = clock_.Now();
  while (!fits()) {
    const auto v = policy_->VictimAmong(now, [&](uint64_t key) {
      const Model& m = *models_[key];
      return static_cast<int32_t>(key) != loading && m.state == Model::State::kResident &&
             m.leases == 0 &&
             std::find(victims.begin(), victims.end(), static_cast<int32_t>(key)) == victims.end();
    });
    if (!v) return std::nullopt;
    victims.push_back(static_cast<int32_t>(*v));
    freed += models_[*v]->bytes;
  }
  return victims;
}

util::Status ModelResidency::NoRoomLocked(int32_t i) const {
  std::string busy;
  for (const auto& m : models_) {
    if (m->state == Model::State::kResident && m->leases > 0) {
      busy += fmt::format("{}'{}' ({:.0f} MiB, {} requests)", busy.empty() ? "" : ", ",
                          m->spec.name, MiB(m->bytes), m->leases);
    }
  }
  return util::UnavailableError(
             fmt::format("model '{}' needs {:.0f} MiB and is not loaded: {:.0f} of the {:.0f} MiB "
                         "of --models-memory are held by models in use ({}) for longer than {} ms",
                         models_[static_cast<size_t>(i)]->spec.name,
                         MiB(models_[static_cast<size_t>(i)]->bytes), MiB(used_bytes_),
                         MiB(options_.budget_bytes), busy, options_.max_wait.count()))
      .WithReason(util::ErrorReason::kModelMemory);
}

std::shared_ptr<ModelResidency::Lease> ModelResidency::AcquireIfResident(int32_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  Model& m = *models_.at(static_cast<size_t>(i));
  if (m.state != Model::State::kResident) return nullptr;
  ++m.leases;
  return std::make_shared<Lease>(*this, i, *m.loaded);
}

util::StatusOr<std::shared_ptr<ModelResidency::Lease>> ModelResidency::Acquire(int32_t i) {
  const auto deadline = clock_.Now() + options_.max_wait;
  std::unique_lock<std::mutex> lock(mu_);
  Model& m = *models_.at(static_cast<size_t>(i));
  bool counted_waiting = false;
  auto stop_waiting = [&] {
    if (!counted_waiting) return;
    counted_waiting = false;
    --m.waiting;
    m.waiting_gauge->Set(m.waiting);
  };
  // Waits for a change until the deadline; false when it passed.
  auto wait = [&] {
    if (!counted_waiting) {
      counted_waiting = true;
      ++m.waiting;
      m.waiting_gauge->Set(m.waiting);
    }
    const auto now = clock_.Now();
    if (now >= deadline) return false;
    changed_.wait_for(lock, deadline - now);  // the caller looks again, then waits again
    return true;
  };
  while (true) {
    if (m.state == Model::State::kResident) {
      stop_waiting();
      ++m.leases;
      policy_->Access(static_cast<uint64_t>(i), clock_.Now());
      return std::make_shared<Lease>(*this, i, *m.loaded);
    }
    if (draining_) {
      stop_waiting();
      return util::UnavailableError(
                 fmt::format("model '{}' is not loaded and the server is shutting down",
                             m.spec.name))
          .WithReason(util::ErrorReason::kShuttingDown);
    }
    if (m.state != Model::State::kAbsent || loading_) {
      // Another request loads this model, or another one (loads run one at a time).
      const bool this_one = m.state == Model::State::kLoading;
      const uint64_t attempt = m.attempt;
      if (!wait()) {
        stop_waiting();
        return util::UnavailableError(fmt::format("model '{}' did not load within {} ms",
                                                  m.spec.name, options_.max_wait.count()))
            .WithReason(util::ErrorReason::kModelLoading);
      }
      if (this_one && m.attempt == attempt && m.state == Model::State::kAbsent && !m.failure.ok()) {
        stop_waiting();
        return m.failure;  // the load this request waited for failed
      }
      continue;
    }
    std::optional<std::vector<int32_t>> victims = VictimsLocked(i, m.bytes);
    if (!victims) {
      if (!wait()) {
        stop_waiting();
        return NoRoomLocked(i);
      }
      continue;
    }
    // This request loads the model, after unloading the victims.
    loading_ = true;
    m.state = Model::State::kLoading;
    ++m.attempt;
    std::vector<std::unique_ptr<LoadedModel>> unload;
    for (int32_t v : *victims) {
      Model& x = *models_[static_cast<size_t>(v)];
      x.state = Model::State::kUnloading;
      x.resident.store(false, std::memory_order_release);
      policy_->Erase(static_cast<uint64_t>(v));
      retired_ += engine::CountersOf(x.loaded->stats());
      unload.push_back(std::move(x.loaded));
    }
    lock.unlock();
    for (size_t k = 0; k < unload.size(); ++k) {
      const Model& x = *models_[static_cast<size_t>((*victims)[k])];
      log_.Info("unloading model '{}' ({:.0f} MiB) to make room for '{}'", x.spec.name,
                MiB(x.bytes), m.spec.name);
      unload[k].reset();  // idle: its scheduler stops at once
    }
    log_.Info("loading model '{}' from {} ({:.0f} MiB)", m.spec.name, m.spec.path, MiB(m.bytes));
    const auto t0 = clock_.Now();
    util::StatusOr<std::unique_ptr<LoadedModel>> loaded = m.loader();
    const double seconds = util::SecondsBetween(t0, clock_.Now());
    lock.lock();
    for (int32_t v : *victims) {
      Model& x = *models_[static_cast<size_t>(v)];
      x.state = Model::State::kAbsent;
      used_bytes_ -= x.bytes;
      x.bytes = x.spec.bytes;
      ++x.evictions;
      x.evictions_total->Inc();
      x.resident_gauge->Set(0);
      x.bytes_gauge->Set(0);
    }
    loading_ = false;
    if (!loaded.ok()) {
      m.state = Model::State::kAbsent;
      m.failure = loaded.status();
      ++m.load_failures;
      m.failures_total->Inc();
      log_.Error("model '{}' failed to load: {}", m.spec.name, loaded.status().message());
      changed_.notify_all();
      stop_waiting();
      return loaded.status();
    }
    m.loaded = std::move(loaded).value();
    m.bytes = m.loaded->resident_bytes();
    m.failure = util::OkStatus();
    m.state = Model::State::kResident;
    m.resident.store(true, std::memory_order_release);
    used_bytes_ += m.bytes;
    policy_->Insert(static_cast<uint64_t>(i), m.bytes, clock_.Now());
    ++m.loads;
    m.loads_total->Inc();
    m.load_seconds->Observe(seconds);
    m.resident_gauge->Set(1);
    m.bytes_gauge->Set(static_cast<double>(m.bytes));
    log_.Info("model '{}' loaded in {:.0f} ms: {:.0f} MiB resident, {:.0f} of {:.0f} MiB in use",
              m.spec.name, seconds * 1e3, MiB(m.bytes), MiB(used_bytes_),
              MiB(options_.budget_bytes));
    if (used_bytes_ > options_.budget_bytes) {
      log_.Warn(
          "the resident models hold {:.0f} MiB, more than --models-memory {:.0f} MiB: "
          "'{}' is larger loaded than estimated",
          MiB(used_bytes_), MiB(options_.budget_bytes), m.spec.name);
    }
    changed_.notify_all();
  }
}

void ModelResidency::Release(int32_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  if (--models_[static_cast<size_t>(i)]->leases == 0) changed_.notify_all();
}

bool ModelResidency::Drain(std::chrono::steady_clock::time_point deadline) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    draining_ = true;
    changed_.notify_all();
    // A load under way finishes first (its requests are admitted, then drained).
    changed_.wait_until(lock, deadline, [this] { return !loading_; });
  }
  bool clean = true;
  ForEachResident([&](LoadedModel& m) { clean = m.Drain(deadline) && clean; });
  return clean;
}

void ModelResidency::ForEachResident(const std::function<void(LoadedModel&)>& f) {
  std::vector<std::pair<std::shared_ptr<Lease>, LoadedModel*>> held;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < models_.size(); ++i) {
      Model& m = *models_[i];
      if (m.state != Model::State::kResident) continue;
      ++m.leases;
      held.emplace_back(std::make_shared<Lease>(*this, static_cast<int32_t>(i), *m.loaded),
                        m.loaded.get());
    }
  }
  for (auto& [lease, loaded] : held) f(*loaded);
}

std::vector<ModelResidencyStats> ModelResidency::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ModelResidencyStats> out;
  for (const auto& m : models_) {
    out.push_back({.name = m->spec.name,
                   .resident = m->state == Model::State::kResident,
                   .loading = m->state == Model::State::kLoading,
                   .bytes = m->bytes,
                   .leases = m->leases,
                   .loads = m->loads,
                   .evictions = m->evictions,
                   .load_failures = m->load_failures});
  }
  return out;
}

uint64_t ModelResidency::resident_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_bytes_;
}

engine::SchedulerStats ModelResidency::scheduler_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  engine::SchedulerStats sum = retired_;
  for (const auto& m : models_) {
    if (m->state == Model::State::kResident) sum += m->loaded->stats();
  }
  return sum;
}

}  // namespace strata::backend
