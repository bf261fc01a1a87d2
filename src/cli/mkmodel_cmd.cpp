// `strata mkmodel`: write a random-weight GGUF of a realistic shape.
#include <cstdio>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "cli/commands.h"
#include "format/gguf.h"
#include "model/synthetic.h"
#include "util/clock.h"

namespace strata::cli {
namespace {

struct MkModelFlags {
  std::string shape;
  std::string dims;
  std::string type = "f32";
  std::string vocab;
  bool byte_tokens_as_text = false;
  std::string out;
  std::string name;
  uint64_t seed = 42;
  int32_t ctx = 0;
  int32_t threads = 0;
  std::string log_level = "info";
};

// "n_embd=2048,n_layers=22,n_heads=32,n_kv_heads=4,n_ff=5632[,arch=qwen2][,tied=0]"
util::StatusOr<model::SyntheticShape> ParseDims(const std::string& text) {
  model::SyntheticShape s;
  std::stringstream ss(text);
  std::string item;
  int seen = 0;
  while (std::getline(ss, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      return util::InvalidArgumentError(fmt::format("--dims: '{}' is not key=value", item));
    }
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "arch") {
      s.architecture = value;
      continue;
    }
    int64_t v = 0;
    try {
      size_t used = 0;
      v = std::stoll(value, &used);
      if (used != value.size()) throw std::invalid_argument(value);
    } catch (const std::exception&) {
      return util::InvalidArgumentError(fmt::format("--dims: {}={} is not an integer", key, value));
    }
    if (v < 0 || v > (1 << 20)) {
      return util::InvalidArgumentError(fmt::format("--dims: {}={} is out of range", key, v));
    }
    const auto i = static_cast<int32_t>(v);
    const std::pair<const char*, int32_t*> fields[] = {
        {"n_embd", &s.n_embd},         {"n_layers", &s.n_layers}, {"n_heads", &s.n_heads},
        {"n_kv_heads", &s.n_kv_heads}, {"n_ff", &s.n_ff},         {"n_ctx", &s.n_ctx}};
    bool known = false;
    for (const auto& [name, field] : fields) {
      if (key == name) {
        *field = i;
        known = true;
      }
    }
    if (key == "tied") {
      s.tied_embeddings = i != 0;
      known = true;
    }
    if (!known) return util::InvalidArgumentError(fmt::format("--dims: unknown key '{}'", key));
    seen |= key == "n_embd"     ? 1
            : key == "n_layers" ? 2
            : key == "n_heads"  ? 4
            : key == "n_ff"     ? 8
                                : 0;
  }
  if (seen != 15) {
    return util::InvalidArgumentError("--dims needs at least n_embd, n_layers, n_heads and n_ff");
  }
  if (text.find("n_kv_heads") == std::string::npos) s.n_kv_heads = s.n_heads;
  return s;
}

int RunMkModel(const Env& env, const MkModelFlags& f) {
  if (f.shape.empty() == f.dims.empty())
    return UsageError("give exactly one of --shape and --dims");
  if (f.out.empty()) return UsageError("-o OUT.gguf is required");
  model::SyntheticOptions o;
  if (!f.shape.empty()) {
    auto s = model::NamedShape(f.shape);
    if (!s) {
      std::string names;
      for (const auto& n : model::NamedShapeNames()) names += (names.empty() ? "" : ", ") + n;
      return UsageError(fmt::format("unknown --shape '{}' (known: {})", f.shape, names));
    }
    o.shape = *s;
  } else {
    auto s = ParseDims(f.dims);
    if (!s.ok()) return UsageError(s.status().message());
    o.shape = *s;
  }
  if (f.ctx < 0) return UsageError("--ctx must be >= 0");
  if (f.ctx > 0) o.shape.n_ctx = f.ctx;
  auto spec = model::ParseTypeSpec(f.type);
  if (!spec) {
    return UsageError(fmt::format(
        "--type '{}' is not one strata can write (f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, "
        "q4_k_m, q5_k_m)",
        f.type));
  }
  o.type = spec->first;
  o.mix = spec->second;
  o.seed = f.seed;
  o.name = f.name.empty()
               ? fmt::format("strata-synthetic {} {}", f.shape.empty() ? "custom" : f.shape, f.type)
               : f.name;
  auto log = MakeLogger(f.log_level);
  std::unique_ptr<format::GgufFile> vocab;
  if (f.byte_tokens_as_text && f.vocab.empty()) {
    return ReportError(util::InvalidArgumentError("--byte-tokens-as-text needs --vocab"));
  }
  if (!f.vocab.empty()) {
    auto v = format::GgufFile::Open(*env.fs, f.vocab);
    if (!v.ok()) return ReportError(v.status());
    vocab = std::move(v).value();
    o.vocab = vocab.get();
    o.byte_tokens_as_text = f.byte_tokens_as_text;
  } else if (f.shape != "demo" && f.shape != "" && o.shape.architecture != "bert" &&
             o.shape.architecture != "nomic-bert") {
    log->Warn(
        "no --vocab: using the small built-in vocabulary, so the output head is far smaller "
        "than a real model's; give e.g. --vocab ../shared/models/vocab/ggml-vocab-llama-spm.gguf");
  }
  const int threads = f.threads > 0
                          ? f.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  util::ThreadPool pool(threads);
  o.pool = &pool;
  const auto t0 = util::RealClock().Now();
  util::Status st = model::WriteSyntheticModel(*env.fs, f.out, o, *log);
  if (!st.ok()) return ReportError(st);
  auto size = env.fs->FileSize(f.out);
  log->Info("wrote {} ({:.1f} MiB) in {:.1f} s", f.out,
            size.ok() ? static_cast<double>(*size) / (1024.0 * 1024.0) : 0.0,
            util::SecondsBetween(t0, util::RealClock().Now()));
  return kExitOk;
}

}  // namespace

Command RegisterMkModel(CLI::App& app) {
  auto f = std::make_shared<MkModelFlags>();
  CLI::App* cmd = app.add_subcommand(
      "mkmodel", "Write a random-weight GGUF model of a realistic shape (for benchmarks)");
  cmd->add_option("--shape", f->shape,
                  "Named shape: demo, llama-100m, llama-1b, qwen2-0.5b; encoders: bge-small, "
                  "minilm-l6, nomic-embed");
  cmd->add_option("--dims", f->dims,
                  "Custom shape: n_embd=..,n_layers=..,n_heads=..,n_ff=..[,n_kv_heads=..]"
                  "[,n_ctx=..][,arch=llama|qwen2|bert|nomic-bert][,tied=0|1]");
  cmd->add_option("--type", f->type, "f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, q4_k_m, q5_k_m")
      ->capture_default_str();
  cmd->add_option("--vocab", f->vocab,
                  "Copy the tokenizer from this GGUF (e.g. a vocab-only file)");
  cmd->add_flag("--byte-tokens-as-text", f->byte_tokens_as_text,
                "Give the vocabulary's <0xNN> byte tokens the normal type, so random weights only "
                "ever produce valid UTF-8 text (for comparisons with servers that reject "
                "invalid UTF-8)");
  cmd->add_option("-o,--output", f->out, "Output GGUF file")->required();
  cmd->add_option("--seed", f->seed, "Seed of the random weights")->capture_default_str();
  cmd->add_option("--ctx", f->ctx, "Training context length to record; 0 = the shape's");
  cmd->add_option("--name", f->name, "general.name of the model");
  cmd->add_option("-t,--threads", f->threads, "Threads that encode rows; 0 = all cores");
  cmd->add_option("--log-level", f->log_level, "debug, info, warn, error or off")
      ->capture_default_str();
  return {cmd, [f](const Env& env) { return RunMkModel(env, *f); }};
}

}  // namespace strata::cli
