// The admin API's cache invalidation body (DELETE /v1/cache).
#include "server/cache_admin.h"

#include <charconv>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "server/api.h"

namespace strata::server {

util::StatusOr<gateway::Invalidation> ParseInvalidationBody(std::string_view body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return util::InvalidArgumentError(
        "the body must be a JSON object naming what to invalidate: tenant, model, "
        "model_version, prompt_prefix or request");
  }
  gateway::Invalidation out;
  auto text = [&](const char* name) -> util::StatusOr<std::optional<std::string>> {
    if (!j.contains(name)) return std::optional<std::string>();
    if (!j[name].is_string()) {
      return util::InvalidFieldError(name, fmt::format("'{}' must be a string", name));
    }
    return std::optional<std::string>(j[name].get<std::string>());
  };
  for (const auto& [key, value] : j.items()) {
    if (key != "tenant" && key != "model" && key != "model_version" && key != "prompt_prefix" &&
        key != "request" && key != "reason") {
      return util::InvalidFieldError(
          key, fmt::format("unknown field '{}': DELETE /v1/cache takes tenant, model, "
                           "model_version, prompt_prefix, request and reason",
                           key));
    }
  }
  STRATA_ASSIGN_OR_RETURN(out.tenant, text("tenant"));
  STRATA_ASSIGN_OR_RETURN(out.model, text("model"));
  STRATA_ASSIGN_OR_RETURN(out.prompt_prefix, text("prompt_prefix"));
  STRATA_ASSIGN_OR_RETURN(std::optional<std::string> reason, text("reason"));
  out.reason = reason.value_or("");
  if (out.reason.size() > 256) {
    return util::InvalidFieldError("reason", "'reason' is longer than 256 bytes");
  }
  STRATA_ASSIGN_OR_RETURN(std::optional<std::string> version, text("model_version"));
  if (version) {
    uint64_t v = 0;
    const auto r = std::from_chars(version->data(), version->data() + version->size(), v, 16);
    if (version->size() != 16 || r.ec != std::errc() ||
        r.ptr != version->data() + version->size()) {
      return util::InvalidFieldError(
          "model_version",
          "'model_version' must be 16 hex digits (a model's fingerprint, as "
          "GET /v1/models and the logs print it)");
    }
    out.model_version = v;
  }
  if (j.contains("request")) {
    const nlohmann::json& r = j["request"];
    if (!r.is_object() || (r.contains("messages") == r.contains("prompt"))) {
      return util::InvalidFieldError(
          "request",
          "'request' must be a chat completion body (with 'messages') or a "
          "completion body (with 'prompt')");
    }
    const ApiKind kind = r.contains("messages") ? ApiKind::kOpenAIChat : ApiKind::kOpenAICompletion;
    auto parsed = ParseRequest(kind, r.dump());
    if (!parsed.ok()) {
      return util::InvalidFieldError(
          "request", fmt::format("'request' is not a request strata would serve: {}",
                                 parsed.status().message()));
    }
    if (!parsed->more_prompts.empty()) {
      return util::InvalidFieldError("request", "'request' must have a single prompt");
    }
    gateway::CompletionRequest req = std::move(parsed->request);
    req.tenant = out.tenant.value_or("default");
    req.model = parsed->model;
    out.request = std::move(req);
  }
  return out;
}

}  // namespace strata::server
