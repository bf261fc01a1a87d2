// `strata eval semantic`: precision, recall and F1 of the semantic tier's
// similarity (sentence encoders' cosine) beside L3's confirmation score, on
// labelled paraphrase sets held out from `strata train-encoder`'s training.
//
// Splits (the same test splits as `strata eval l3`):
//   PAWS-Wiki: dev = paws_wiki_labeled_final_dev.tsv, test = ..._test.tsv;
//   QQP: dev = items 2, 6, 10, ... (items 0, 4, 8, ... train the default
//        encoder), test = the odd items;
//   GPTCache mock + Arena-Hard clusters (MockPairs): dev = even, test = odd.
// Each scorer's threshold is chosen on the union of the dev splits: the
// lowest at which precision reaches --target-precision. Test precision,
// recall and F1 are reported at it, per dataset and over all three.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/near_dup.h"
#include "cli/commands.h"
#include "cli/prompt_sets.h"
#include "engine/engine.h"
#include "model/default_encoder.h"
#include "model/encoder.h"
#include "model/hash_encoder.h"
#include "model/model.h"
#include "util/thread_pool.h"

namespace strata::cli {
namespace {

// A chat model's mean-pooled final hidden states, L2-normalised: what
// /v1/embeddings serves for a chat model, and so what the semantic tier's
// `--encoder model` compares. One sequence at a time on an engine of its own.
class ChatPooled {
 public:
  static util::StatusOr<std::unique_ptr<ChatPooled>> Load(const Env& env, const std::string& path,
                                                          int32_t threads, util::Logger& log) {
    auto out = std::unique_ptr<ChatPooled>(new ChatPooled());
    STRATA_ASSIGN_OR_RETURN(out->model_, model::Model::Load(*env.fs, path, {}, log));
    engine::EngineOptions eo;
    eo.n_threads = threads;
    eo.n_seq_max = 1;
    eo.n_ctx = std::min<int32_t>(512, out->model_->config().n_ctx_train);
    STRATA_ASSIGN_OR_RETURN(out->engine_, engine::Engine::Create(*out->model_, eo, log));
    return out;
  }
  // Empty when the text has no tokens or the forward pass failed (a cosine
  // of 0 then).
  std::vector<float> Embed(std::string_view text) {
    std::vector<int32_t> ids = model_->tokenizer().Encode(text, {.add_special = true});
    if (ids.size() > static_cast<size_t>(engine_->n_ctx())) ids.resize(engine_->n_ctx());
    if (ids.empty()) return {};
    const engine::SeqId seq = engine_->NewSequence();
    const engine::Engine::Work w{seq, ids, /*logits=*/false, /*hidden=*/true};
    auto stepped = engine_->Step(std::span(&w, 1));
    std::vector<float> mean;
    if (stepped.ok()) {
      const auto hidden = engine_->hidden();
      const size_t d = hidden.size() / ids.size();
      mean.assign(d, 0.0f);
      for (size_t t = 0; t < ids.size(); ++t) {
        for (size_t i = 0; i < d; ++i) mean[i] += hidden[t * d + i];
      }
      double norm = 0;
      for (float x : mean) norm += static_cast<double>(x) * x;
      norm = std::sqrt(norm);
      for (float& x : mean) x = norm > 0 ? static_cast<float>(x / norm) : 0.0f;
    }
    engine_->FreeSequence(seq);
    return mean;
  }

 private:
  ChatPooled() = default;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<engine::Engine> engine_;
};

struct EvalSemanticFlags {
  std::string data_dir = "../shared/data/prompts";
  std::vector<std::string> encoders;  // GGUF files: strata-hash, bert or nomic-bert
  double target_precision = 0.97;
  size_t max_pairs = 0;
  int32_t threads = 0;
  std::string json;
  bool curves = false;
  std::vector<double> at;  // also report every encoder scorer at these thresholds
};

struct Split {
  std::string dataset;
  std::vector<Pair> dev, test;
};

// A scorer: a similarity in [-1, 1] (or [0, 1]) for each pair.
struct Scorer {
  std::string name;
  std::function<double(const Pair&)> score;
  std::optional<double> fixed_threshold;  // also reported at this threshold
};

struct Counts {
  size_t tp = 0, fp = 0, fn = 0, tn = 0;
  double precision() const { return tp + fp ? static_cast<double>(tp) / (tp + fp) : 1.0; }
  double recall() const { return tp + fn ? static_cast<double>(tp) / (tp + fn) : 0.0; }
  double f1() const {
    const double p = precision(), r = recall();
    return p + r > 0 ? 2 * p * r / (p + r) : 0.0;
  }
};

Counts CountAt(const std::vector<double>& s, const std::vector<Pair>& pairs, double t) {
  Counts c;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const bool hit = s[i] >= t;
    if (pairs[i].label == 1) {
      (hit ? c.tp : c.fn) += 1;
    } else {
      (hit ? c.fp : c.tn) += 1;
    }
  }
  return c;
}

// The lowest threshold on a 0.0025 grid whose precision on `s` reaches `target`.
double Choose(const std::vector<double>& s, const std::vector<Pair>& pairs, double target) {
  for (double t = 0.0; t <= 1.0 + 1e-9; t += 0.0025) {
    const Counts c = CountAt(s, pairs, t);
    if (c.tp > 0 && c.precision() >= target) return t;
  }
  return 1.0;
}

double Cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d += static_cast<double>(a[i]) * b[i];
  return d;
}

int RunEvalSemantic(const Env& env, const EvalSemanticFlags& f) {
  if (!(f.target_precision > 0 && f.target_precision <= 1)) {
    return UsageError(fmt::format("--target-precision {} is outside (0, 1]", f.target_precision));
  }
  const std::string dir = f.data_dir + "/";
  auto paws_dev = LoadPaws(*env.fs, dir + "paws_wiki_labeled_final_dev.tsv");
  if (!paws_dev.ok()) return ReportError(paws_dev.status());
  auto paws_test = LoadPaws(*env.fs, dir + "paws_wiki_labeled_final_test.tsv");
  if (!paws_test.ok()) return ReportError(paws_test.status());
  auto qqp = LoadQqp(*env.fs, dir + "gptcache_similiar_qqp_full.json.tar.gz");
  if (!qqp.ok()) return ReportError(qqp.status());
  auto mock = LoadMock(*env.fs, dir + "gptcache_mock_data.json");
  if (!mock.ok()) return ReportError(mock.status());
  auto arena1 = LoadArena(*env.fs, dir + "arena_hard_v0.1_question.jsonl");
  if (!arena1.ok()) return ReportError(arena1.status());

  std::vector<Split> splits(3);
  splits[0] = {"PAWS-Wiki", std::move(*paws_dev), std::move(*paws_test)};
  splits[1].dataset = "QQP";
  for (size_t i = 0; i < qqp->size(); ++i) {
    if (i % 4 == 2) splits[1].dev.push_back((*qqp)[i]);
    if (i % 2 == 1) splits[1].test.push_back((*qqp)[i]);
  }
  splits[2].dataset = "GPTCache mock";
  const std::vector<Pair> mock_pairs = MockPairs(*mock, *arena1);
  for (size_t i = 0; i < mock_pairs.size(); ++i) {
    (i % 2 == 0 ? splits[2].dev : splits[2].test).push_back(mock_pairs[i]);
  }
  for (Split& s : splits) {
    if (f.max_pairs > 0 && s.dev.size() > f.max_pairs) s.dev.resize(f.max_pairs);
    if (f.max_pairs > 0 && s.test.size() > f.max_pairs) s.test.resize(f.max_pairs);
  }

  auto log = MakeLogger("warn");
  const int threads = f.threads > 0
                          ? f.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  util::ThreadPool pool(threads);
  std::vector<Scorer> scorers;
  scorers.push_back({"L3 (weighted LCS + guards)",
                     [](const Pair& p) {
                       auto a = cache::PrepareNearDupText(p.a);
                       auto b = cache::PrepareNearDupText(p.b);
                       if (!a.ok() || !b.ok()) return 0.0;
                       return cache::ScorePair(*a, *b).similarity;
                     },
                     cache::kDefaultNearDupSimilarity});
  // The L5 decision: the cosine, or 0 when the L3 guards reject the pair
  // (numbers, negations, word order, names), as cache::SemanticIndex decides.
  auto guarded = [](std::function<double(const Pair&)> cosine) {
    return [cosine](const Pair& p) {
      auto a = cache::PrepareNearDupText(p.a);
      auto b = cache::PrepareNearDupText(p.b);
      if (a.ok() && b.ok() && cache::ScorePair(*a, *b).rejected_by != cache::Guard::kNone) {
        return 0.0;
      }
      return cosine(p);
    };
  };
  auto add_encoder = [&](const std::string& name, std::function<double(const Pair&)> cosine) {
    scorers.push_back({name + " cosine", cosine, std::nullopt});
    scorers.push_back({name + " + guards", guarded(cosine), std::nullopt});
  };
  std::vector<std::unique_ptr<model::HashEncoder>> hash_encoders;
  std::vector<std::unique_ptr<model::Encoder>> bert_encoders;
  std::vector<std::unique_ptr<ChatPooled>> chat_encoders;
  for (const std::string& path : f.encoders) {
    // The built-in encoder is a strata-hash file in the binary.
    auto g = path == "builtin"
                 ? format::GgufFile::ParseBytes(model::DefaultEncoderGguf(), "built-in encoder")
                 : format::GgufFile::Open(*env.fs, path);
    if (!g.ok()) return ReportError(g.status());
    auto arch = (*g)->GetStringOr("general.architecture", "");
    if (arch.ok() && *arch != model::kHashEncoderArchitecture && *arch != "bert" &&
        *arch != "nomic-bert") {
      // A chat model: its pooled hidden states (--encoder model's fallback).
      auto c = ChatPooled::Load(env, path, f.threads, *log);
      if (!c.ok()) return ReportError(c.status());
      ChatPooled* enc = c->get();
      chat_encoders.push_back(std::move(c).value());
      add_encoder(fmt::format("{} pooled hidden states", *arch),
                  [enc](const Pair& p) { return Cosine(enc->Embed(p.a), enc->Embed(p.b)); });
    } else if (arch.ok() && *arch == model::kHashEncoderArchitecture) {
      auto e = model::HashEncoder::FromGguf(**g, *log);
      if (!e.ok()) return ReportError(e.status());
      const model::HashEncoder* enc = e->get();
      hash_encoders.push_back(std::move(e).value());
      add_encoder(enc->name(),
                  [enc](const Pair& p) { return Cosine(enc->Embed(p.a), enc->Embed(p.b)); });
    } else {
      auto e = model::Encoder::FromGguf(std::move(g).value(), *log);
      if (!e.ok()) return ReportError(e.status());
      const model::Encoder* enc = e->get();
      bert_encoders.push_back(std::move(e).value());
      add_encoder(fmt::format("{} {}", enc->config().architecture, enc->config().name),
                  [enc, &pool](const Pair& p) {
                    auto a = enc->Embed(p.a, pool);
                    auto b = enc->Embed(p.b, pool);
                    return a.ok() && b.ok() ? Cosine(a->vector, b->vector) : 0.0;
                  });
    }
  }

  nlohmann::json out = nlohmann::json::array();
  std::printf(
      "strata eval semantic: threshold chosen on the dev splits together for precision >= "
      "%.2f; test splits below\n\n",
      f.target_precision);
  std::printf("| %-44s | %-9s | %-13s | %6s | %9s | %6s | %6s |\n", "scorer", "threshold",
              "dataset", "pairs", "precision", "recall", "F1");
  std::printf("|%s|%s|%s|%s|%s|%s|%s|\n", std::string(46, '-').c_str(),
              std::string(11, '-').c_str(), std::string(15, '-').c_str(),
              std::string(8, '-').c_str(), std::string(11, '-').c_str(),
              std::string(8, '-').c_str(), std::string(8, '-').c_str());
  for (const Scorer& sc : scorers) {
    std::vector<Pair> dev_all;
    std::vector<double> dev_scores;
    std::vector<std::vector<double>> test_scores(splits.size());
    for (size_t k = 0; k < splits.size(); ++k) {
      for (const Pair& p : splits[k].dev) {
        dev_all.push_back(p);
        dev_scores.push_back(sc.score(p));
      }
      for (const Pair& p : splits[k].test) test_scores[k].push_back(sc.score(p));
    }
    const double chosen = Choose(dev_scores, dev_all, f.target_precision);
    if (f.curves) {
      // Dev precision/recall per dataset on a grid, to see where each stands.
      size_t at = 0;
      for (const Split& sp : splits) {
        const std::vector<double> part(
            dev_scores.begin() + static_cast<ptrdiff_t>(at),
            dev_scores.begin() + static_cast<ptrdiff_t>(at + sp.dev.size()));
        at += sp.dev.size();
        std::string line;
        for (double t = 0.5; t <= 1.0001; t += 0.05) {
          const Counts c = CountAt(part, sp.dev, t);
          line += fmt::format(" {:.2f}:{:.3f}/{:.3f}", t, c.precision(), c.recall());
        }
        std::printf("dev curve (threshold:precision/recall) %s, %s:%s\n", sc.name.c_str(),
                    sp.dataset.c_str(), line.c_str());
      }
    }
    std::vector<double> thresholds = {chosen};
    if (sc.fixed_threshold) {
      thresholds.push_back(*sc.fixed_threshold);
    } else {
      thresholds.insert(thresholds.end(), f.at.begin(), f.at.end());
    }
    for (double t : thresholds) {
      Counts all;
      for (size_t k = 0; k < splits.size(); ++k) {
        const Counts c = CountAt(test_scores[k], splits[k].test, t);
        all.tp += c.tp;
        all.fp += c.fp;
        all.fn += c.fn;
        all.tn += c.tn;
        std::printf("| %-44.44s | %9.4f | %-13s | %6zu | %9.4f | %6.4f | %6.4f |\n",
                    sc.name.c_str(), t, splits[k].dataset.c_str(), splits[k].test.size(),
                    c.precision(), c.recall(), c.f1());
        out.push_back({{"scorer", sc.name},
                       {"threshold", t},
                       {"chosen", t == chosen},
                       {"dataset", splits[k].dataset},
                       {"pairs", splits[k].test.size()},
                       {"precision", c.precision()},
                       {"recall", c.recall()},
                       {"f1", c.f1()}});
      }
      std::printf("| %-44.44s | %9.4f | %-13s | %6zu | %9.4f | %6.4f | %6.4f |\n", sc.name.c_str(),
                  t, "all", all.tp + all.fp + all.fn + all.tn, all.precision(), all.recall(),
                  all.f1());
      out.push_back({{"scorer", sc.name},
                     {"threshold", t},
                     {"chosen", t == chosen},
                     {"dataset", "all"},
                     {"precision", all.precision()},
                     {"recall", all.recall()},
                     {"f1", all.f1()}});
    }
  }
  if (!f.json.empty()) {
    std::ofstream j(f.json);
    j << out.dump(2) << "\n";
    if (!j) return ReportError(util::InternalError("cannot write " + f.json));
  }
  return kExitOk;
}

}  // namespace

Command RegisterEvalSemantic(CLI::App& app) {
  auto f = std::make_shared<EvalSemanticFlags>();
  CLI::App* eval = EvalGroup(app);
  CLI::App* cmd = eval->add_subcommand(
      "semantic",
      "Precision/recall/F1 of sentence encoders' cosine (the semantic tier) beside L3 on held-out "
      "paraphrase sets (PAWS, QQP, GPTCache mock + Arena-Hard)");
  cmd->add_option("--data-dir", f->data_dir, "Directory of the prompt sets")->capture_default_str();
  cmd->add_option("--encoder", f->encoders,
                  "Encoder to evaluate (repeatable): builtin (the one built into strata), or a "
                  "GGUF: strata-hash (strata train-encoder), bert or nomic-bert, or a chat model "
                  "(its mean-pooled hidden states, as --encoder model serves them)");
  cmd->add_option("--target-precision", f->target_precision,
                  "Precision the chosen threshold must keep on dev")
      ->capture_default_str();
  cmd->add_option("--max-pairs", f->max_pairs, "Use at most this many pairs per split (0 = all)")
      ->capture_default_str();
  cmd->add_option("-t,--threads", f->threads, "Threads of a BERT encoder; 0 = all cores");
  cmd->add_option("--json", f->json, "Also write the results as JSON to this file");
  cmd->add_option("--at", f->at, "Also report each encoder at this cosine threshold (repeatable)");
  cmd->add_flag("--curves", f->curves,
                "Also print each scorer's dev precision/recall per dataset on a grid");
  return {cmd, [f](const Env& env) { return RunEvalSemantic(env, *f); }};
}

}  // namespace strata::cli
