// Request snapshots in the HTTP server (server/snapshots.h).
#include "server/snapshots.h"

#include <algorithm>

#include <fmt/format.h>

#include "server/internal/wire.h"

namespace strata::server {

SnapshotRecorder::SnapshotRecorder(SnapshotOptions options) : options_(std::move(options)) {
  STRATA_CHECK_MSG(options_.store != nullptr, "a snapshot recorder needs a store");
}

void SnapshotRecorder::AddModel(const std::string& name, SnapshotModel model) {
  std::lock_guard<std::mutex> lock(mu_);
  options_.models[name] = std::move(model);
}

bool SnapshotRecorder::Records(std::string_view tenant) const {
  return options_.tenants.empty() || std::find(options_.tenants.begin(), options_.tenants.end(),
                                               tenant) != options_.tenants.end();
}

bool SnapshotRecorder::Record(SnapshotRecord record) const {
  record.strata_version = options_.strata_version;
  if (record.backend.kind == "local") {
    std::lock_guard<std::mutex> lock(mu_);
    if (const auto m = options_.models.find(record.backend.name); m != options_.models.end()) {
      record.backend.model_path = m->second.path;
      record.backend.chat_format = m->second.chat_format;
      record.backend.prompt_special_tokens = m->second.prompt_special_tokens;
      record.backend.max_tokens_cap = m->second.max_tokens_cap;
      record.backend.kv_type = m->second.kv_type;
      record.backend.repack = m->second.repack;
      if (m->second.digest) record.backend.model_sha256 = m->second.digest->hex().value_or("");
    }
  }
  obs::SnapshotMeta meta{
      .tenant = record.tenant, .request_id = record.request_id, .created_ms = record.created_ms};
  const size_t bytes = EstimateSnapshotBytes(record);
  // Encoded on the store's writer thread, not on the I/O thread that got here.
  auto shared = std::make_shared<const SnapshotRecord>(std::move(record));
  return options_.store->Put(std::move(meta), bytes,
                             [shared] { return EncodeSnapshotRecord(*shared); });
}

util::StatusOr<std::string> SnapshotRecorder::Read(const std::string& tenant,
                                                   const std::string& request_id) const {
  STRATA_ASSIGN_OR_RETURN(obs::OpenedSnapshot opened, options_.store->Get(tenant, request_id));
  // The record is strata's own, authenticated: it parses. The operator-only
  // fields are left out of what a tenant sees.
  auto j = wire::ParseJson(opened.plaintext);
  if (!j.ok()) return util::DataLossError("the snapshot's record is not JSON");
  if (auto b = j->find("backend"); b != j->end() && b->is_object()) {
    if (auto m = b->find("model"); m != b->end() && m->is_object()) m->erase("path");
  }
  if (auto c = j->find("choices"); c != j->end() && c->is_array()) {
    for (auto& choice : *c) {
      if (choice.is_object()) choice.erase("replica");
    }
  }
  return wire::Dump(*j);
}

}  // namespace strata::server
