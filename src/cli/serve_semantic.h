// cli/serve_semantic.h — the semantic tiers (L4/L5) of `strata serve`: their
// flags, and the encoder that turns request texts into vectors.
//
// Promise: ApplySemanticFlags validates the flags (InvalidArgument naming the
// flag) and fills the semantic part of the gateway's options. StartEncoder
// resolves --encoder — `builtin` (strata's own encoder, built into the
// binary: model/default_encoder.h; the default), FILE.gguf (a bert or
// nomic-bert file, loaded here and run on its own pool, or a strata-hash
// file from `strata train-encoder`), backend:NAME (a served backend's
// /v1/embeddings: a sentence encoder served with -m, or a remote embeddings
// API), or `model` (the default served model's pooled hidden states) —,
// embeds a probe text to learn the vector width, and sets the gateway's
// encoder and width. Errors name the flag and the cause.
//
// Threading: used by the starting thread only; the encoder is then used by
// request threads (EncoderBackend is thread-safe).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "backend/encoder.h"
#include "cli/commands.h"
#include "gateway/gateway.h"
#include "model/encoder.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::cli {

struct SemanticFlags {
  std::string mode = "off";    // off | opt-in | on
  std::string tenants;         // comma-separated: semantic answers by default for these
  std::string encoder;         // builtin | FILE.gguf | backend:NAME | model; "" = builtin
  double similarity = 0.9;     // τ5
  uint64_t entries = 100'000;  // entries over all tenants
  double ttl_s = 600;          // seconds an entry lives (jittered as --l1-ttl-jitter)
  std::string ann = "ivf";     // ivf | hnsw | lsh | flat
  int32_t encode_timeout_ms = 500;
  std::string file;             // the tier is saved here at shutdown and loaded at start; "" = none
  double max_false_hit = 0.01;  // the verified false-hit rate the learned threshold keeps
  double verify = 0.05;         // share of would-be hits verified after warm-up; 0 = off
  uint64_t verify_min = 50;     // verifications before the learned threshold is trusted
  double hit_floor = 0;         // re-learn when the hit rate over a window is below; 0 = off
  uint64_t hit_window = 500;    // lookups per hit-rate window
};

void RegisterSemanticFlags(CLI::App& cmd, SemanticFlags& flags);

// Fills go.semantic_mode, semantic_tenants and go.semantic (all but the
// width, which StartEncoder learns).
util::Status ApplySemanticFlags(const SemanticFlags& flags, double ttl_jitter, uint64_t seed,
                                gateway::GatewayOptions& go);

// The encoder --encoder names, when the tier is on; holds what it loaded.
struct SemanticEncoder {
  std::unique_ptr<model::Encoder> encoder;           // FILE.gguf of a bert or nomic-bert
  std::unique_ptr<model::HashEncoder> hash;          // builtin, or FILE.gguf of a strata-hash
  std::unique_ptr<backend::EncoderBackend> backend;  // builtin and FILE.gguf only
  std::string description;                           // for the start-up log
};

// `served`: the gateway's backends, the default first. With the tier off,
// returns an empty SemanticEncoder and changes nothing.
util::StatusOr<std::unique_ptr<SemanticEncoder>> StartEncoder(
    const Env& env, const SemanticFlags& flags, int32_t threads,
    const std::vector<backend::Backend*>& served, gateway::GatewayOptions& go, util::Logger& log);

// Loads --semantic-file into the gateway's tier when the tier is on and the
// file exists. A damaged file, or one of another encoder's width, is logged
// and the tier starts empty: a cache file never stops the server.
void LoadSemanticFile(const Env& env, const SemanticFlags& flags, gateway::Gateway& gw,
                      util::Logger& log);
// Saves the tier to --semantic-file (logging what failed).
void SaveSemanticFile(const Env& env, const SemanticFlags& flags, const gateway::Gateway& gw,
                      util::Logger& log);

}  // namespace strata::cli
