// `strata train-encoder`: trains strata's default sentence encoder (a hash
// encoder, model/hash_encoder.h) on the Quora Question Pairs training split.
#include <cstdio>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/prompt_sets.h"
#include "model/hash_encoder.h"
#include "model/synthetic.h"

namespace strata::cli {
namespace {

struct TrainEncoderFlags {
  std::string data_dir = "../shared/data/prompts";
  std::string out;
  int32_t dim = 64;
  int32_t buckets_log2 = 13;
  int32_t epochs = 12;
  int32_t batch = 128;
  double learning_rate = 0.01;
  double temperature = 0.05;
  double margin = 0.6;
  double negative_weight = 1.0;
  uint64_t seed = 1;
  std::string type = "q8_0";
  std::string log_level = "info";
};

int RunTrainEncoder(const Env& env, const TrainEncoderFlags& f) {
  if (f.out.empty()) return UsageError("-o OUT.gguf is required");
  const auto type = model::ParseTypeSpec(f.type);
  if (!type ||
      (type->first != kernels::TensorType::kF32 && type->first != kernels::TensorType::kF16 &&
       type->first != kernels::TensorType::kQ8_0)) {
    return UsageError(fmt::format("--type '{}' is not f32, f16 or q8_0", f.type));
  }
  if (f.buckets_log2 < 8 || f.buckets_log2 > 24) {
    return UsageError(fmt::format("--buckets-log2 {} is outside [8, 24]", f.buckets_log2));
  }
  auto log = MakeLogger(f.log_level);
  const std::string dir =
      f.data_dir.empty() || f.data_dir.back() == '/' ? f.data_dir : f.data_dir + "/";
  auto qqp = LoadQqp(*env.fs, dir + "gptcache_similiar_qqp_full.json.tar.gz");
  if (!qqp.ok()) return ReportError(qqp.status());
  // The training split: items 0, 4, 8, ... (QQP's dev split for `strata eval
  // semantic` is items 2, 6, 10, ...; its test split the odd items, as for
  // `strata eval l3`). PAWS and GPTCache's sets stay held out.
  std::vector<model::TrainingPair> pairs;
  size_t positives = 0;
  for (size_t i = 0; i < qqp->size(); i += 4) {
    const Pair& p = (*qqp)[i];
    pairs.push_back({p.a, p.b, p.label});
    positives += p.label == 1;
  }
  log->Info("training on {} QQP pairs ({} paraphrases, {} not): every 4th item", pairs.size(),
            positives, pairs.size() - positives);
  model::HashTrainOptions o;
  o.config.dim = f.dim;
  o.config.buckets = 1 << f.buckets_log2;
  o.epochs = f.epochs;
  o.batch = f.batch;
  o.learning_rate = f.learning_rate;
  o.temperature = f.temperature;
  o.margin = f.margin;
  o.negative_weight = f.negative_weight;
  o.seed = f.seed;
  o.name = fmt::format("strata-hash qqp d{} b2^{} e{}", f.dim, f.buckets_log2, f.epochs);
  auto enc = model::TrainHashEncoder(pairs, o, [&](const model::HashTrainProgress& p) {
    log->Info("epoch {}/{}: loss {:.4f} ({:.1f} s)", p.epoch, p.epochs, p.loss, p.seconds);
  });
  if (!enc.ok()) return ReportError(enc.status());
  util::Status st = (*enc)->Write(*env.fs, f.out, type->first);
  if (!st.ok()) return ReportError(st);
  auto size = env.fs->FileSize(f.out);
  log->Info("wrote {} ({:.1f} MiB, fingerprint {:016x})", f.out,
            size.ok() ? static_cast<double>(*size) / (1 << 20) : 0.0, (*enc)->fingerprint());
  return kExitOk;
}

}  // namespace

Command RegisterTrainEncoder(CLI::App& app) {
  auto f = std::make_shared<TrainEncoderFlags>();
  CLI::App* cmd = app.add_subcommand(
      "train-encoder",
      "Train strata's default sentence encoder (hashed word and character n-grams) on the "
      "Quora Question Pairs training split");
  cmd->add_option("--data", f->data_dir, "Directory of the prompt sets")->capture_default_str();
  cmd->add_option("-o,--output", f->out, "Output GGUF file")->required();
  cmd->add_option("--dim", f->dim, "Vector width")->capture_default_str();
  cmd->add_option("--buckets-log2", f->buckets_log2, "log2 of the feature buckets")
      ->capture_default_str();
  cmd->add_option("--epochs", f->epochs, "Passes over the training pairs")->capture_default_str();
  cmd->add_option("--batch", f->batch, "Paraphrase pairs per step (in-batch negatives)")
      ->capture_default_str();
  cmd->add_option("--lr", f->learning_rate, "Adam learning rate")->capture_default_str();
  cmd->add_option("--temperature", f->temperature, "Contrastive softmax temperature")
      ->capture_default_str();
  cmd->add_option("--margin", f->margin, "Non-paraphrase pairs are pushed below this cosine")
      ->capture_default_str();
  cmd->add_option("--negative-weight", f->negative_weight, "Weight of the non-paraphrase hinge")
      ->capture_default_str();
  cmd->add_option("--seed", f->seed, "Initialisation and shuffling seed")->capture_default_str();
  cmd->add_option("--type", f->type, "Table type: f32, f16 or q8_0")->capture_default_str();
  cmd->add_option("--log-level", f->log_level, "debug, info, warn, error or off")
      ->capture_default_str();
  return {cmd, [f](const Env& env) { return RunTrainEncoder(env, *f); }};
}

}  // namespace strata::cli
