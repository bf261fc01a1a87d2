// `strata generate`: load a model, stream a continuation of a prompt to stdout.
#include <cstdio>
#include <random>

#include <fmt/format.h>

#include "cli/commands.h"
#include "engine/engine.h"
#include "engine/step_loop.h"
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
  std::string kv_type = "f16";
  std::string repack = "auto";  // row-interleaved weights: auto | on | off
  bool no_echo = false;
  std::string log_level = "warn";
};

// Streams one generation to stdout as its tokens come, choosing greedily at
// temperature 0 and with a seeded sampler otherwise. Runs on the thread that
// steps the loop (the main thread).
class StreamSink final : public engine::RequestSink {
 public:
  StreamSink(const text::Tokenizer& tok, const sampling::SamplingParams& p)
      : greedy_(p.temperature == 0.0f), sampler_(p), detok_(tok) {}
  util::StatusOr<int32_t> Choose(std::span<const float> logits) override {
    return greedy_ ? engine::GreedyToken(logits) : sampler_.Sample(logits);
  }
  bool OnToken(int32_t id) override {
    const std::string text = detok_.Push(id);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;
  }
  void OnFinish(engine::FinishReason, const util::Status& status, const engine::Usage&) override {
    status_ = status;
  }
  // The bytes held back for an unfinished character (after the last token).
  std::string Flush() { return detok_.Finish(); }
  const util::Status& status() const { return status_; }

 private:
  const bool greedy_;
  sampling::Sampler sampler_;
  text::Detokenizer detok_;
  util::Status status_;
};

// Runs `prompt` to the end on the calling thread: prefill in chunks of up
// to 512 tokens, then one token per step (with -n 0 the prompt is only
// evaluated). OutOfRange when the prompt and the tokens asked for do not fit
// the context; otherwise what the request's sink finished with. Returns the
// loop's counters (tokens, and prefill and decode time).
util::StatusOr<engine::StepCounters> Generate(engine::Engine& engine, std::vector<int32_t> prompt,
                                              int32_t n_predict, std::shared_ptr<StreamSink> sink,
                                              const util::Clock& clock, util::Logger& log) {
  const int64_t need = static_cast<int64_t>(prompt.size()) + n_predict;
  if (need > engine.n_ctx()) {
    return util::OutOfRangeError(fmt::format(
        "context length exceeded: {} prompt + {} generated tokens do not fit the context of {} "
        "(--ctx)",
        prompt.size(), n_predict, engine.n_ctx()));
  }
  STRATA_ASSIGN_OR_RETURN(
      auto loop, engine::StepLoop::Create(engine, {.max_batch_tokens = 512, .clock = &clock}, log));
  engine::SchedulerRequest req;
  req.prompt = std::move(prompt);
  req.max_tokens = n_predict;
  req.embed = n_predict == 0;  // evaluate the prompt only
  req.sink = sink;
  STRATA_RETURN_IF_ERROR(loop->Submit(std::move(req)).status());
  loop->RunUntilIdle(/*max_running=*/1);
  STRATA_RETURN_IF_ERROR(sink->status());
  return loop->counters();
}

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

  const util::StatusOr<kernels::TensorType> parsed_kv = engine::ParseKvType(f.kv_type);
  if (!parsed_kv.ok()) return UsageError("--kv-type: " + parsed_kv.status().message());
  const kernels::TensorType kv_type = *parsed_kv;
  const util::StatusOr<model::PackMode> repack = model::ParsePackMode(f.repack);
  if (!repack.ok()) return UsageError("--repack: " + repack.status().message());
  auto log = MakeLogger(f.log_level);
  auto path = ResolveModelPath(env, f.model, *log);
  if (!path.ok()) return ReportError(path.status());
  const util::Clock& clock = util::RealClock();
  const auto t_load = clock.Now();
  auto model = model::Model::Load(
      *env.fs, *path,
      {.prefetch = true, .pack = {.mode = *repack, .threads = f.threads, .clock = &clock}}, *log);
  if (!model.ok()) return ReportError(model.status());
  const double load_s = util::SecondsBetween(t_load, clock.Now());

  engine::EngineOptions eo;
  eo.n_threads = f.threads;
  eo.n_ctx = f.ctx;
  eo.kv_type = kv_type;
  auto eng = engine::Engine::Create(**model, eo, *log);
  if (!eng.ok()) return ReportError(eng.status());

  const text::Tokenizer& tok = (*model)->tokenizer();
  std::vector<int32_t> prompt = tok.Encode(f.prompt, {.add_special = true, .parse_special = false});
  if (prompt.empty()) return UsageError("the prompt encodes to no tokens; give a prompt");
  if (!f.no_echo) {
    std::fwrite(f.prompt.data(), 1, f.prompt.size(), stdout);
    std::fflush(stdout);
  }

  auto sink = std::make_shared<StreamSink>(tok, sp);
  const auto stats = Generate(**eng, std::move(prompt), f.n_predict, sink, clock, *log);
  const std::string tail = sink->Flush();
  std::fwrite(tail.data(), 1, tail.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!stats.ok()) return ReportError(stats.status());

  auto rate = [](int64_t n, double s) { return s > 0 ? static_cast<double>(n) / s : 0.0; };
  std::fprintf(stderr,
               "\nstrata: model load %.1f ms | prompt %lld tokens in %.1f ms (%.1f t/s) | "
               "generation %lld tokens in %.1f ms (%.1f t/s) | %s kernels, %d threads, seed %llu\n",
               load_s * 1e3, static_cast<long long>(stats->prompt_tokens),
               stats->prefill_seconds * 1e3, rate(stats->prompt_tokens, stats->prefill_seconds),
               static_cast<long long>(stats->generated_tokens), stats->decode_seconds * 1e3,
               rate(stats->generated_tokens - 1, stats->decode_seconds),
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
  cmd->add_option("--kv-type", f->kv_type, "KV cache element type: f32, f16 or q8_0")
      ->capture_default_str();
  cmd->add_option("--repack", f->repack,
                  "Store weight matrices row-interleaved at load: auto (the types this CPU's "
                  "kernels run faster packed), on or off")
      ->capture_default_str();
  cmd->add_option("-c,--ctx", f->ctx, "Context size in tokens; 0 = the model's")
      ->capture_default_str();
  cmd->add_flag("--no-echo", f->no_echo, "Do not print the prompt before the continuation");
  cmd->add_option("--log-level", f->log_level, "debug, info, warn, error or off")
      ->capture_default_str();
  return {cmd, [f](const Env& env) { return RunGenerate(env, *f); }};
}

}  // namespace strata::cli
