#include "cli/serve_semantic.h"

#include <fmt/format.h>

#include <sstream>

#include "model/default_encoder.h"

namespace strata::cli {

void RegisterSemanticFlags(CLI::App& cmd, SemanticFlags& f) {
  cmd.add_option("--semantic", f.mode,
                 "Answers of similar meaning (L4/L5): off; opt-in = only requests with "
                 "\"cache\": {\"semantic\": true} and tenants in --semantic-tenants; on = every "
                 "request that does not refuse")
      ->capture_default_str();
  cmd.add_option("--semantic-tenants", f.tenants,
                 "Comma-separated tenants that get semantic answers without asking (with "
                 "--semantic opt-in)");
  cmd.add_option("--encoder", f.encoder,
                 "What embeds request texts for --semantic: builtin (strata's own encoder, "
                 "built into the binary; the default), FILE.gguf (a bert or nomic-bert sentence "
                 "encoder, or a strata-hash file), backend:NAME (a served model's "
                 "/v1/embeddings), or model (the default model's pooled hidden states)");
  cmd.add_option("--semantic-similarity", f.similarity,
                 "Least cosine similarity of the vectors for a semantic answer (tau5)")
      ->capture_default_str();
  cmd.add_option("--semantic-entries", f.entries, "Entries the semantic tier holds")
      ->capture_default_str();
  cmd.add_option("--semantic-ttl", f.ttl_s,
                 "Seconds a semantic entry lives (jittered as --l1-ttl-jitter)")
      ->capture_default_str();
  cmd.add_option("--semantic-ann", f.ann,
                 "Nearest-neighbour index of large namespaces: hnsw, ivf, lsh or flat")
      ->capture_default_str();
  cmd.add_option("--semantic-max-false-hit", f.max_false_hit,
                 "Bound on the verified false-hit rate: the threshold served at is learned from "
                 "sampled would-be hits that are generated anyway and compared")
      ->capture_default_str();
  cmd.add_option("--semantic-verify", f.verify,
                 "Share of would-be semantic hits verified once the threshold is learned (all "
                 "of them before); 0 turns verification off")
      ->capture_default_str();
  cmd.add_option("--semantic-verify-min", f.verify_min,
                 "Verified would-be hits needed before the learned threshold is trusted")
      ->capture_default_str();
  cmd.add_option("--semantic-hit-floor", f.hit_floor,
                 "When the share of semantic lookups answered over --semantic-hit-window falls "
                 "below this, the tier re-learns its threshold from recent checks and retrains "
                 "its nearest-neighbour lists; 0 = never")
      ->capture_default_str();
  cmd.add_option("--semantic-hit-window", f.hit_window,
                 "Semantic lookups per hit-rate window (--semantic-hit-floor)")
      ->capture_default_str();
  cmd.add_option("--semantic-file", f.file,
                 "Save the semantic tier here at shutdown and load it at start (the same "
                 "encoder's entries only)");
  cmd.add_option("--semantic-encode-timeout-ms", f.encode_timeout_ms,
                 "Milliseconds a request waits for its text's vector before it goes on without "
                 "the semantic tier")
      ->capture_default_str();
}

util::Status ApplySemanticFlags(const SemanticFlags& f, double ttl_jitter, uint64_t seed,
                                gateway::GatewayOptions& go) {
  const auto mode = gateway::ParseL3Mode(f.mode);
  if (!mode) {
    return util::InvalidArgumentError(
        fmt::format("--semantic '{}' is not off, opt-in or on", f.mode));
  }
  const auto ann = cache::ParseAnnKind(f.ann);
  if (!ann) {
    return util::InvalidArgumentError(
        fmt::format("--semantic-ann '{}' is not hnsw, ivf, lsh or flat", f.ann));
  }
  cache::SemanticOptions o;
  if (!(f.similarity > o.coarse_similarity && f.similarity <= 1)) {
    return util::InvalidArgumentError(fmt::format("--semantic-similarity {} is outside ({}, 1]",
                                                  f.similarity, o.coarse_similarity));
  }
  if (f.entries < 1 || f.entries > (uint64_t{1} << 26)) {
    return util::InvalidArgumentError(
        fmt::format("--semantic-entries {} is outside [1, 2^26]", f.entries));
  }
  if (!(f.ttl_s >= 1 && f.ttl_s <= 30 * 86400)) {
    return util::InvalidArgumentError(
        fmt::format("--semantic-ttl {} is outside [1, 2592000] seconds", f.ttl_s));
  }
  if (f.encode_timeout_ms < 1 || f.encode_timeout_ms > 60000) {
    return util::InvalidArgumentError(
        fmt::format("--semantic-encode-timeout-ms {} is outside [1, 60000]", f.encode_timeout_ms));
  }
  go.semantic_mode = *mode;
  go.semantic_tenants.clear();
  std::stringstream ss(f.tenants);
  for (std::string t; std::getline(ss, t, ',');) {
    if (!t.empty()) go.semantic_tenants.push_back(t);
  }
  o.dim = go.semantic.dim;  // StartEncoder's, when it has run
  o.min_similarity = f.similarity;
  o.max_entries = static_cast<size_t>(f.entries);
  o.ttl = std::chrono::seconds(static_cast<int64_t>(f.ttl_s));
  o.ttl_jitter = ttl_jitter;
  o.ann = *ann;
  go.semantic = o;
  go.semantic_encode_timeout = std::chrono::milliseconds(f.encode_timeout_ms);
  go.semantic_verify.max_false_hit = f.max_false_hit;
  go.semantic_verify.verify_share = f.verify;
  go.semantic_verify.min_samples = static_cast<size_t>(f.verify_min);
  go.semantic_verify.window = std::max<size_t>(1000, 4 * go.semantic_verify.min_samples);
  go.semantic_verify.floor = f.similarity;
  if (util::Status st = cache::FalseHitControl::Validate(go.semantic_verify); !st.ok()) {
    return util::InvalidArgumentError(fmt::format(
        "--semantic-max-false-hit / --semantic-verify / --semantic-verify-min: {}", st.message()));
  }
  go.semantic_hit_trigger.floor = f.hit_floor;
  go.semantic_hit_trigger.window = static_cast<size_t>(f.hit_window);
  if (util::Status st = cache::HitRateTrigger::Validate(go.semantic_hit_trigger); !st.ok()) {
    return util::InvalidArgumentError(
        fmt::format("--semantic-hit-floor / --semantic-hit-window: {}", st.message()));
  }
  go.semantic_seed = seed ^ 0x5345'4d41'4e54ULL;
  return util::OkStatus();
}

util::StatusOr<std::unique_ptr<SemanticEncoder>> StartEncoder(
    const Env& env, const SemanticFlags& f, int32_t threads,
    const std::vector<backend::Backend*>& served, gateway::GatewayOptions& go, util::Logger& log) {
  auto out = std::make_unique<SemanticEncoder>();
  if (go.semantic_mode == gateway::L3Mode::kOff) return out;
  backend::Backend* encoder = nullptr;
  const std::string spec = f.encoder.empty() ? "builtin" : f.encoder;
  if (spec == "builtin") {
    auto loaded = model::LoadDefaultEncoder(log);
    if (!loaded.ok()) {
      return util::Status(loaded.status().code(),
                          fmt::format("--encoder builtin: {}", loaded.status().message()));
    }
    out->hash = std::move(loaded).value();
    out->backend = std::make_unique<backend::EncoderBackend>(
        *out->hash, backend::EncoderBackendOptions{
                        .name = "semantic-encoder", .threads = 1, .max_embedding_inputs = 1});
    encoder = out->backend.get();
    out->description = fmt::format("strata's built-in encoder ({})", out->hash->name());
  } else if (spec == "model") {
    if (served.empty()) return util::InvalidArgumentError("--encoder model: no model is served");
    encoder = served.front();
    out->description = fmt::format("the pooled hidden states of model '{}'", encoder->name());
  } else if (spec.rfind("backend:", 0) == 0) {
    const std::string name = spec.substr(8);
    for (backend::Backend* b : served) {
      if (b->name() == name) encoder = b;
    }
    if (encoder == nullptr) {
      return util::InvalidArgumentError(
          fmt::format("--encoder {}: no served model is named '{}'", spec, name));
    }
    out->description =
        fmt::format("the embeddings of served model '{}' ({})", name, encoder->kind());
  } else if (auto g = format::GgufFile::Open(*env.fs, spec);
             g.ok() && model::IsHashEncoderFile(**g)) {
    auto loaded = model::HashEncoder::FromGguf(**g, log);
    if (!loaded.ok()) {
      return util::Status(loaded.status().code(),
                          fmt::format("--encoder {}: {}", spec, loaded.status().message()));
    }
    out->hash = std::move(loaded).value();
    out->backend = std::make_unique<backend::EncoderBackend>(
        *out->hash, backend::EncoderBackendOptions{
                        .name = "semantic-encoder", .threads = 1, .max_embedding_inputs = 1});
    encoder = out->backend.get();
    out->description = fmt::format("{} (strata-hash {})", spec, out->hash->name());
  } else {
    auto loaded = model::Encoder::Load(*env.fs, spec, log);
    if (!loaded.ok()) {
      return util::Status(loaded.status().code(),
                          fmt::format("--encoder {}: {}", spec, loaded.status().message()));
    }
    out->encoder = std::move(loaded).value();
    out->backend = std::make_unique<backend::EncoderBackend>(
        *out->encoder,
        backend::EncoderBackendOptions{
            .name = "semantic-encoder", .threads = threads, .max_embedding_inputs = 1});
    encoder = out->backend.get();
    const model::EncoderConfig& c = out->encoder->config();
    out->description =
        fmt::format("{} ({} {}, {} layers)", spec, c.architecture, c.name, c.n_layers);
  }
  // The width, from a probe (a remote encoder answers over the network; a
  // local model may load first).
  backend::EmbeddingRequest probe;
  probe.request_id = "semantic-probe";
  probe.model = encoder->name();
  probe.texts = {"How do I reset my password?"};
  auto v = encoder->Embed(probe, std::chrono::steady_clock::now() + std::chrono::seconds(60));
  if (!v.ok()) {
    return util::Status(
        v.status().code(),
        fmt::format("--encoder {}: the probe embedding failed: {}", spec, v.status().message()));
  }
  if (v->embeddings.size() != 1 || v->embeddings[0].empty() || v->embeddings[0].size() > 8192) {
    return util::InvalidArgumentError(
        fmt::format("--encoder {}: the probe embedding has no usable vector", spec));
  }
  go.semantic.dim = static_cast<int32_t>(v->embeddings[0].size());
  go.semantic_encoder = encoder;
  out->description += fmt::format(", {} dimensions", go.semantic.dim);
  return out;
}

void LoadSemanticFile(const Env& env, const SemanticFlags& f, gateway::Gateway& gw,
                      util::Logger& log) {
  if (f.file.empty() || !gw.semantic_stats() || !env.fs->Exists(f.file)) return;
  auto n = gw.LoadSemantic(*env.fs, f.file);
  if (!n.ok()) {
    log.Warn("semantic tier: {} not loaded ({}); starting empty", f.file, n.status().ToString());
    return;
  }
  log.Info("semantic tier: {} entries loaded from {}", *n, f.file);
}

void SaveSemanticFile(const Env& env, const SemanticFlags& f, const gateway::Gateway& gw,
                      util::Logger& log) {
  if (f.file.empty() || !gw.semantic_stats()) return;
  const util::Status st = gw.SaveSemantic(*env.fs, f.file);
  if (!st.ok()) {
    log.Warn("semantic tier: not saved to {}: {}", f.file, st.ToString());
    return;
  }
  log.Info("semantic tier: {} entries saved to {}", gw.semantic_stats()->entries, f.file);
}

}  // namespace strata::cli
