#include "cli/serve_models.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "backend/local.h"
#include "cli/placement_io.h"
#include "engine/engine.h"
#include "engine/placement.h"
#include "engine/scheduler.h"
#include "gateway/block_eviction_adapter.h"
#include "model/transformer.h"
#include "util/file_watch.h"
#include "util/thread_pool.h"

namespace strata::cli {
namespace {

double MiB(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// Whether the weights served are still the file's: false once the watch saw
// the file change or a read of its mapping found bytes missing. Read after
// every forward pass (the scheduler's health hook) and by every Submit.
class ModelGuard {
 public:
  explicit ModelGuard(const util::MappedFile* mapped) : mapped_(mapped) {}
  void MarkChanged() { changed_.store(true); }
  util::Status Check() const {
    if (!changed_.load(std::memory_order_relaxed) && !(mapped_ && mapped_->faulted())) {
      return util::OkStatus();
    }
    return util::FailedPreconditionError(
               "the model file changed on disk under the running server; restart strata to "
               "serve it as it is now")
        .WithReason(util::ErrorReason::kModelChanged);
  }

 private:
  const util::MappedFile* const mapped_;  // null: nothing to guard
  std::atomic<bool> changed_{false};
};

// The engine's options for a model of `config` under the flags: the
// context (-c, capped by the model's), the forward pass's threads (-t) and
// the KV block pool, whose cached prefix blocks are the L2 tier
// (--kv-tokens, --l2-policy).
engine::EngineOptions EngineOptionsFor(const ServeFlags& f, const model::ModelConfig& config) {
  engine::EngineOptions o;
  const int32_t n_ctx = std::min(f.ctx, config.n_ctx_train);
  o.n_threads = f.threads;
  o.n_ctx = n_ctx;
  const int32_t kv_tokens = std::max(n_ctx, f.kv_tokens > 0 ? f.kv_tokens : 8 * n_ctx);
  o.n_kv_blocks = (kv_tokens + o.block_size - 1) / o.block_size;
  // Checked with the other flags before any model loads.
  const util::StatusOr<kernels::TensorType> kv_type = engine::ParseKvType(f.kv_type);
  if (kv_type.ok()) o.kv_type = *kv_type;
  return o;
}

// What a model of `config` holds while it is loaded: its weights and its
// KV pool (reserved in full, though touched only as blocks fill).
uint64_t ModelResidentBytes(const model::ModelConfig& config, const engine::EngineOptions& o) {
  const uint64_t kv = static_cast<uint64_t>(o.n_kv_blocks) *
                      config.kv_layout(o.block_size, o.kv_type).block_bytes();
  return config.weight_bytes + kv;
}

// Reads one byte of every page of `parts` on `threads` threads, each bound
// to `cpus` when it is not empty, so that the file's pages are in memory
// before requests read them: the first touch of each page faults it in
// (from disk: then onto the touching thread's NUMA node), a page cache that
// already holds it costs a mapping.
void TouchPages(std::span<const std::span<const uint8_t>> parts, int32_t threads,
                const std::vector<int32_t>& cpus, util::Logger& log) {
  constexpr size_t kPage = 4096;
  std::vector<std::pair<const uint8_t*, size_t>> pages;  // each part's start and page count
  size_t total = 0;
  for (std::span<const uint8_t> part : parts) {
    if (part.empty()) continue;
    const size_t n = (part.size() + kPage - 1) / kPage;
    pages.emplace_back(part.data(), n);
    total += n;
  }
  if (total == 0) return;
  const size_t n = std::clamp<size_t>(static_cast<size_t>(threads), 1, total);
  std::vector<std::thread> workers;
  std::atomic<uint64_t> sink{0};
  std::atomic<bool> unbound{false};
  for (size_t t = 0; t < n; ++t) {
    workers.emplace_back([&, t] {
      if (!cpus.empty() && !util::PinCurrentThread(cpus).ok()) unbound = true;
      // Pages [total·t/n, total·(t+1)/n) of the parts laid end to end.
      size_t skip = total * t / n, left = total * (t + 1) / n - skip;
      uint64_t sum = 0;
      for (const auto& [start, count] : pages) {
        if (left == 0) break;
        if (skip >= count) {
          skip -= count;
          continue;
        }
        const size_t take = std::min(count - skip, left);
        for (size_t p = skip; p < skip + take; ++p) sum += start[p * kPage];
        left -= take;
        skip = 0;
      }
      sink.fetch_add(sum, std::memory_order_relaxed);  // the reads are not optimised away
    });
  }
  for (auto& w : workers) w.join();
  if (unbound) log.Warn("warm-up: a thread could not be bound to CPUs {}", CpuRanges(cpus));
}

// Watches the model file once a second (util::FileWatch): the first change
// marks `guard`, tells the server (health 503 model_changed, new requests
// refused) and logs why. Null, with a warning, where the file cannot be
// watched. `guard`, `srv` and `log` must outlive the watch.
std::unique_ptr<util::FileWatch> WatchModel(const Env& env, const std::string& path,
                                            const model::Model& m, ModelGuard& guard,
                                            server::HttpServer& srv, util::Logger& log) {
  const util::MappedFile* mapped = m.gguf().file();
  if (mapped == nullptr) return nullptr;
  auto watch = util::FileWatch::Start(
      *env.fs, path, *mapped, std::chrono::seconds(1),
      [&guard, &srv, &log](const util::Status& why) {
        guard.MarkChanged();
        log.Error("{}; /health now answers 503 and requests get model_changed", why.message());
        srv.SetBroken(why);
      });
  if (!watch.ok()) {
    log.Warn("not watching the model file: {}", watch.status().message());
    return nullptr;
  }
  return std::move(watch).value();
}

// One loaded model and everything that serves it, in the order it starts;
// destroyed in reverse (the watch, the backend, the scheduler's thread, the
// engine, the guard, the model).
class LocalServing final : public backend::LoadedModel {
 public:
  explicit LocalServing(const util::Clock& clock) : clock_(clock) {}
  backend::Backend& backend() override { return *local; }
  uint64_t resident_bytes() const override { return bytes; }
  engine::SchedulerStats stats() const override { return sched->Stats(); }
  bool Drain(std::chrono::steady_clock::time_point deadline) override {
    const auto left =
        std::max(std::chrono::steady_clock::duration::zero(), deadline - clock_.Now());
    return sched->Drain(std::chrono::duration_cast<std::chrono::milliseconds>(left));
  }

  std::unique_ptr<model::Model> model;
  std::unique_ptr<ModelGuard> guard;
  engine::EngineOptions engine_options;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<engine::Scheduler> sched;
  std::unique_ptr<backend::LocalBackend> local;
  std::unique_ptr<util::FileWatch> watch;
  uint64_t bytes = 0;

 private:
  const util::Clock& clock_;
};

// What a model's loader needs; shared by its copies.
struct LoaderState {
  const Env* env = nullptr;
  ServeFlags flags;
  LocalModelFile file;
  LocalModelOptions options;
  gateway::RtControl* rt = nullptr;
  server::HttpServer* srv = nullptr;
  obs::MetricsRegistry* metrics = nullptr;
  const util::Clock* clock = nullptr;
  util::Logger* log = nullptr;
  std::shared_ptr<LocalModels::Limits> limits;
  // The model as opened at start, for its first load (a model that loads
  // before the server opens is read once); null afterwards.
  std::unique_ptr<model::Model> opened;
  // Where the model goes on the NUMA nodes (--numa auto on several nodes):
  // the nodes, and the model's runs of stages on them. Absent: the OS decides.
  std::optional<engine::Topology> topology;
  engine::ModelPlacement placement;
};

// The CPUs of every node a placement's runs are on, ascending.
std::vector<int32_t> PlacementCpus(const engine::Topology& t, const engine::ModelPlacement& p) {
  std::vector<int32_t> cpus;
  for (const engine::PlacedRun& r : p.runs) {
    cpus.insert(cpus.end(), t.nodes[r.node].cpus.begin(), t.nodes[r.node].cpus.end());
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

// The warm-up: every page of the model's file touched. Placed, each run's
// tensors first, by threads bound to its node's CPUs (the first touch puts
// a page read from disk on that node), then the rest of the file.
void WarmUp(const LoaderState& s, const model::Model& m, int32_t kv_tokens) {
  const util::MappedFile* mapped = m.gguf().file();
  if (mapped == nullptr) return;
  const auto t0 = s.clock->Now();
  if (s.topology) {
    auto layout = ModelLayoutOf(m.gguf(), s.file.name, kv_tokens);
    if (layout.ok() && layout->stage_bytes.size() >= s.placement.runs.back().end) {
      for (const engine::PlacedRun& r : s.placement.runs) {
        std::vector<std::span<const uint8_t>> parts;
        for (size_t k = r.first; k < r.end; ++k) {
          parts.insert(parts.end(), layout->stage_bytes[k].begin(), layout->stage_bytes[k].end());
        }
        TouchPages(parts, s.flags.threads, s.topology->nodes[r.node].cpus, *s.log);
      }
    } else {
      s.log->Warn("model '{}': its stages changed since start; warmed up without placement",
                  s.file.name);
    }
  }
  const std::span<const uint8_t> whole = mapped->bytes();
  TouchPages(std::span<const std::span<const uint8_t>>(&whole, 1), s.flags.threads, {}, *s.log);
  s.log->Info("model '{}': {:.0f} MiB of weights in memory in {:.0f} ms (warm-up)", s.file.name,
              MiB(whole.size()), util::SecondsBetween(t0, s.clock->Now()) * 1e3);
}

// Loads the model of `s`: maps the file (or takes the one opened at start),
// touches its pages, and starts its engine, scheduler and backend.
util::StatusOr<std::unique_ptr<backend::LoadedModel>> LoadModel(LoaderState& s) {
  util::Logger& log = *s.log;
  const ServeFlags& f = s.flags;
  auto l = std::make_unique<LocalServing>(*s.clock);
  if (s.opened) {
    l->model = std::move(s.opened);
  } else {
    STRATA_ASSIGN_OR_RETURN(
        l->model,
        model::Model::Load(*s.env->fs, s.file.path,
                           {.prefetch = true, .pack = {.mode = model::PackMode::kOff}}, log));
  }
  const model::Model& m = *l->model;
  l->guard = std::make_unique<ModelGuard>(m.gguf().file());
  l->engine_options = EngineOptionsFor(f, m.config());
  WarmUp(s, m, l->engine_options.n_kv_blocks * l->engine_options.block_size);
  // Packing reads the pages the warm-up brought in and gives each matrix's
  // back once copied. Placed on NUMA nodes, the copies would not be: auto
  // then keeps the file's layout.
  const util::StatusOr<model::PackMode> parsed = model::ParsePackMode(f.repack);
  model::PackMode pack = parsed.ok() ? *parsed : model::PackMode::kAuto;  // checked at start
  if (pack == model::PackMode::kAuto && s.topology) {
    log.Info("model '{}': weights not packed: the placement spreads them over NUMA nodes",
             s.file.name);
    pack = model::PackMode::kOff;
  }
  l->model->PackWeights({.mode = pack, .threads = f.threads, .clock = s.clock}, s.env->fs, log);
  l->engine_options.block_eviction = gateway::BlockEvictionFactory(s.options.l2_policy, *s.clock);
  std::vector<int32_t> cpus;
  if (s.topology) cpus = PlacementCpus(*s.topology, s.placement);
  l->engine_options.cpus = cpus;
  STRATA_ASSIGN_OR_RETURN(l->engine, engine::Engine::Create(m, l->engine_options, log));
  ModelGuard* guard = l->guard.get();
  STRATA_ASSIGN_OR_RETURN(l->sched,
                          engine::Scheduler::Start(*l->engine,
                                                   {.max_running = f.parallel,
                                                    .max_batch_tokens = f.batch_tokens,
                                                    .max_queue = f.queue,
                                                    .control = s.rt,
                                                    .health = [guard] { return guard->Check(); },
                                                    .kv_pressure = f.kv_pressure,
                                                    .kv_min_grant = f.kv_min_grant,
                                                    .cpus = cpus},
                                                   log));
  const int32_t n_ctx = l->engine_options.n_ctx;
  backend::LocalOptions lo;
  lo.name = s.file.name;
  lo.max_tokens_cap = std::min(s.limits->max_tokens_cap.load(), n_ctx);
  lo.max_embedding_inputs = s.limits->max_embedding_inputs.load();
  lo.prompt_special_tokens = f.prompt_special_tokens;
  lo.chat_format = s.options.chat_format;
  // Unseeded requests sample differently each time, as the APIs define.
  lo.unseeded_seed_base =
      (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  lo.export_metrics = false;  // the residency exports every scheduler's sum
  STRATA_ASSIGN_OR_RETURN(
      l->local, backend::LocalBackend::Create(m, *l->sched, lo, *s.metrics, *s.clock, log));
  l->bytes = ModelResidentBytes(m.config(), l->engine_options);
  l->watch = WatchModel(*s.env, s.file.path, m, *l->guard, *s.srv, log);
  return std::unique_ptr<backend::LoadedModel>(std::move(l));
}

// The budget of --models-memory, or by default the machine's memory over
// the 1.2× headroom every node keeps (engine/placement.h).
util::StatusOr<uint64_t> ModelsBudget(const Env& env, const ServeFlags& f, util::Logger& log) {
  if (!f.models_memory.empty()) {
    auto bytes = ParseByteSize(f.models_memory);
    if (!bytes.ok())
      return util::InvalidArgumentError("--models-memory: " + bytes.status().message());
    return *bytes;
  }
  auto machine = engine::ReadMachineTopology(*env.fs, f.threads);
  if (!machine.ok()) {
    return util::FailedPreconditionError(fmt::format(
        "cannot read this machine's memory ({}): set --models-memory", machine.status().message()));
  }
  uint64_t total = 0;
  for (const engine::NumaNode& n : machine->nodes) total += n.memory_bytes;
  const auto budget = static_cast<uint64_t>(static_cast<double>(total) / 1.2);
  log.Debug("models' memory budget: {:.0f} MiB (the machine's {:.0f} MiB over 1.2x headroom)",
            MiB(budget), MiB(total));
  return budget;
}

// Where each model goes on `t` (engine/placement.h): all together as if
// every one were loaded; where they do not fit so, each on the whole
// machine alone (the residency keeps fewer loaded at once). A model that
// fits nowhere is left to the OS, with a warning.
std::vector<std::optional<engine::ModelPlacement>> PlanModels(
    const engine::Topology& t, const std::vector<engine::PlacementModel>& models,
    util::Logger& log) {
  std::vector<std::optional<engine::ModelPlacement>> out(models.size());
  if (auto together = engine::PlanPlacement(t, models); together.ok()) {
    for (size_t i = 0; i < models.size(); ++i) out[i] = together->models[i];
    return out;
  }
  for (size_t i = 0; i < models.size(); ++i) {
    auto alone = engine::PlanPlacement(t, std::span<const engine::PlacementModel>(&models[i], 1));
    if (alone.ok()) {
      out[i] = alone->models.front();
    } else {
      log.Warn("model '{}' is not placed on NUMA nodes: {}", models[i].name,
               alone.status().message());
    }
  }
  return out;
}

// "blk.0 .. blk.11 on node 0 (CPUs 0-7); ..." for the start-up log.
std::string DescribePlacement(const engine::Topology& t, const engine::PlacementModel& m,
                              const engine::ModelPlacement& p) {
  std::string out;
  for (const engine::PlacedRun& r : p.runs) {
    out += fmt::format("{}{} .. {} on node {} (CPUs {})", out.empty() ? "" : "; ",
                       m.stages[r.first].name, m.stages[r.end - 1].name, t.nodes[r.node].id,
                       CpuRanges(t.nodes[r.node].cpus));
  }
  return out + fmt::format("; {} B cross nodes per token", p.cross_node_bytes_per_token);
}

bool ValidModelName(std::string_view name) {
  return !name.empty() && name.size() <= 256 && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
           c == ':' || c == '@';
  });
}

}  // namespace

util::StatusOr<std::optional<engine::Topology>> NumaTopology(const Env& env, const ServeFlags& f,
                                                             const std::vector<int32_t>& allowed,
                                                             util::Logger& log,
                                                             const std::string& root) {
  if (f.numa == "off") return std::optional<engine::Topology>();
  util::StatusOr<engine::Topology> t =
      f.topology.empty()
          ? engine::ReadMachineTopology(*env.fs, static_cast<int32_t>(allowed.size()), root)
          : TopologyFile(env, f.topology);
  if (!t.ok()) {
    if (!f.topology.empty())
      return util::InvalidArgumentError("--topology: " + t.status().message());
    log.Warn("not placing models on NUMA nodes: {}", t.status().message());
    return std::optional<engine::Topology>();
  }
  if (f.topology.empty()) {
    // This machine's nodes as this process may use them: its CPUs only (a
    // cpuset or a container may allow fewer), and no node without one (a
    // memory-only node cannot be touched first from its own CPUs). The
    // distance matrix keeps the rows and columns of the nodes kept.
    engine::Topology usable;
    std::vector<size_t> kept;
    for (size_t i = 0; i < t->nodes.size(); ++i) {
      engine::NumaNode n = t->nodes[i];
      std::erase_if(n.cpus, [&](int32_t cpu) {
        return !std::binary_search(allowed.begin(), allowed.end(), cpu);
      });
      if (n.cpus.empty()) continue;
      kept.push_back(i);
      usable.nodes.push_back(std::move(n));
    }
    const bool square = t->distance.size() == t->nodes.size();
    for (size_t i : kept) {
      std::vector<int32_t> row;
      for (size_t j : kept) {
        row.push_back(square && t->distance[i].size() == t->nodes.size() ? t->distance[i][j]
                      : i == j                                           ? 10
                                                                         : 20);
      }
      usable.distance.push_back(std::move(row));
    }
    *t = std::move(usable);
  }
  if (t->nodes.size() < 2) {
    log.Debug("one NUMA node: the models' memory and threads are left to the OS");
    return std::optional<engine::Topology>();
  }
  for (const engine::NumaNode& n : t->nodes) {
    if (n.cpus.empty()) {
      return util::InvalidArgumentError(fmt::format("NUMA node {} has no CPUs listed", n.id));
    }
    for (int32_t cpu : n.cpus) {
      if (!std::binary_search(allowed.begin(), allowed.end(), cpu)) {
        return util::InvalidArgumentError(fmt::format(
            "NUMA node {} lists CPU {}, which this process may not run on (it may use {})", n.id,
            cpu, CpuRanges(allowed)));
      }
    }
  }
  return std::optional<engine::Topology>(std::move(t).value());
}

util::StatusOr<uint64_t> ParseByteSize(std::string_view text) {
  std::string s(text);
  s.erase(std::remove_if(s.begin(), s.end(), [](char c) { return c == ' ' || c == '_'; }), s.end());
  size_t end = 0;
  double number = 0;
  try {
    number = std::stod(s, &end);
  } catch (...) {
    end = 0;
  }
  std::string unit = s.substr(end);
  std::transform(unit.begin(), unit.end(), unit.begin(), [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  });
  if (unit.size() > 1 && (unit.ends_with("ib") || unit.ends_with("b"))) {
    unit.erase(unit.size() - (unit.ends_with("ib") ? 2 : 1));
  } else if (unit == "b") {
    unit.clear();
  }
  const std::string units = "kmgt";
  double scale = 1;
  if (unit.size() == 1 && units.find(unit[0]) != std::string::npos) {
    scale = std::pow(1024.0, static_cast<double>(units.find(unit[0]) + 1));
  } else if (!unit.empty()) {
    end = 0;
  }
  const double bytes = number * scale;
  if (end == 0 || !std::isfinite(bytes) || bytes < 1 || bytes > 1e18) {
    return util::InvalidArgumentError(fmt::format(
        "'{}' is not a size in bytes above 0 (a number, or one with K, M, G or T: 12GiB, 512M)",
        text));
  }
  return static_cast<uint64_t>(bytes);
}

util::StatusOr<std::vector<LocalModelFile>> LocalModelFiles(const Env& env, const ServeFlags& f,
                                                            util::Logger& log) {
  std::vector<LocalModelFile> files;
  auto stem = [](const std::string& path) { return std::filesystem::path(path).stem().string(); };
  bool first_named = false;  // the default model has a name of its own (-m NAME=FILE)
  for (const std::string& arg : f.model) {
    LocalModelFile file;
    const size_t eq = arg.find('=');
    // NAME=FILE when what comes before '=' is a name (a path has '/' or ends .gguf).
    if (eq != std::string::npos && arg.find('/') > eq && !arg.substr(0, eq).ends_with(".gguf")) {
      file.name = arg.substr(0, eq);
      file.path = arg.substr(eq + 1);
      if (files.empty()) first_named = true;
      if (!ValidModelName(file.name)) {
        return util::InvalidArgumentError(
            fmt::format("-m '{}': the model name must be 1 to 256 letters, digits or -_.:@", arg));
      }
    } else {
      file.path = arg;
      file.name = stem(arg);
    }
    if (file.path.empty()) {
      return util::InvalidArgumentError(fmt::format("-m '{}' names no file", arg));
    }
    files.push_back(std::move(file));
  }
  if (!f.models_dir.empty()) {
    auto entries = env.fs->ListDir(f.models_dir);
    if (!entries.ok()) {
      return util::InvalidArgumentError(
          fmt::format("--models '{}': {}", f.models_dir, entries.status().message()));
    }
    std::vector<std::string> names = std::move(entries).value();
    std::sort(names.begin(), names.end());
    size_t found = 0;
    for (const std::string& entry : names) {
      if (!entry.ends_with(".gguf")) continue;
      ++found;
      files.push_back(
          {.name = stem(entry), .path = (std::filesystem::path(f.models_dir) / entry).string()});
    }
    if (found == 0) {
      return util::InvalidArgumentError(
          fmt::format("--models '{}' holds no .gguf file", f.models_dir));
    }
  }
  if (files.empty() && f.backends.specs.empty()) {
    STRATA_ASSIGN_OR_RETURN(std::string path, ResolveModelPath(env, "", log));
    files.push_back({.name = stem(path), .path = path});
  }
  // --alias names the default model when -m gave it no name of its own.
  if (!files.empty() && !f.aliases.empty() && !first_named) files.front().name = f.aliases.front();
  return files;
}

util::StatusOr<std::unique_ptr<LocalModels>> LocalModels::Start(
    const Env& env, const ServeFlags& f, std::vector<LocalModelFile> files,
    const LocalModelOptions& options, gateway::RtControl* rt, SnapshotServing* snapshots,
    server::HttpServer& srv, obs::MetricsRegistry& metrics, const util::Clock& clock,
    util::Logger& log) {
  std::unique_ptr<LocalModels> lm(new LocalModels());
  lm->clock_ = &clock;
  lm->limits_ = std::make_shared<Limits>();
  lm->limits_->max_tokens_cap = f.max_tokens_cap;
  lm->limits_->max_embedding_inputs = f.max_embedding_inputs;
  STRATA_ASSIGN_OR_RETURN(const uint64_t budget, ModelsBudget(env, f, log));
  STRATA_ASSIGN_OR_RETURN(
      lm->residency_, backend::ModelResidency::Create(
                          {.budget_bytes = budget, .max_wait = std::chrono::seconds(f.timeout_s)},
                          metrics, clock, log));
  STRATA_ASSIGN_OR_RETURN(const std::optional<engine::Topology> topology,
                          NumaTopology(env, f, util::AllowedCpus(), log));
  std::vector<engine::PlacementModel> stages;  // with a topology: each model's, in order
  std::vector<std::shared_ptr<LoaderState>> states;
  // One model loads before the server opens, as several do with --preload.
  const bool load_at_start = f.preload || files.size() == 1;
  for (LocalModelFile& file : files) {
    // A sentence encoder (bert, nomic-bert) is small and serves embeddings
    // only: it loads now and stays loaded, outside the residency budget's
    // decoders.
    STRATA_ASSIGN_OR_RETURN(bool is_encoder, IsEncoderFile(env, file));
    if (is_encoder) {
      STRATA_RETURN_IF_ERROR(lm->AddEncoder(env, f, file, log));
      continue;
    }
    // Opened once to learn what the backend answers without the weights.
    // Packed when it loads to serve (LoadModel), after its warm-up.
    auto opened = model::Model::Load(
        *env.fs, file.path, {.prefetch = load_at_start, .pack = {.mode = model::PackMode::kOff}},
        log);
    if (!opened.ok()) {
      return util::Status(opened.status().code(),
                          fmt::format("model '{}': {}", file.name, opened.status().message()));
    }
    const model::ModelConfig& config = (*opened)->config();
    const engine::EngineOptions eo = EngineOptionsFor(f, config);
    backend::ModelSpec spec{.name = file.name,
                            .path = file.path,
                            .fingerprint = (*opened)->fingerprint(),
                            .n_ctx = eo.n_ctx,
                            .bytes = ModelResidentBytes(config, eo)};
    if (snapshots != nullptr) {
      AddLocalModel(*snapshots, env, file.name, file.path, **opened, f.chat_format,
                    f.prompt_special_tokens, std::min(f.max_tokens_cap, eo.n_ctx),
                    std::string(kernels::TypeName(eo.kv_type)), f.repack, log);
    }
    auto state = std::make_shared<LoaderState>();
    state->env = &env;
    state->flags = f;
    state->file = file;
    state->options = options;
    state->rt = rt;
    state->srv = &srv;
    state->metrics = &metrics;
    state->clock = &clock;
    state->log = &log;
    state->limits = lm->limits_;
    if (topology) {
      auto layout = ModelLayoutOf((*opened)->gguf(), file.name, eo.n_kv_blocks * eo.block_size);
      if (!layout.ok()) return layout.status();
      stages.push_back(std::move(layout->placement));
    }
    if (load_at_start) state->opened = std::move(opened).value();
    states.push_back(state);
    auto added = lm->residency_->Add(spec, [state] { return LoadModel(*state); });
    if (!added.ok()) return added.status();
    lm->specs_.push_back(std::move(spec));
  }
  for (const backend::ModelSpec& s : lm->specs_) lm->n_ctx_ = std::max(lm->n_ctx_, s.n_ctx);
  for (const auto& e : lm->encoders_) lm->n_ctx_ = std::max(lm->n_ctx_, e.backend->n_ctx());
  if (topology) {
    const std::vector<std::optional<engine::ModelPlacement>> placed =
        PlanModels(*topology, stages, log);
    for (size_t i = 0; i < placed.size(); ++i) {
      if (!placed[i]) continue;
      // Set before any load: the loader reads it on the loading thread.
      states[i]->topology = topology;
      states[i]->placement = *placed[i];
      log.Info("model '{}' on NUMA nodes: {}", stages[i].name,
               DescribePlacement(*topology, stages[i], *placed[i]));
    }
  }
  if (!load_at_start) return lm;
  for (size_t i = 0; i < lm->specs_.size(); ++i) {
    const backend::ModelSpec& s = lm->specs_[i];
    if (lm->residency_->resident_bytes() + s.bytes > budget) {
      log.Warn(
          "--preload: model '{}' ({:.0f} MiB) does not fit beside those loaded before it "
          "in --models-memory {:.0f} MiB; it loads on its first request",
          s.name, MiB(s.bytes), MiB(budget));
      states[i]->opened.reset();  // its first load maps it again
      continue;
    }
    STRATA_RETURN_IF_ERROR(lm->residency_->Load(static_cast<int32_t>(i)));
  }
  return lm;
}

LocalModels::~LocalModels() = default;

util::StatusOr<bool> LocalModels::IsEncoderFile(const Env& env, const LocalModelFile& file) {
  auto gguf = format::GgufFile::Open(*env.fs, file.path);
  if (!gguf.ok()) {
    return util::Status(gguf.status().code(),
                        fmt::format("model '{}': {}", file.name, gguf.status().message()));
  }
  auto arch = (*gguf)->GetStringOr("general.architecture", "");
  return arch.ok() &&
         (model::Encoder::IsEncoderArchitecture(*arch) || *arch == model::kHashEncoderArchitecture);
}

util::Status LocalModels::AddEncoder(const Env& env, const ServeFlags& f,
                                     const LocalModelFile& file, util::Logger& log) {
  auto named = [&](const util::Status& st) {
    return util::Status(st.code(), fmt::format("model '{}': {}", file.name, st.message()));
  };
  LoadedEncoder e;
  e.path = file.path;
  const backend::EncoderBackendOptions options{
      .name = file.name, .threads = f.threads, .max_embedding_inputs = f.max_embedding_inputs};
  auto gguf = format::GgufFile::Open(*env.fs, file.path);
  if (!gguf.ok()) return named(gguf.status());
  if (model::IsHashEncoderFile(**gguf)) {
    auto hash = model::HashEncoder::FromGguf(**gguf, log);
    if (!hash.ok()) return named(hash.status());
    e.hash = std::move(hash).value();
    e.backend = std::make_unique<backend::EncoderBackend>(*e.hash, options);
  } else {
    auto encoder = model::Encoder::FromGguf(std::move(gguf).value(), log);
    if (!encoder.ok()) return named(encoder.status());
    e.encoder = std::move(encoder).value();
    e.backend = std::make_unique<backend::EncoderBackend>(*e.encoder, options);
  }
  encoders_.push_back(std::move(e));
  return util::OkStatus();
}

std::vector<backend::Backend*> LocalModels::backends() const {
  std::vector<backend::Backend*> out;
  for (int32_t i = 0; i < residency_->size(); ++i) out.push_back(residency_->backend(i));
  for (const auto& e : encoders_) out.push_back(e.backend.get());
  return out;
}

util::Status LocalModels::SetLimits(int32_t max_tokens_cap, int32_t max_embedding_inputs) {
  if (max_tokens_cap < 1 || max_embedding_inputs < 1 || max_embedding_inputs > 65536) {
    return util::InvalidArgumentError(
        fmt::format("max_tokens_cap {} or max_embedding_inputs {} is out of range", max_tokens_cap,
                    max_embedding_inputs));
  }
  limits_->max_tokens_cap = max_tokens_cap;
  limits_->max_embedding_inputs = max_embedding_inputs;
  for (const auto& e : encoders_) e.backend->SetMaxEmbeddingInputs(max_embedding_inputs);
  util::Status status;
  residency_->ForEachResident([&](backend::LoadedModel& m) {
    auto& local = static_cast<backend::LocalBackend&>(m.backend());
    const util::Status st =
        local.SetLimits(std::min(max_tokens_cap, local.n_ctx()), max_embedding_inputs);
    if (status.ok()) status = st;
  });
  return status;
}

bool LocalModels::Drain(std::chrono::milliseconds grace) {
  return residency_->Drain(clock_->Now() + grace);
}

std::vector<std::string> LocalModels::Describe() const {
  std::vector<std::string> lines;
  const auto stats = residency_->Stats();
  for (size_t i = 0; i < specs_.size(); ++i) {
    lines.push_back(fmt::format("model '{}'{}: {}, context {}, {:.0f} MiB resident{}",
                                specs_[i].name, i == 0 ? " (default)" : "", specs_[i].path,
                                specs_[i].n_ctx, MiB(stats[i].bytes),
                                stats[i].resident ? "" : " when loaded (loads on first use)"));
  }
  for (size_t i = 0; i < encoders_.size(); ++i) {
    const LoadedEncoder& e = encoders_[i];
    const std::string what =
        e.encoder
            ? fmt::format("{} encoder, {} dimensions, context {}, {:.0f} MiB",
                          e.encoder->config().architecture, e.encoder->config().n_embd,
                          e.encoder->config().n_ctx_train, MiB(e.encoder->config().weight_bytes))
            : fmt::format("hash encoder, {} dimensions", e.hash->config().dim);
    lines.push_back(fmt::format("model '{}'{}: {}, {} (embeddings only)", e.backend->name(),
                                specs_.empty() && i == 0 ? " (default)" : "", e.path, what));
  }
  return lines;
}

}  // namespace strata::cli
