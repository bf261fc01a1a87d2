// cli/serve_models.h — the local models of `strata serve`: which files
// (-m FILE or NAME=FILE, repeatable; --models DIR), the memory they may hold
// together (--models-memory), and each model's engine and scheduler, built
// when the model loads and torn down when the residency (backend/
// residency.h) unloads it to make room for another.
//
// Promise: LocalModels::Start opens every file once (a bad file fails the
// start, naming it), learns what its backend answers without the weights
// (fingerprint, context) and what it will hold resident (the weights plus
// its KV pool), and adds it to the residency. A single model, and with
// --preload every model (as many as the budget holds, in order), loads
// before the server opens; otherwise a model loads on its first request.
// Every load maps the file, touches each page of the weights on -t threads
// (the warm-up: no request pays a page fault from disk) and starts the
// engine and scheduler; the file is then watched as before, and a change
// makes the server answer 503 model_changed.
//
// Threading: Start and the accessors on the thread that sets the server up;
// SetLimits on the reload's thread; loads run on the request thread that
// needs the model (backend/residency.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/encoder.h"
#include "backend/residency.h"
#include "cache/eviction_policy.h"
#include "cli/commands.h"
#include "cli/serve_flags.h"
#include "cli/serve_snapshots.h"
#include "engine/placement.h"
#include "gateway/rt_control.h"
#include "model/encoder.h"
#include "obs/metrics.h"
#include "server/server.h"
#include "text/chat_template.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata::cli {

struct LocalModelFile {
  std::string name;  // the id clients use
  std::string path;
};

// The local models the flags name, the default (first) one first: each -m
// in order (NAME=FILE, or FILE named by its stem, the first by --alias when
// given), then every *.gguf in --models DIR by name; with neither, the
// default model (ResolveModelPath) unless --backend serves remote models
// only. InvalidArgument for an empty name or file, a directory that cannot
// be read or holds no model.
util::StatusOr<std::vector<LocalModelFile>> LocalModelFiles(const Env& env, const ServeFlags& f,
                                                            util::Logger& log);

// "12GiB", "512M", "1.5G", "4096": bytes (K, M, G, T with or without "iB"
// or "B" are powers of 1024); InvalidArgument otherwise or at 0.
util::StatusOr<uint64_t> ParseByteSize(std::string_view text);

// The NUMA nodes to place local models on: --topology's, or this machine's
// (read under `root`, /sys/devices/system/node) as far as this process may
// use them — each node's CPUs among `allowed` (ascending), nodes without one dropped;
// nullopt (nothing to place) with --numa off or fewer than two nodes.
// InvalidArgument for a topology file that does not read, or that names a
// CPU outside `allowed`.
util::StatusOr<std::optional<engine::Topology>> NumaTopology(
    const Env& env, const ServeFlags& f, const std::vector<int32_t>& allowed, util::Logger& log,
    const std::string& root = "/sys/devices/system/node");

struct LocalModelOptions {
  cache::PolicyKind l2_policy = cache::PolicyKind::kDualFactor;
  std::optional<text::ChatFormat> chat_format;  // nullopt = each model's own template
};

class LocalModels {
 public:
  // Opens and adds every file, then loads what must be loaded before the
  // server opens. `rt` (may be null), `snapshots` (may be null), `srv`,
  // `metrics`, `clock` and `log` must outlive the LocalModels.
  static util::StatusOr<std::unique_ptr<LocalModels>> Start(
      const Env& env, const ServeFlags& f, std::vector<LocalModelFile> files,
      const LocalModelOptions& options, gateway::RtControl* rt, SnapshotServing* snapshots,
      server::HttpServer& srv, obs::MetricsRegistry& metrics, const util::Clock& clock,
      util::Logger& log);
  ~LocalModels();

  // The models' backends, the default first.
  std::vector<backend::Backend*> backends() const;
  // The default model's context per request.
  int32_t n_ctx() const { return n_ctx_; }
  backend::ModelResidency& residency() { return *residency_; }
  // The summed schedulers (for the prefix-cache metrics).
  engine::SchedulerStats scheduler_stats() const { return residency_->scheduler_stats(); }
  // A reload's caps: applied to the resident models now and to every later
  // load (each model's max_tokens_cap at most its context). InvalidArgument,
  // changing nothing, when out of range.
  util::Status SetLimits(int32_t max_tokens_cap, int32_t max_embedding_inputs);
  // SIGTERM: refuses loads and lets running requests finish until the grace ends.
  bool Drain(std::chrono::milliseconds grace);
  // One line per model for the start-up log.
  std::vector<std::string> Describe() const;

  struct Limits {
    std::atomic<int32_t> max_tokens_cap{4096};
    std::atomic<int32_t> max_embedding_inputs{256};
  };

 private:
  LocalModels() = default;
  // Whether the file is a sentence encoder (general.architecture bert or
  // nomic-bert); errors name the model.
  static util::StatusOr<bool> IsEncoderFile(const Env& env, const LocalModelFile& file);
  util::Status AddEncoder(const Env& env, const ServeFlags& f, const LocalModelFile& file,
                          util::Logger& log);

  struct LoadedEncoder {
    std::string path;
    std::unique_ptr<model::Encoder> encoder;           // bert, nomic-bert
    std::unique_ptr<model::HashEncoder> hash;          // strata-hash
    std::unique_ptr<backend::EncoderBackend> backend;  // borrows one of the two
  };
  std::unique_ptr<backend::ModelResidency> residency_;
  std::vector<backend::ModelSpec> specs_;
  std::vector<LoadedEncoder> encoders_;  // always loaded; after the decoders in backends()
  int32_t n_ctx_ = 0;
  const util::Clock* clock_ = nullptr;
  std::shared_ptr<Limits> limits_;  // shared with the loaders
};

}  // namespace strata::cli
