#include "gateway/internal/near_dup_request.h"

#include <fmt/format.h>

#include "util/hash.h"

namespace strata::gateway {

void AppendSamplingParams(cache::CacheKeyBuilder& b, const sampling::SamplingParams& p) {
  // Every field of SamplingParams goes in: a parameter left out would let two
  // requests that differ only in it share an answer. This assertion fails
  // when the struct changes size, so whoever adds a field sees this list (a
  // field hiding in padding would slip past it).
  static_assert(sizeof(sampling::SamplingParams) == 88,
                "SamplingParams changed: add the new field to the cache keys below");
  b.F32(p.temperature).I32(p.top_k).F32(p.top_p).F32(p.min_p);
  b.F32(p.presence_penalty).F32(p.frequency_penalty).F32(p.repetition_penalty);
  b.U64(p.seed).F32(p.typical_p).F32(p.target_entropy).F32(p.entropy_tail_nats);
  b.Bool(p.mirostat).F32(p.mirostat_tau_bits).F32(p.mirostat_eta);
  b.I64(static_cast<int64_t>(p.logit_bias.size()));
  for (const auto& [id, bias] : p.logit_bias) b.I32(id).F32(bias);
}

std::optional<NearDupRequest> MakeNearDupRequest(const CompletionRequest& r, uint64_t fingerprint,
                                                 const std::vector<std::string>& stops,
                                                 const cache::PrepareOptions& prepare,
                                                 bool remote) {
  constexpr uint64_t kScopeVersion = 1;  // bump when the meaning of any field changes
  cache::CacheKeyBuilder b(r.tenant);
  b.U64(kScopeVersion).U64(fingerprint);
  std::string_view text;
  if (!r.prompt_ids.empty()) return std::nullopt;  // token ids: no text to compare
  // Tool flows are exact or nothing: a near-duplicate tool call is a wrong one.
  if (!r.tools.empty()) return std::nullopt;
  for (const auto& m : r.messages) {
    if (m.role == "tool" || !m.tool_calls.empty()) return std::nullopt;
  }
  if (r.prompt) {
    b.Str("completion");
    text = *r.prompt;
  } else {
    if (r.messages.empty()) return std::nullopt;
    b.Str("chat").I64(static_cast<int64_t>(r.messages.size()));
    for (size_t i = 0; i + 1 < r.messages.size(); ++i) {
      b.Str(r.messages[i].role).Str(r.messages[i].content);
    }
    b.Str(r.messages.back().role);
    text = r.messages.back().content;
  }
  b.I32(r.max_tokens.value_or(-1)).I32(r.n).I32(r.top_logprobs).Bool(r.ignore_eos);
  b.I32(static_cast<int32_t>(r.response_format));
  // The schema and the grammar decide the text (absent: the key as before).
  if (r.response_format == ResponseFormat::kJsonSchema) {
    b.Str(r.json_schema.name).Str(r.json_schema.description).Str(r.json_schema.schema);
    b.Bool(r.json_schema.strict);
  }
  if (!r.grammar.empty()) b.Str("grammar").Str(r.grammar);
  b.I64(static_cast<int64_t>(stops.size())).I64(static_cast<int64_t>(r.stop.size()));
  for (const std::string& s : stops) b.Str(s);
  AppendSamplingParams(b, r.sampling);
  if (remote) {
    const backend::SamplingFieldsSet& set = r.sampling_set;
    b.Str("remote").Bool(set.temperature).Bool(set.top_p).Bool(set.top_k).Bool(set.min_p);
    b.Bool(set.presence_penalty).Bool(set.frequency_penalty).Bool(set.repetition_penalty);
    b.Bool(set.seed).Bool(set.strata_sampler).Bool(set.logit_bias);
    b.I64(static_cast<int64_t>(r.cache_breakpoints.size()));
    for (int32_t i : r.cache_breakpoints) b.I32(i);
  }
  const cache::CacheKey scope_key = b.Build();

  auto prepared = cache::PrepareNearDupText(text, prepare);
  if (!prepared.ok()) return std::nullopt;
  NearDupRequest out;
  out.tenant = r.tenant;
  // Two independent 64-bit hashes of the full scope bytes.
  out.scope = fmt::format("{:016x}{:016x}", scope_key.hash,
                          util::Hash64(scope_key.bytes, 0x4c33'7363'6f70'6532ULL));
  out.ns = cache::NearDupNamespace(r.tenant, out.scope);
  out.text = std::move(prepared).value();
  out.raw = std::string(text);
  return out;
}

}  // namespace strata::gateway
