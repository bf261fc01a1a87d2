// Invalidation (Gateway::Invalidate, DELETE /v1/cache): which stored answers
// and prefix blocks go, in every tier, and how other instances hear of it.
#include <fmt/format.h>

#include "gateway/gateway.h"
#include "gateway/internal/response_tiers.h"
#include "gateway/invalidation_message.h"

namespace strata::gateway {

std::string PromptText(const CompletionRequest& r) {
  if (r.prompt) return *r.prompt;
  std::string out;
  for (size_t i = 0; i < r.messages.size(); ++i) {
    if (i > 0) out += '\n';
    out += r.messages[i].content;
  }
  return out;
}

bool ResponseTiers::Selector::Selects(const StoredResponse& v) const {
  const AnswerOrigin& o = v.origin();
  if (tenant && o.tenant != *tenant) return false;
  if (model && o.model != *model) return false;
  if (fingerprint && o.fingerprint != *fingerprint) return false;
  if (prefix && !o.prompt.starts_with(*prefix)) return false;
  return true;
}

ResponseTiers::Removed ResponseTiers::Invalidate(const Selector& sel, bool shared,
                                                 std::chrono::steady_clock::time_point deadline) {
  invalidations_.fetch_add(1);
  Removed out;
  auto selects = [&sel](const cache::CachedValue* v) {
    return v != nullptr && sel.Selects(static_cast<const StoredResponse&>(*v));
  };
  if (l1_) {
    if (sel.key) {
      out.l1 = l1_->Erase(*sel.key) ? 1 : 0;
    } else {
      out.l1 = l1_->EraseIf(
          [&](const cache::CacheKey&, const cache::CachedValue& v) { return selects(&v); });
    }
  }
  // L3 and semantic entries carry the L1 key's hash as their payload.
  auto entry_selected = [&](uint64_t payload, const cache::CachedValue* v) {
    return (!sel.key || payload == sel.key->hash) && selects(v);
  };
  if (l3_) {
    out.l3 = l3_->EraseIf([&](std::string_view, uint64_t payload, const cache::CachedValue* v) {
      return entry_selected(payload, v);
    });
  }
  if (semantic_) {
    out.semantic =
        semantic_->EraseIf([&](std::string_view, uint64_t payload, const cache::CachedValue* v) {
          return entry_selected(payload, v);
        });
  }
  if (shared && shared_) {
    cache::SharedInvalidation what;
    what.tenant = sel.tenant;
    what.model = sel.fingerprint;
    what.key = sel.key;
    if (sel.key && sel.near) {
      what.near.emplace(sel.near->scope,
                        std::shared_ptr<const cache::NearDupText>(sel.near, &sel.near->text));
    }
    if (!sel.key && (sel.model || sel.prefix)) {
      what.match = [&](const cache::CachedValue& v) { return selects(&v); };
    }
    auto done = shared_->Invalidate(what, deadline);
    if (done.ok()) {
      out.shared = done->entries;
    } else {
      out.warnings.push_back(done.status().message());
    }
  }
  return out;
}

namespace {

std::string Describe(const ResponseTiers::Selector& s) {
  std::string out;
  auto add = [&out](std::string_view name, std::string_view value) {
    out += fmt::format("{}{}={}", out.empty() ? "" : " ", name, value);
  };
  if (s.tenant) add("tenant", *s.tenant);
  if (s.model) add("model", *s.model);
  if (s.fingerprint) add("model_version", fmt::format("{:016x}", *s.fingerprint));
  // The prefix and the request hold prompt text: only their sizes are logged.
  if (s.prefix) add("prompt_prefix", fmt::format("({} bytes)", s.prefix->size()));
  if (s.key) add("request", fmt::format("{:016x}", s.key->hash));
  return out;
}

}  // namespace

// Deadline for the Redis scan and the engines' turn at the prefix blocks.
constexpr std::chrono::seconds kInvalidationDeadline{30};

util::StatusOr<InvalidationReport> Gateway::Invalidate(const Invalidation& what) {
  if (!what.tenant && !what.model && !what.model_version && !what.prompt_prefix && !what.request) {
    return util::InvalidArgumentError(
        "an invalidation needs at least one of tenant, model, model_version, prompt_prefix or "
        "request");
  }
  if (what.prompt_prefix && what.prompt_prefix->empty()) {
    return util::InvalidFieldError("prompt_prefix", "'prompt_prefix' must not be empty");
  }
  if (what.tenant && what.tenant->empty()) {
    return util::InvalidFieldError("tenant", "'tenant' must not be empty");
  }
  ResponseTiers::Selector sel;
  sel.tenant = what.tenant;
  sel.fingerprint = what.model_version;
  sel.prefix = what.prompt_prefix;
  std::vector<backend::Backend*> targets;  // whose prefix blocks go
  if (what.model) {
    backend::Backend* b = Find(*what.model);
    if (b == nullptr || what.model->empty()) {
      return util::NotFoundError(fmt::format("model '{}' is not served", *what.model))
          .WithReason(util::ErrorReason::kModelNotFound);
    }
    sel.model = b->name();
    targets.push_back(b);
  } else {
    targets = backends_;
  }
  backend::PrefixInvalidation l2;
  l2.tenant = what.tenant;
  l2.text_prefix = what.prompt_prefix;
  std::optional<std::vector<int32_t>> exact_tokens;
  if (what.request) {
    const CompletionRequest& r = *what.request;
    backend::Backend* b = Find(r.model);
    if (b == nullptr) {
      return util::NotFoundError(fmt::format("model '{}' does not exist", r.model))
          .WithReason(util::ErrorReason::kModelNotFound);
    }
    if (sel.model && *sel.model != b->name()) {
      return util::InvalidFieldError(
          "model",
          fmt::format("'model' is '{}' but the request is for '{}'", *sel.model, b->name()));
    }
    STRATA_RETURN_IF_ERROR(Validate(r, *live_.load()->current));
    STRATA_ASSIGN_OR_RETURN(std::shared_ptr<const backend::Prepared> p, b->Prepare(r));
    sel.key = tiers_->KeyOf(r, *b, *p);
    sel.near = tiers_->NearViewOf(r, *b, *p);
    sel.tenant = r.tenant;
    sel.model = b->name();
    sel.fingerprint = b->fingerprint();  // the key holds it; Redis needs it for the entry's name
    targets = {b};
    l2.tenant = r.tenant;
    if (!p->tokens.empty()) {
      l2.prompt = p->tokens;
      exact_tokens = p->tokens;
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + kInvalidationDeadline;
  ResponseTiers::Removed removed = tiers_->Invalidate(sel, /*shared=*/true, deadline);
  InvalidationReport report{.l1 = removed.l1,
                            .l3 = removed.l3,
                            .semantic = removed.semantic,
                            .l2_blocks = 0,
                            .shared = removed.shared,
                            .warnings = std::move(removed.warnings)};
  // An exact request on a remote backend has no prefix blocks here.
  if (!what.request || exact_tokens) {
    for (backend::Backend* b : targets) {
      if (sel.fingerprint && b->fingerprint() != *sel.fingerprint) continue;
      auto n = b->ForgetPrefixes(l2, std::chrono::duration_cast<std::chrono::milliseconds>(
                                         deadline - std::chrono::steady_clock::now()));
      if (n.ok()) {
        report.l2_blocks += static_cast<uint64_t>(*n);
      } else {
        report.warnings.push_back(fmt::format("model '{}': prefix blocks not invalidated: {}",
                                              b->name(), n.status().message()));
      }
    }
  }
  if (cache::SharedFeed* feed = tiers_->feed()) {
    util::Status told = feed->Announce(EncodeInvalidationMessage({.tenant = sel.tenant,
                                                                  .model = sel.model,
                                                                  .fingerprint = sel.fingerprint,
                                                                  .prefix = sel.prefix,
                                                                  .key = sel.key,
                                                                  .prompt_tokens = exact_tokens,
                                                                  .reason = what.reason}));
    if (!told.ok()) report.warnings.push_back(told.message());
  }
  CountInvalidation(report);
  log_.Info("cache invalidated ({}; reason: {}): l1={} l3={} semantic={} l2_blocks={} shared={}{}",
            Describe(sel), what.reason.empty() ? "none given" : what.reason, report.l1, report.l3,
            report.semantic, report.l2_blocks, report.shared,
            report.warnings.empty() ? "" : fmt::format(" ({} warnings)", report.warnings.size()));
  for (const std::string& w : report.warnings) log_.Warn("cache invalidation: {}", w);
  return report;
}

void Gateway::ApplyRemoteInvalidation(std::string_view message) {
  auto m = DecodeInvalidationMessage(message);
  if (!m.ok()) {
    log_.Warn("an invalidation from another instance was not understood: {}", m.status().message());
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + kInvalidationDeadline;
  // Redis was cleaned by the instance that took the request: local tiers only.
  ResponseTiers::Selector sel;
  sel.tenant = m->tenant;
  sel.model = m->model;
  sel.fingerprint = m->fingerprint;
  sel.prefix = m->prefix;
  sel.key = m->key;
  ResponseTiers::Removed removed = tiers_->Invalidate(sel, /*shared=*/false, deadline);
  InvalidationReport report{.l1 = removed.l1,
                            .l3 = removed.l3,
                            .semantic = removed.semantic,
                            .l2_blocks = 0,
                            .shared = 0,
                            .warnings = {}};
  backend::PrefixInvalidation l2;
  l2.tenant = m->tenant;
  l2.text_prefix = m->prefix;
  l2.prompt = m->prompt_tokens;
  const bool exact = m->key.has_value();
  if (!exact || m->prompt_tokens) {
    for (backend::Backend* b : backends_) {
      if (m->model && b->name() != *m->model) continue;
      if (m->fingerprint && b->fingerprint() != *m->fingerprint) continue;
      auto n = b->ForgetPrefixes(l2, std::chrono::duration_cast<std::chrono::milliseconds>(
                                         deadline - std::chrono::steady_clock::now()));
      if (n.ok()) report.l2_blocks += static_cast<uint64_t>(*n);
    }
  }
  CountInvalidation(report);
  log_.Info(
      "cache invalidated by another instance ({}; reason: {}): l1={} l3={} semantic={} "
      "l2_blocks={}",
      Describe(sel), m->reason.empty() ? "none given" : m->reason, report.l1, report.l3,
      report.semantic, report.l2_blocks);
}

void Gateway::CountInvalidation(const InvalidationReport& r) {
  invalidation_requests_->Inc();
  invalidated_[0]->Inc(static_cast<double>(r.l1));
  invalidated_[1]->Inc(static_cast<double>(r.l3));
  invalidated_[2]->Inc(static_cast<double>(r.semantic));
  invalidated_[3]->Inc(static_cast<double>(r.l2_blocks));
  invalidated_[4]->Inc(static_cast<double>(r.shared));
}

}  // namespace strata::gateway
