// `strata generate`: load a model, stream a continuation of a prompt to stdout.
#include <cstdio>
#include <random>

#include <fmt/format.h>

#include "cli/commands.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "model/transformer.h"
#include "sampling/sampler.h"
#include "util/clock.h"

namespace strata::cli {
namespace {

struct GenerateFlags {
  std::string model;
  std::string prompt = "Once upon a time";
  int32_t n_predict = 64;
  float temperature = 0.8f;
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  int64_t seed = -1;
  int32_t threads = 2;
  int32_t ctx = 0;
  bool no_echo = false;
  std::string log_level = "warn";
};

// Adapts a sampling::Sampler to the engine's TokenChooser.
class SamplerChooser final : public engine::TokenChooser {
 public:
  explicit SamplerChooser(const sampling::SamplingParams& p) : sampler_(p) {}
  util::StatusOr<int32_t> Choose(size_t, std::span<const float> logits) override {
    return sampler_.Sample(logits);
  }

 private:
  sampling::Sampler sampler_;
};

int RunGenerate(const Env& env, const GenerateFlags& f) {
  if (f.n_predict < 0) return UsageError(fmt::format("-n {} must be >= 0", f.n_predict));
  if (f.threads < 1 || f.threads > 256) {
    return UsageError(fmt::format("-t {} is outside [1, 256]", f.threads));
  }
  if (f.ctx < 0) return UsageError(fmt::format("--ctx {} must be >= 0", f.ctx));
  sampling::SamplingParams sp;
  sp.temperature = f.temperature;
  sp.top_k = f.top_k;
  sp.top_p = f.top_p;
  sp.min_p = f.min_p;
  sp.seed = f.seed >= 0 ? static_cast<uint64_t>(f.seed) : std::random_device{}();
  if (util::Status st = sampling::Validate(sp); !st.ok()) return UsageError(st.message());

  auto log = MakeLogger(f.log_level);
  auto path = ResolveModelPath(env, f.model, *log);
  if (!path.ok()) return ReportError(path.status());
  const util::Clock& clock = util::RealClock();
  const auto t_load = clock.Now();
  auto model = model::Model::Load(*env.fs, *path, {}, *log);
  if (!model.ok()) return ReportError(model.status());
  const double load_s = util::SecondsBetween(t_load, clock.Now());

  engine::EngineOptions eo;
  eo.n_threads = f.threads;
  eo.n_ctx = f.ctx;
  auto eng = engine::Engine::Create(**model, eo, *log);
  if (!eng.ok()) return ReportError(eng.status());

  const text::Tokenizer& tok = (*model)->tokenizer();
  engine::GenerationRequest req;
  req.prompt = tok.Encode(f.prompt, {.add_special = true, .parse_special = false});
  req.max_tokens = f.n_predict;
  if (req.prompt.empty()) return UsageError("the prompt encodes to no tokens; give a prompt");
  if (!f.no_echo) {
    std::fwrite(f.prompt.data(), 1, f.prompt.size(), stdout);
    std::fflush(stdout);
  }

  text::Detokenizer detok(tok);
  auto on_token = [&](size_t, int32_t id) {
    const std::string text = detok.Push(id);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;
  };
  std::unique_ptr<engine::TokenChooser> chooser;
  if (sp.temperature == 0.0f) {
    chooser = std::make_unique<engine::GreedyChooser>();
  } else {
    chooser = std::make_unique<SamplerChooser>(sp);
  }
  engine::GenerationStats stats;
  auto results =
      engine::GenerateAll(**eng, std::span(&req, 1), *chooser, on_token, {}, clock, &stats);
  const std::string tail = detok.Finish();
  std::fwrite(tail.data(), 1, tail.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!results.ok()) return ReportError(results.status());

  auto rate = [](int64_t n, double s) { return s > 0 ? static_cast<double>(n) / s : 0.0; };
  std::fprintf(stderr,
               "\nstrata: model load %.1f ms | prompt %lld tokens in %.1f ms (%.1f t/s) | "
               "generation %lld tokens in %.1f ms (%.1f t/s) | %s kernels, %d threads, seed %llu\n",
               load_s * 1e3, static_cast<long long>(stats.prompt_tokens),
               stats.prompt_seconds * 1e3, rate(stats.prompt_tokens, stats.prompt_seconds),
               static_cast<long long>(stats.generated_tokens), stats.decode_seconds * 1e3,
               rate(stats.generated_tokens - 1, stats.decode_seconds),
               std::string(kernels::IsaName((*eng)->kernels().isa)).c_str(), f.threads,
               static_cast<unsigned long long>(sp.seed));
  return kExitOk;
}

}  // namespace

Command RegisterGenerate(CLI::App& app) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate a continuation of a prompt");
  cmd->add_option("-m,--model", f->model,
                  "GGUF model file (default: $STRATA_MODEL, ../shared/models/stories260K.gguf, or "
                  "a random-weight demo model)");
  cmd->add_option("-p,--prompt", f->prompt, "Prompt text")->capture_default_str();
  cmd->add_option("-n,--n-predict", f->n_predict, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temp", f->temperature, "Temperature; 0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", f->top_k, "Top-k; 0 = off")->capture_default_str();
  cmd->add_option("--top-p", f->top_p, "Top-p (nucleus); 1 = off")->capture_default_str();
  cmd->add_option("--min-p", f->min_p, "Min-p; 0 = off")->capture_default_str();
  cmd->add_option("-s,--seed", f->seed, "Random seed; -1 = random (printed at the end)")
      ->capture_default_str();
  cmd->add_option("-t,--threads", f->threads, "Threads")->capture_default_str();
  cmd->add_option("-c,--ctx", f->ctx, "Context size in tokens; 0 = the model's")
      ->capture_default_str();
  cmd->add_flag("--no-echo", f->no_echo, "Do not print the prompt before the continuation");
  cmd->add_option("--log-level", f->log_level, "debug, info, warn, error or off")
      ->capture_default_str();
  return {cmd, [f](const Env& env) { return RunGenerate(env, *f); }};
}

}  // namespace strata::cli
