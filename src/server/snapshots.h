// server/snapshots.h — request snapshots as the HTTP server records and
// serves them (`strata serve --snapshots DIR`).
//
// Promise: with a SnapshotRecorder in ServerOptions::snapshots, every
// generation request (chat, completions, messages; streamed or not) of a
// recorded tenant whose every choice finished without error is recorded
// once its last event has been read: the request as parsed, each prompt as
// the backend prepared it, the backend and model identity, the cache
// outcome, and the answer with each choice's seed and token ids
// (server/snapshot_record.h). Recording never delays or fails a response:
// the record goes to the store's bounded queue and is encrypted and written
// on the store's thread, or dropped and counted (obs/snapshot_store.h).
// Failed and cancelled requests and embeddings are not recorded. A later
// request with the same X-Request-ID from the same tenant replaces the
// snapshot.
//
// Read is GET /v1/snapshots/{request_id}: the caller's own tenant's snapshot
// as JSON, without the operator-only fields (the model file's path, the
// remote replica's URL); another tenant's, an expired or an unknown id are
// all the same NotFound.
//
// Threading: thread-safe (Record on the I/O thread that reads a response's
// last event, Read on a worker). The store and digests are borrowed and
// must outlive the recorder.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "obs/digest.h"
#include "obs/snapshot_store.h"
#include "server/snapshot_record.h"
#include "util/status.h"

namespace strata::server {

// What a snapshot says about a local model (by backend name).
struct SnapshotModel {
  std::string path = {};  // the served GGUF file
  // Its SHA-256, computed in the background; a snapshot taken before it is
  // done has none (replay then checks the fingerprint only).
  std::shared_ptr<const obs::FileDigest> digest = {};
  std::string chat_format = {};  // --chat-format ("" = the model's own template)
  bool prompt_special_tokens = false;
  int32_t max_tokens_cap = 0;
  std::string kv_type = {};  // --kv-type as the engine names it ("F16")
  std::string repack = {};   // --repack ("auto", "on", "off")
};

struct SnapshotOptions {
  obs::SnapshotStore* store = nullptr;               // borrowed; required
  std::vector<std::string> tenants = {};             // recorded tenants; empty = every tenant
  std::map<std::string, SnapshotModel> models = {};  // the local backends, by model id
  std::string strata_version = {};                   // "0.1.0"
};

class SnapshotRecorder {
 public:
  explicit SnapshotRecorder(SnapshotOptions options);

  // Adds (or replaces) what snapshots say of the local model served as
  // `name`: `strata serve` adds it once the model is loaded.
  void AddModel(const std::string& name, SnapshotModel model);
  // Whether requests of `tenant` are recorded.
  bool Records(std::string_view tenant) const;
  // Adds the local model's facts (path, SHA-256, rendering settings) and
  // the version, and queues the record; false when the store dropped it.
  bool Record(SnapshotRecord record) const;
  // The snapshot of `request_id` of `tenant` as the read API returns it:
  // NotFound (absent, another tenant's, expired), DataLoss (failed
  // authentication) or the store's error. Blocking file I/O.
  util::StatusOr<std::string> Read(const std::string& tenant, const std::string& request_id) const;

 private:
  mutable std::mutex mu_;
  SnapshotOptions options_;  // guarded by mu_ (models; the rest is fixed)
};

}  // namespace strata::server
