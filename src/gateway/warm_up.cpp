// Cache warm-up (Gateway::ExportCache, ImportCache): the tiers' entries and
// the local engines' cached prefixes, out of one instance and into another.
#include <algorithm>

#include <fmt/format.h>

#include "gateway/cache_snapshot.h"
#include "gateway/gateway.h"
#include "gateway/internal/response_tiers.h"
#include "gateway/internal/stored_codec.h"

namespace strata::gateway {
namespace {

constexpr size_t kMaxPrefixesPerModel = 4096;
constexpr std::chrono::seconds kWarmUpDeadline{120};

std::optional<int64_t> Millis(std::optional<std::chrono::nanoseconds> left) {
  if (!left) return std::nullopt;
  return std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::milliseconds>(*left).count());
}

}  // namespace

void ResponseTiers::AppendSnapshot(std::vector<CacheSnapshotRecord>& out) const {
  const StoredResponseCodec codec;
  if (l1_) {
    l1_->ForEach([&](const cache::CacheKey& key, const cache::CachedValue& v,
                     std::chrono::nanoseconds left) {
      CacheSnapshotRecord r;
      r.kind = CacheSnapshotRecord::Kind::kL1;
      r.key = key.bytes;
      r.hash = key.hash;
      r.ttl_ms = Millis(left);
      r.value = codec.Encode(v);
      out.push_back(std::move(r));
    });
  }
  if (l3_) {
    l3_->ForEach([&](std::string_view ns, const cache::NearDupText& text, uint64_t payload,
                     const cache::CachedValue* v, std::optional<std::chrono::nanoseconds> left) {
      if (v == nullptr) return;
      CacheSnapshotRecord r;
      r.kind = CacheSnapshotRecord::Kind::kL3;
      r.key = std::string(ns);
      r.hash = payload;
      r.text = cache::EncodeNearDupText(text);
      r.ttl_ms = Millis(left);
      r.value = codec.Encode(*v);
      out.push_back(std::move(r));
    });
  }
  if (semantic_) {
    CacheSnapshotRecord r;
    r.kind = CacheSnapshotRecord::Kind::kSemantic;
    r.value = semantic_->Encode(codec, options_.semantic_encoder->fingerprint());
    out.push_back(std::move(r));
  }
}

void ResponseTiers::ImportSnapshot(const std::vector<CacheSnapshotRecord>& records,
                                   const std::vector<uint64_t>& models, WarmUpReport& report) {
  const StoredResponseCodec codec;
  auto served = [&models](const cache::CachedValue& v) {
    const uint64_t fp = static_cast<const StoredResponse&>(v).origin().fingerprint;
    return std::find(models.begin(), models.end(), fp) != models.end();
  };
  for (const CacheSnapshotRecord& r : records) {
    if (r.kind == CacheSnapshotRecord::Kind::kSemantic) {
      if (!semantic_) continue;
      auto n = semantic_->Decode(r.value, codec, options_.semantic_encoder->fingerprint(),
                                 "the snapshot's semantic tier");
      if (n.ok()) {
        report.semantic += *n;
      } else {
        report.warnings.push_back(std::string(n.status().message()));
      }
      continue;
    }
    if (r.kind != CacheSnapshotRecord::Kind::kL1 && r.kind != CacheSnapshotRecord::Kind::kL3) {
      continue;
    }
    auto value = codec.Decode(r.value);
    if (!value.ok() || !served(**value) || (r.ttl_ms && *r.ttl_ms <= 0)) {
      ++report.skipped;
      continue;
    }
    const auto ttl =
        r.ttl_ms ? std::optional<std::chrono::nanoseconds>(std::chrono::milliseconds(*r.ttl_ms))
                 : std::nullopt;
    if (r.kind == CacheSnapshotRecord::Kind::kL1) {
      if (!l1_) continue;
      cache::CacheKey key{r.key, r.hash};
      // The key's hash is the key's: a snapshot cannot make one key answer
      // for another.
      if (cache::KeyHashOf(key.bytes) != r.hash) {
        ++report.skipped;
        continue;
      }
      if (l1_->Insert(key, *value, std::chrono::nanoseconds::zero(), ttl)) ++report.l1;
    } else {
      if (!l3_) continue;
      auto text = cache::DecodeNearDupText(r.text);
      if (!text.ok()) {
        ++report.skipped;
        continue;
      }
      if (l3_->Insert(r.key, *text, r.hash, *value, ttl).ok()) ++report.l3;
    }
  }
}

util::StatusOr<std::string> Gateway::ExportCache() {
  std::vector<CacheSnapshotRecord> records;
  tiers_->AppendSnapshot(records);
  const auto deadline = std::chrono::steady_clock::now() + kWarmUpDeadline;
  for (backend::Backend* b : backends_) {
    auto prefixes = b->CachedPrefixes(kMaxPrefixesPerModel,
                                      std::chrono::duration_cast<std::chrono::milliseconds>(
                                          deadline - std::chrono::steady_clock::now()));
    if (!prefixes.ok()) {
      log_.Warn("cache export: model '{}': prefixes not exported: {}", b->name(),
                prefixes.status().message());
      continue;
    }
    for (backend::CachedPrefix& p : *prefixes) {
      CacheSnapshotRecord r;
      r.kind = CacheSnapshotRecord::Kind::kL2;
      r.model = b->name();
      r.fingerprint = b->fingerprint();
      r.cache_namespace = p.cache_namespace;
      r.tokens = std::move(p.tokens);
      records.push_back(std::move(r));
    }
  }
  log_.Info("cache exported: {} records", records.size());
  return EncodeCacheSnapshot(records);
}

util::StatusOr<WarmUpReport> Gateway::ImportCache(std::string_view snapshot) {
  STRATA_ASSIGN_OR_RETURN(std::vector<CacheSnapshotRecord> records, DecodeCacheSnapshot(snapshot));
  WarmUpReport report;
  std::vector<uint64_t> models;
  for (const backend::Backend* b : backends_) models.push_back(b->fingerprint());
  tiers_->ImportSnapshot(records, models, report);
  const auto deadline = std::chrono::steady_clock::now() + kWarmUpDeadline;
  for (backend::Backend* b : backends_) {
    std::vector<backend::CachedPrefix> mine;
    for (CacheSnapshotRecord& r : records) {
      if (r.kind != CacheSnapshotRecord::Kind::kL2) continue;
      if (r.model != b->name() || r.fingerprint != b->fingerprint()) continue;
      mine.push_back({r.cache_namespace, std::move(r.tokens)});
    }
    if (mine.empty()) continue;
    auto blocks = b->WarmPrefixes(mine, std::chrono::duration_cast<std::chrono::milliseconds>(
                                            deadline - std::chrono::steady_clock::now()));
    if (blocks.ok()) {
      report.l2_prefixes += mine.size();
      report.l2_blocks += static_cast<uint64_t>(*blocks);
    } else {
      report.warnings.push_back(fmt::format("model '{}': prefixes not computed: {}", b->name(),
                                            blocks.status().message()));
    }
  }
  log_.Info(
      "cache warmed: l1={} l3={} semantic={} l2_prefixes={} l2_blocks={} ({} skipped: another "
      "model version, or expired)",
      report.l1, report.l3, report.semantic, report.l2_prefixes, report.l2_blocks, report.skipped);
  for (const std::string& w : report.warnings) log_.Warn("cache warm-up: {}", w);
  return report;
}

}  // namespace strata::gateway
