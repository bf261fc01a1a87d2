// `strata embed`: sentence vectors of texts from a sentence encoder: a
// BERT-family GGUF, a strata-hash GGUF, or the built-in one.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "format/gguf.h"
#include "model/default_encoder.h"
#include "model/encoder.h"
#include "model/hash_encoder.h"
#include "util/thread_pool.h"

namespace strata::cli {
namespace {

struct EmbedFlags {
  std::string model;
  std::vector<std::string> texts;
  std::string file;  // one text per line
  int32_t threads = 0;
  bool similarity = false;
  std::string log_level = "warn";
};

int RunEmbed(const Env& env, const EmbedFlags& f) {
  std::vector<std::string> texts = f.texts;
  if (!f.file.empty()) {
    auto content = env.fs->ReadFile(f.file);
    if (!content.ok()) return ReportError(content.status());
    size_t start = 0;
    const std::string& c = *content;
    while (start < c.size()) {
      size_t end = c.find('\n', start);
      if (end == std::string::npos) end = c.size();
      texts.push_back(c.substr(start, end - start));
      start = end + 1;
    }
  }
  if (texts.empty()) return UsageError("give texts to embed, or --file FILE (one per line)");
  auto log = MakeLogger(f.log_level);
  auto gguf = f.model == "builtin"
                  ? format::GgufFile::ParseBytes(model::DefaultEncoderGguf(), "built-in encoder")
                  : format::GgufFile::Open(*env.fs, f.model);
  if (!gguf.ok()) return ReportError(gguf.status());
  std::vector<std::vector<float>> vectors;
  nlohmann::json out = nlohmann::json::array();
  if (model::IsHashEncoderFile(**gguf)) {
    // Hashed n-grams: no tokens, nothing to cut.
    auto enc = model::HashEncoder::FromGguf(**gguf, *log);
    if (!enc.ok()) return ReportError(enc.status());
    for (const std::string& t : texts) {
      std::vector<float> v = (*enc)->Embed(t);
      out.push_back({{"text", t}, {"embedding", v}});
      vectors.push_back(std::move(v));
    }
  } else {
    auto enc = model::Encoder::FromGguf(std::move(gguf).value(), *log);
    if (!enc.ok()) return ReportError(enc.status());
    const int threads = f.threads > 0
                            ? f.threads
                            : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    util::ThreadPool pool(threads);
    for (const std::string& t : texts) {
      auto e = (*enc)->Embed(t, pool);
      if (!e.ok()) return ReportError(e.status());
      if (e->truncated)
        log->Warn("text cut to the encoder's {} tokens", (*enc)->config().n_ctx_train);
      out.push_back({{"text", t}, {"tokens", e->n_tokens}, {"embedding", e->vector}});
      vectors.push_back(std::move(e->vector));
    }
  }
  if (f.similarity) {
    // Cosine similarity of every pair (the vectors are unit length).
    for (size_t i = 0; i < vectors.size(); ++i) {
      nlohmann::json row = nlohmann::json::array();
      for (size_t j = 0; j < vectors.size(); ++j) {
        double dot = 0.0;
        for (size_t k = 0; k < vectors[i].size(); ++k) dot += vectors[i][k] * vectors[j][k];
        row.push_back(dot);
      }
      out[i]["similarity"] = row;
    }
  }
  std::fputs((out.dump() + "\n").c_str(), stdout);
  return kExitOk;
}

}  // namespace

Command RegisterEmbed(CLI::App& app) {
  auto f = std::make_shared<EmbedFlags>();
  CLI::App* cmd = app.add_subcommand(
      "embed",
      "Sentence vectors of texts from a sentence encoder (bert, nomic-bert, strata-hash, or "
      "strata's built-in one)");
  cmd->add_option("-m,--model", f->model, "Encoder GGUF file, or builtin")->required();
  cmd->add_option("texts", f->texts, "Texts to embed");
  cmd->add_option("-f,--file", f->file, "Also embed each line of FILE");
  cmd->add_flag("--similarity", f->similarity, "Add each text's cosine similarity to every text");
  cmd->add_option("-t,--threads", f->threads, "Threads; 0 = all cores");
  cmd->add_option("--log-level", f->log_level, "debug, info, warn, error or off")
      ->capture_default_str();
  cmd->footer(
      "Prints a JSON array: one {text, tokens, embedding} object per text (a strata-hash "
      "encoder has no tokens); embeddings are unit length, pooled as the file says (mean or "
      "CLS).");
  return {cmd, [f](const Env& env) { return RunEmbed(env, *f); }};
}

}  // namespace strata::cli
