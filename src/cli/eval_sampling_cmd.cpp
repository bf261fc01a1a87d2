// `strata eval sampling`: runs a set of prompts through each sampling policy on
// a real model and reports, per policy, the entropy it sampled at (and how
// well it tracked its target), diversity (distinct-1/2), repetition and the
// log-likelihood of the text under the model at T = 1; a table, optional
// JSON, and an SVG plot of entropy over steps.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "engine/engine.h"
#include "model/transformer.h"
#include "sampling/sampler.h"

namespace strata::cli {
namespace {

struct EvalFlags {
  std::string model;
  std::string prompts_file;
  int32_t n_predict = 128;
  int64_t seed = 1;
  int32_t threads = 2;
  std::vector<double> targets = {1.0, 2.0};  // entropy targets, nats
  double tail_nats = 3.0;
  double mirostat_tau_bits = 1.5;
  bool ignore_eos = false;
  std::string json;
  std::string svg = "eval-sampling.svg";
  std::string log_level = "warn";
};

// Story openings in the register of TinyStories (stories260K's training set).
const std::vector<std::string> kDefaultPrompts = {
    "Once upon a time",
    "One day, a little girl named Lily",
    "Tom and his dog went to the park",
    "There was a big red ball",
    "The sun was shining and",
    "A small bird lived in a tree",
    "Ben wanted to build a tall tower",
    "In a quiet town, there lived a cat named",
    "Mom said it was time for bed, but",
    "The little boat sailed on the lake",
};

struct PolicySpec {
  std::string name;
  sampling::SamplingParams params;
  double target_nats = -1;  // what the policy tracks (entropy, or mirostat's surprise); < 0: none
};

sampling::SamplingParams Off(float temperature) {
  sampling::SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

std::vector<PolicySpec> Policies(const EvalFlags& f) {
  std::vector<PolicySpec> v;
  v.push_back({"temperature 1.0", Off(1.0f), -1});
  v.push_back({"temperature 0.7", Off(0.7f), -1});
  {
    sampling::SamplingParams p = Off(1.0f);
    p.top_p = 0.9f;
    v.push_back({"top-p 0.9", p, -1});
  }
  {
    sampling::SamplingParams p = Off(1.0f);
    p.min_p = 0.1f;
    v.push_back({"min-p 0.1", p, -1});
  }
  for (double t : f.targets) {
    sampling::SamplingParams p = Off(1.0f);
    p.target_entropy = static_cast<float>(t);
    p.entropy_tail_nats = static_cast<float>(f.tail_nats);
    v.push_back({fmt::format("entropy {:.2g} nats", t), p, t});
  }
  {
    sampling::SamplingParams p = Off(1.0f);
    p.mirostat = true;
    p.mirostat_tau_bits = static_cast<float>(f.mirostat_tau_bits);
    v.push_back({fmt::format("mirostat {:.2g} bits", f.mirostat_tau_bits), p,
                 f.mirostat_tau_bits * std::log(2.0)});
  }
  return v;
}

struct Step {
  double entropy = 0;   // of the distribution drawn from, nats
  double surprise = 0;  // -ln p of the token in that distribution
  double ll = 0;        // ln p of the token under the model at T = 1 (raw logits)
  bool clamped = false;
};

struct Generation {
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;
  std::vector<Step> steps;
};

struct PolicyResult {
  PolicySpec spec;
  std::vector<Generation> gens;
  // Aggregates.
  int64_t steps = 0;
  double mean_entropy = 0, tracking_error = 0, mean_surprise = 0, ll_per_token = 0;
  int64_t clamped = 0;
  double distinct1 = 0, distinct2 = 0, rep3 = 0;
  std::vector<double> entropy_by_step;  // mean over the generations still running
};

double LogSoftmaxAt(std::span<const float> logits, int32_t id) {
  double mx = -1e300;
  for (float l : logits) mx = std::max<double>(mx, l);
  double z = 0;
  for (float l : logits) z += std::exp(l - mx);
  return logits[static_cast<size_t>(id)] - mx - std::log(z);
}

// Generates for every prompt under one policy, all prompts batched in each
// engine step (each request has its own seeded Sampler).
util::StatusOr<std::vector<Generation>> Run(engine::Engine& eng, const text::Tokenizer& tok,
                                            const std::vector<std::vector<int32_t>>& prompts,
                                            const PolicySpec& spec, const EvalFlags& f) {
  const size_t n = prompts.size();
  const int32_t n_vocab = eng.n_vocab();
  std::vector<Generation> gens(n);
  std::vector<sampling::Sampler> samplers;
  std::vector<engine::SeqId> seqs(n);
  for (size_t i = 0; i < n; ++i) {
    sampling::SamplingParams p = spec.params;
    p.seed = static_cast<uint64_t>(f.seed) + i;
    samplers.emplace_back(p);
    seqs[i] = eng.NewSequence();
    gens[i].prompt = prompts[i];
  }
  struct Cleanup {
    engine::Engine& e;
    std::vector<engine::SeqId>& s;
    ~Cleanup() {
      for (engine::SeqId id : s) e.FreeSequence(id);
    }
  } cleanup{eng, seqs};
  std::vector<bool> active(n, true);
  std::vector<int32_t> next(n, -1);
  std::vector<engine::Engine::Work> work;
  std::vector<size_t> owners;
  for (size_t i = 0; i < n; ++i) {
    work.push_back({seqs[i], std::span<const int32_t>(prompts[i]), true});
    owners.push_back(i);
  }
  for (int32_t step = 0; step < f.n_predict && !work.empty(); ++step) {
    STRATA_ASSIGN_OR_RETURN(std::span<const float> logits, eng.Step(work));
    for (size_t k = 0; k < owners.size(); ++k) {
      const size_t i = owners[k];
      const auto row =
          logits.subspan(k * static_cast<size_t>(n_vocab), static_cast<size_t>(n_vocab));
      STRATA_ASSIGN_OR_RETURN(sampling::StepReport r, samplers[i].SampleWithReport(row));
      Step s;
      s.entropy = r.entropy_nats;
      s.surprise = -std::log(r.probability);
      s.ll = LogSoftmaxAt(row, r.token);
      s.clamped = r.entropy_clamp != sampling::EntropyClamp::kNone;
      gens[i].steps.push_back(s);
      gens[i].tokens.push_back(r.token);
      next[i] = r.token;
      if (!f.ignore_eos && tok.IsEog(r.token)) active[i] = false;
      if (static_cast<int32_t>(prompts[i].size() + gens[i].tokens.size()) >= eng.n_ctx()) {
        active[i] = false;
      }
    }
    work.clear();
    owners.clear();
    for (size_t i = 0; i < n; ++i) {
      if (!active[i]) continue;
      work.push_back({seqs[i], std::span<const int32_t>(&next[i], 1), true});
      owners.push_back(i);
    }
  }
  return gens;
}

void Summarize(PolicyResult& r) {
  double h = 0, err = 0, sur = 0, ll = 0;
  std::set<int32_t> uni;
  std::set<std::pair<int32_t, int32_t>> bi;
  int64_t n_bi = 0, n_tri = 0, rep_tri = 0;
  size_t longest = 0;
  for (const Generation& g : r.gens) {
    longest = std::max(longest, g.steps.size());
    for (const Step& s : g.steps) {
      h += s.entropy;
      err += r.spec.target_nats >= 0 ? std::abs(s.entropy - r.spec.target_nats) : 0;
      sur += s.surprise;
      ll += s.ll;
      r.clamped += s.clamped;
      ++r.steps;
    }
    for (size_t t = 0; t < g.tokens.size(); ++t) {
      uni.insert(g.tokens[t]);
      if (t > 0) {
        bi.insert({g.tokens[t - 1], g.tokens[t]});
        ++n_bi;
      }
    }
    // rep-3: generated tokens whose trigram (with the context before them)
    // already occurred earlier in the same text.
    std::vector<int32_t> text = g.prompt;
    text.insert(text.end(), g.tokens.begin(), g.tokens.end());
    std::set<std::tuple<int32_t, int32_t, int32_t>> seen;
    for (size_t t = 2; t < text.size(); ++t) {
      const auto tri = std::make_tuple(text[t - 2], text[t - 1], text[t]);
      if (t >= g.prompt.size()) {
        ++n_tri;
        rep_tri += seen.contains(tri);
      }
      seen.insert(tri);
    }
  }
  const double n = static_cast<double>(std::max<int64_t>(1, r.steps));
  r.mean_entropy = h / n;
  r.tracking_error = err / n;
  r.mean_surprise = sur / n;
  r.ll_per_token = ll / n;
  r.distinct1 = static_cast<double>(uni.size()) / n;
  r.distinct2 = n_bi > 0 ? static_cast<double>(bi.size()) / static_cast<double>(n_bi) : 0;
  r.rep3 = n_tri > 0 ? static_cast<double>(rep_tri) / static_cast<double>(n_tri) : 0;
  r.entropy_by_step.assign(longest, 0);
  std::vector<int> count(longest, 0);
  for (const Generation& g : r.gens) {
    for (size_t t = 0; t < g.steps.size(); ++t) {
      r.entropy_by_step[t] += g.steps[t].entropy;
      ++count[t];
    }
  }
  for (size_t t = 0; t < longest; ++t) r.entropy_by_step[t] /= count[t];
}

std::string Table(const std::vector<PolicyResult>& results) {
  std::string out = fmt::format(
      "| {:<18} | {:>6} | {:>6} | {:>9} | {:>7} | {:>7} | {:>8} | {:>6} | "
      "{:>6} | {:>5} | {:>10} |\n",
      "policy", "target", "steps", "entropy", "|H-H*|", "clamped", "surprise", "dist-1", "dist-2",
      "rep-3", "LL/tok T=1");
  out += "|" + std::string(20, '-') + "|" + std::string(8, '-') + "|" + std::string(8, '-') + "|" +
         std::string(11, '-') + "|" + std::string(9, '-') + "|" + std::string(9, '-') + "|" +
         std::string(10, '-') + "|" + std::string(8, '-') + "|" + std::string(8, '-') + "|" +
         std::string(7, '-') + "|" + std::string(12, '-') + "|\n";
  for (const PolicyResult& r : results) {
    const bool tracked = r.spec.target_nats >= 0;
    out += fmt::format(
        "| {:<18} | {:>6} | {:>6} | {:>9.3f} | {:>7} | {:>7} | {:>8.3f} | {:>6.3f} | {:>6.3f} | "
        "{:>5.3f} | {:>10.3f} |\n",
        r.spec.name, tracked ? fmt::format("{:.3f}", r.spec.target_nats) : "-", r.steps,
        r.mean_entropy, tracked ? fmt::format("{:.3f}", r.tracking_error) : "-",
        r.spec.params.target_entropy >= 0 ? fmt::format("{}", r.clamped) : "-", r.mean_surprise,
        r.distinct1, r.distinct2, r.rep3, r.ll_per_token);
  }
  return out;
}

// Entropy over steps, one line per policy, targets dashed. Plain SVG text.
std::string Svg(const std::vector<PolicyResult>& results, const std::string& title) {
  const double w = 900, h = 480, left = 60, right = 220, top = 40, bottom = 50;
  const double pw = w - left - right, ph = h - top - bottom;
  size_t max_steps = 1;
  double max_h = 0.5;
  for (const PolicyResult& r : results) {
    max_steps = std::max(max_steps, r.entropy_by_step.size());
    for (double v : r.entropy_by_step) max_h = std::max(max_h, v);
    max_h = std::max(max_h, r.spec.target_nats);
  }
  max_h = std::ceil(max_h * 2) / 2;
  auto x = [&](double step) { return left + pw * step / static_cast<double>(max_steps); };
  auto y = [&](double v) { return top + ph * (1 - v / max_h); };
  static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"22\" font-size=\"15\">{}</text>\n",
      w, h, left, title);
  for (double v = 0; v <= max_h + 1e-9; v += 0.5) {
    s += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{:.1f}</text>\n",
        left, y(v), left + pw, y(v), left - 6, y(v) + 4, v);
  }
  const size_t tick = max_steps <= 64 ? 8 : (max_steps <= 256 ? 32 : 128);
  for (size_t t = 0; t <= max_steps; t += tick) {
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", x(t),
                     top + ph + 18, t);
  }
  s += fmt::format(
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"black\"/>"
      "<line x1=\"{0}\" y1=\"{2}\" x2=\"{3}\" y2=\"{2}\" stroke=\"black\"/>\n"
      "<text x=\"{4}\" y=\"{5}\" text-anchor=\"middle\">generation step</text>\n"
      "<text x=\"16\" y=\"{6}\" transform=\"rotate(-90 16 {6})\" text-anchor=\"middle\">"
      "entropy sampled at (nats, mean over prompts)</text>\n",
      left, top, top + ph, left + pw, left + pw / 2, h - 10, top + ph / 2);
  for (size_t i = 0; i < results.size(); ++i) {
    const PolicyResult& r = results[i];
    const char* color = kColors[i % 10];
    std::string pts;
    for (size_t t = 0; t < r.entropy_by_step.size(); ++t) {
      pts +=
          fmt::format("{:.1f},{:.1f} ", x(static_cast<double>(t) + 0.5), y(r.entropy_by_step[t]));
    }
    s += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n",
                     color, pts);
    if (r.spec.target_nats >= 0) {
      s += fmt::format(
          "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
          "stroke-dasharray=\"5,4\"/>\n",
          left, y(r.spec.target_nats), left + pw, y(r.spec.target_nats), color);
    }
    const double ly = top + 10 + 18 * static_cast<double>(i);
    s += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
        "stroke-width=\"3\"/><text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
        left + pw + 12, ly, left + pw + 32, ly, color, left + pw + 38, ly + 4, r.spec.name);
  }
  s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"#555\">dashed: target</text>\n",
                   left + pw + 12, top + 10 + 18 * static_cast<double>(results.size()) + 6);
  s += "</svg>\n";
  return s;
}

nlohmann::json Json(const std::vector<PolicyResult>& results, const std::string& model,
                    const EvalFlags& f, size_t n_prompts) {
  nlohmann::json j;
  j["model"] = model;
  j["n_predict"] = f.n_predict;
  j["seed"] = f.seed;
  j["prompts"] = n_prompts;
  j["policies"] = nlohmann::json::array();
  for (const PolicyResult& r : results) {
    const sampling::SamplingParams& p = r.spec.params;
    nlohmann::json e;
    e["name"] = r.spec.name;
    e["params"] = {{"temperature", p.temperature},
                   {"top_p", p.top_p},
                   {"min_p", p.min_p},
                   {"target_entropy", p.target_entropy},
                   {"entropy_tail_nats", p.entropy_tail_nats},
                   {"mirostat", p.mirostat},
                   {"mirostat_tau_bits", p.mirostat_tau_bits}};
    if (r.spec.target_nats >= 0) {
      e["target_nats"] = r.spec.target_nats;
      e["tracking_error_nats"] = r.tracking_error;
    }
    e["steps"] = r.steps;
    e["mean_entropy_nats"] = r.mean_entropy;
    e["clamped_steps"] = r.clamped;
    e["mean_surprise_nats"] = r.mean_surprise;
    e["distinct_1"] = r.distinct1;
    e["distinct_2"] = r.distinct2;
    e["rep_3"] = r.rep3;
    e["ll_per_token_t1"] = r.ll_per_token;
    e["entropy_by_step"] = r.entropy_by_step;
    j["policies"].push_back(e);
  }
  return j;
}

util::StatusOr<std::vector<std::string>> ReadPrompts(const Env& env, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, env.fs->ReadFile(path));
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) out.push_back(line);
  }
  if (out.empty())
    return util::InvalidArgumentError(fmt::format("{}: no prompts (one per line)", path));
  return out;
}

util::Status WriteText(const Env& env, const std::string& path, const std::string& text) {
  return env.fs->WriteFileAtomic(path, text);
}

int RunEvalSampling(const Env& env, const EvalFlags& f) {
  if (f.n_predict < 1) return UsageError(fmt::format("-n {} must be >= 1", f.n_predict));
  if (f.threads < 1 || f.threads > 256)
    return UsageError(fmt::format("-t {} is outside [1, 256]", f.threads));
  if (f.seed < 0) return UsageError(fmt::format("--seed {} must be >= 0", f.seed));
  const std::vector<PolicySpec> policies = Policies(f);
  for (const PolicySpec& p : policies) {
    if (util::Status st = sampling::Validate(p.params); !st.ok()) {
      return UsageError(fmt::format("policy '{}': {}", p.name, st.message()));
    }
  }
  std::vector<std::string> prompt_text = kDefaultPrompts;
  if (!f.prompts_file.empty()) {
    auto read = ReadPrompts(env, f.prompts_file);
    if (!read.ok()) return ReportError(read.status());
    prompt_text = *read;
  }
  auto log = MakeLogger(f.log_level);
  auto path = ResolveModelPath(env, f.model, *log);
  if (!path.ok()) return ReportError(path.status());
  auto model = model::Model::Load(*env.fs, *path, {}, *log);
  if (!model.ok()) return ReportError(model.status());
  const text::Tokenizer& tok = (*model)->tokenizer();
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& s : prompt_text) {
    prompts.push_back(tok.Encode(s, {.add_special = true, .parse_special = false}));
    if (prompts.back().empty())
      return UsageError(fmt::format("prompt '{}' encodes to no tokens", s));
  }
  engine::EngineOptions eo;
  eo.n_threads = f.threads;
  eo.n_seq_max = static_cast<int32_t>(prompts.size());
  auto eng = engine::Engine::Create(**model, eo, *log);
  if (!eng.ok()) return ReportError(eng.status());
  for (const auto& p : prompts) {
    if (static_cast<int32_t>(p.size()) >= (*eng)->n_ctx()) {
      return UsageError(fmt::format("a prompt of {} tokens does not fit the context of {}",
                                    p.size(), (*eng)->n_ctx()));
    }
  }

  std::vector<PolicyResult> results;
  for (const PolicySpec& spec : policies) {
    auto gens = Run(**eng, tok, prompts, spec, f);
    if (!gens.ok()) return ReportError(gens.status());
    PolicyResult r;
    r.spec = spec;
    r.gens = std::move(*gens);
    Summarize(r);
    results.push_back(std::move(r));
  }

  std::printf("strata eval sampling: %s, %zu prompts, up to %d tokens each, seed %lld%s\n\n",
              path->c_str(), prompts.size(), f.n_predict, static_cast<long long>(f.seed),
              f.ignore_eos ? "" : " (stops at end of story)");
  std::fputs(Table(results).c_str(), stdout);
  std::printf(
      "\nentropy: of the distribution each token was drawn from (nats); |H-H*|: mean per-step\n"
      "tracking error vs the target (mirostat: its tau in nats); surprise: mean -ln p of the\n"
      "drawn token; dist-n: distinct n-grams / n-grams over all outputs; rep-3: generated\n"
      "trigrams already seen earlier in the same text; LL/tok: mean ln p of the text under\n"
      "the model at T = 1.\n");
  std::printf("\nsample (first prompt):\n");
  for (const PolicyResult& r : results) {
    const Generation& g = r.gens[0];
    std::string text = tok.Decode(g.tokens);
    std::replace(text.begin(), text.end(), '\n', ' ');
    if (text.size() > 160) text = text.substr(0, 160) + "...";
    std::printf("  %-18s %s%s\n", r.spec.name.c_str(), prompt_text[0].c_str(), text.c_str());
  }
  if (!f.svg.empty()) {
    const std::string title =
        fmt::format("Entropy per step, {} ({} prompts, seed {})",
                    std::filesystem::path(*path).filename().string(), prompts.size(), f.seed);
    if (util::Status st = WriteText(env, f.svg, Svg(results, title)); !st.ok())
      return ReportError(st);
    std::printf("\nplot: %s\n", f.svg.c_str());
  }
  if (!f.json.empty()) {
    const std::string j = Json(results, *path, f, prompts.size()).dump(2) + "\n";
    if (util::Status st = WriteText(env, f.json, j); !st.ok()) return ReportError(st);
    std::printf("json: %s\n", f.json.c_str());
  }
  return kExitOk;
}

}  // namespace

Command RegisterEvalSampling(CLI::App& app) {
  auto f = std::make_shared<EvalFlags>();
  CLI::App* eval = app.add_subcommand("eval", "Evaluate a component on a real model");
  eval->require_subcommand(1);
  CLI::App* cmd = eval->add_subcommand(
      "sampling",
      "Compare sampling policies: entropy, tracking, diversity, repetition, likelihood");
  cmd->add_option("-m,--model", f->model,
                  "GGUF model file (default: $STRATA_MODEL, ../shared/models/stories260K.gguf, or "
                  "a random-weight demo model)");
  cmd->add_option("--prompts", f->prompts_file,
                  "File with one prompt per line (default: 10 built-in "
                  "story openings)");
  cmd->add_option("-n,--n-predict", f->n_predict, "Tokens to generate per prompt")
      ->capture_default_str();
  cmd->add_option("-s,--seed", f->seed, "Seed of the first prompt (prompt i uses seed + i)")
      ->capture_default_str();
  cmd->add_option("--targets", f->targets, "Entropy targets in nats, one policy each")
      ->capture_default_str();
  cmd->add_option("--tail", f->tail_nats, "entropy_tail_nats (m) of the entropy policies")
      ->capture_default_str();
  cmd->add_option("--tau", f->mirostat_tau_bits, "Mirostat target surprise in bits")
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", f->ignore_eos, "Keep generating after the end-of-story token");
  cmd->add_option("-t,--threads", f->threads, "Threads")->capture_default_str();
  cmd->add_option("--json", f->json, "Also write the results as JSON to this file");
  cmd->add_option("--svg", f->svg, "Write the entropy-over-steps plot here ('' = none)")
      ->capture_default_str();
  cmd->add_option("--log-level", f->log_level, "debug, info, warn, error or off")
      ->capture_default_str();
  // The runner belongs to `eval`, the word main() recognises; it runs the
  // subcommand that was parsed.
  return {eval, [f, cmd](const Env& env) {
            if (cmd->parsed()) return RunEvalSampling(env, *f);
            return UsageError("eval: name what to evaluate (sampling)");
          }};
}

}  // namespace strata::cli
