// `strata eval l3`: precision and recall of the L3 near-duplicate tier on
// labelled paraphrase sets (PAWS-Wiki, Quora Question Pairs, GPTCache's mock
// prompts against Arena-Hard prompts as negatives). For every pair it computes
// the confirmation score (cache::ScorePair) under the default settings and
// under ablations (flat weights, fewer guards, shingle Jaccard); prints the
// precision/recall curve over the threshold, picks on each dev split the
// lowest threshold whose precision stays >= the target above it, and reports
// that threshold and the library default on the held-out split. A second part
// stores one side of each pair in a NearDupIndex and looks the other up, so
// the banded SimHash candidate stage is measured too. Table on stdout,
// optional JSON, and an SVG plot of the curves.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/near_dup.h"
#include "cache/simhash.h"
#include "cli/commands.h"
#include "cli/prompt_sets.h"
#include "util/clock.h"

namespace strata::cli {
namespace {

struct EvalL3Flags {
  std::string data_dir = "../shared/data/prompts";
  std::string qqp;  // default: <data_dir>/gptcache_similiar_qqp_full.json.tar.gz
  double target_precision = 0.97;
  double threshold = cache::kDefaultNearDupSimilarity;
  int bands = 4;
  int probe_radius = 2;
  size_t max_pairs = 0;  // per split; 0 = all
  std::string json;
  std::string svg = "eval-l3.svg";
};

struct Dataset {
  std::string name;
  std::string dev_source, test_source;
  std::vector<Pair> dev, test;
};

// Even items to dev, odd to test: deterministic and balanced for shuffled files.
std::pair<std::vector<Pair>, std::vector<Pair>> SplitHalves(const std::vector<Pair>& all) {
  std::pair<std::vector<Pair>, std::vector<Pair>> out;
  for (size_t i = 0; i < all.size(); ++i) (i % 2 == 0 ? out.first : out.second).push_back(all[i]);
  return out;
}

void Cap(std::vector<Pair>& v, size_t n) {
  if (n > 0 && v.size() > n) v.resize(n);
}

// ---------------------------------------------------------------------------
// Scoring pairs.

struct Variant {
  std::string name;
  bool flat = false;
  cache::SimilarityOptions sim;
};

std::vector<Variant> Variants() {
  using M = cache::SimilarityOptions::Measure;
  auto opts = [](M m, bool slots, bool neg, bool order, bool entity) {
    cache::SimilarityOptions o;
    o.measure = m;
    o.slot_guard = slots;
    o.negation_guard = neg;
    o.order_guard = order;
    o.entity_guard = entity;
    return o;
  };
  return {
      {"default: weighted LCS + all guards", false, opts(M::kWeightedLcs, true, true, true, true)},
      {"flat LCS, no guards", true, opts(M::kWeightedLcs, false, false, false, false)},
      {"flat LCS + all guards", true, opts(M::kWeightedLcs, true, true, true, true)},
      {"weighted LCS, no guards", false, opts(M::kWeightedLcs, false, false, false, false)},
      {"  + slots (numbers, symbols)", false, opts(M::kWeightedLcs, true, false, false, false)},
      {"  + negation", false, opts(M::kWeightedLcs, true, true, false, false)},
      {"  + order", false, opts(M::kWeightedLcs, true, true, true, false)},
      {"weighted shingle Jaccard + all guards", false,
       opts(M::kShingleJaccard, true, true, true, true)},
  };
}

struct Scored {
  std::vector<std::vector<float>> score;  // [variant][pair]
  std::vector<cache::Guard> guard;        // default variant's guard verdict per pair
  std::vector<float> unguarded;           // weighted LCS without guards (for guard effects)
  std::vector<int> label;
  size_t identical = 0, identical_pos = 0;  // pairs with the same token sequence
  size_t unscorable = 0;                    // a side without words, or too long
};

Scored ScoreAll(const std::vector<Pair>& pairs, const std::vector<Variant>& variants) {
  Scored s;
  s.score.assign(variants.size(), std::vector<float>(pairs.size(), 0.0f));
  s.guard.assign(pairs.size(), cache::Guard::kNone);
  s.unguarded.assign(pairs.size(), 0.0f);
  cache::PrepareOptions flat;
  flat.flat_weights = true;
  for (size_t i = 0; i < pairs.size(); ++i) {
    s.label.push_back(pairs[i].label);
    auto wa = cache::PrepareNearDupText(pairs[i].a);
    auto wb = cache::PrepareNearDupText(pairs[i].b);
    auto fa = cache::PrepareNearDupText(pairs[i].a, flat);
    auto fb = cache::PrepareNearDupText(pairs[i].b, flat);
    if (!wa.ok() || !wb.ok() || !fa.ok() || !fb.ok()) {
      ++s.unscorable;
      continue;
    }
    if (wa->sequence_hash == wb->sequence_hash) {
      ++s.identical;
      s.identical_pos += pairs[i].label;
    }
    for (size_t v = 0; v < variants.size(); ++v) {
      const auto r = variants[v].flat ? cache::ScorePair(*fa, *fb, variants[v].sim)
                                      : cache::ScorePair(*wa, *wb, variants[v].sim);
      s.score[v][i] = static_cast<float>(r.similarity);
      if (v == 0) s.guard[i] = r.rejected_by;
    }
    s.unguarded[i] = s.score[3][i];
  }
  return s;
}

struct Point {
  double threshold = 0;
  size_t tp = 0, fp = 0, fn = 0;
  double precision() const { return tp + fp == 0 ? 1.0 : static_cast<double>(tp) / (tp + fp); }
  double recall() const { return tp + fn == 0 ? 0.0 : static_cast<double>(tp) / (tp + fn); }
  bool any() const { return tp + fp > 0; }
};

Point At(const std::vector<float>& score, const std::vector<int>& label, double t) {
  Point p;
  p.threshold = t;
  for (size_t i = 0; i < score.size(); ++i) {
    const bool hit = score[i] >= t - 1e-9;
    if (hit && label[i]) ++p.tp;
    if (hit && !label[i]) ++p.fp;
    if (!hit && label[i]) ++p.fn;
  }
  return p;
}

// 0.50, 0.51, ..., 1.00.
std::vector<double> Grid() {
  std::vector<double> g;
  for (int k = 50; k <= 100; ++k) g.push_back(k / 100.0);
  return g;
}

std::vector<Point> Curve(const std::vector<float>& score, const std::vector<int>& label) {
  std::vector<Point> c;
  for (double t : Grid()) c.push_back(At(score, label, t));
  return c;
}

// The lowest grid threshold at and above which precision stays >= target
// (thresholds without any hit count as meeting it) and that has a hit.
std::optional<double> Choose(const std::vector<Point>& curve, double target) {
  std::optional<double> chosen;
  for (size_t k = curve.size(); k-- > 0;) {
    if (curve[k].precision() < target) break;
    if (curve[k].any()) chosen = curve[k].threshold;
  }
  return chosen;
}

std::string Pct(double v) { return fmt::format("{:.3f}", v); }

// ---------------------------------------------------------------------------
// Looking pairs up in a NearDupIndex.

struct LookupQuery {
  std::string text;
  int partner = -1;            // index of the stored text it is labelled a paraphrase of, or -1
  bool any_hit_wrong = false;  // no stored text answers it (an unrelated prompt)
};

struct LookupCase {
  std::string name;
  std::vector<std::string> stored;
  std::vector<LookupQuery> queries;
  std::vector<Pair> labels;  // every labelled pair of the split, to judge hits on other entries
};

struct LookupResult {
  std::string name;
  size_t stored = 0, positives = 0, negatives = 0, unpreparable = 0;
  size_t hits = 0, correct = 0, wrong = 0, unlabelled = 0, found = 0;
  size_t pair_hits = 0;  // positive queries whose labelled paraphrase scores >= the threshold
  size_t in_reach = 0;   // ... and whose fingerprints are within the index's max_distance
  double us_per_lookup = 0, candidates_per_lookup = 0;
  double precision() const {  // over the hits a label decides
    return correct + wrong == 0 ? 1.0 : static_cast<double>(correct) / (correct + wrong);
  }
  double strict_precision() const {  // unlabelled hits counted as wrong
    return hits == 0 ? 1.0 : static_cast<double>(correct) / hits;
  }
  double recall() const { return positives == 0 ? 0 : static_cast<double>(found) / positives; }
  double pair_recall() const {
    return positives == 0 ? 0 : static_cast<double>(pair_hits) / positives;
  }
  double reach() const { return pair_hits == 0 ? 1.0 : static_cast<double>(in_reach) / pair_hits; }
};

struct PairKeyHash {
  size_t operator()(const std::pair<uint64_t, uint64_t>& p) const {
    return static_cast<size_t>(p.first * 0x9E3779B97F4A7C15ULL ^ p.second);
  }
};

std::optional<uint64_t> SequenceOf(std::string_view text) {
  auto t = cache::PrepareNearDupText(text);
  if (!t.ok()) return std::nullopt;
  return t->sequence_hash;
}

// A hit is correct when the stored text has the query's token sequence or a
// labelled pair calls the two paraphrases; wrong when a label says they
// differ (or both labels occur), or when the query is an unrelated prompt;
// otherwise unlabelled.
util::StatusOr<LookupResult> RunLookup(const LookupCase& c, const EvalL3Flags& f) {
  std::unordered_map<std::pair<uint64_t, uint64_t>, int, PairKeyHash> labels;  // bit 1: pos, 2: neg
  for (const Pair& p : c.labels) {
    const auto a = SequenceOf(p.a), b = SequenceOf(p.b);
    if (!a || !b) continue;
    labels[{std::min(*a, *b), std::max(*a, *b)}] |= p.label ? 1 : 2;
  }
  cache::NearDupOptions o;
  o.max_entries = c.stored.size() + 16;
  o.max_bytes = size_t{4} << 30;
  o.min_similarity = f.threshold;
  o.bands = f.bands;
  o.probe_radius = f.probe_radius;
  const util::Clock& clock = util::RealClock();
  STRATA_ASSIGN_OR_RETURN(auto index, cache::NearDupIndex::Create(o, clock));
  const std::string ns = cache::NearDupNamespace("eval", "l3");
  LookupResult r;
  r.name = c.name;
  std::vector<std::optional<cache::NearDupText>> prepared(c.stored.size());
  for (size_t i = 0; i < c.stored.size(); ++i) {
    auto t = cache::PrepareNearDupText(c.stored[i]);
    if (!t.ok()) continue;
    STRATA_RETURN_IF_ERROR(index->Insert(ns, *t, i).status());
    prepared[i] = std::move(*t);
  }
  r.stored = index->stats().entries;
  double total_us = 0;
  for (const LookupQuery& q : c.queries) {
    (q.partner >= 0 ? r.positives : r.negatives) += 1;
    auto t = cache::PrepareNearDupText(q.text);
    if (!t.ok()) {
      ++r.unpreparable;
      continue;
    }
    const auto start = clock.Now();
    const std::optional<cache::NearDupMatch> m = index->Lookup(ns, *t);
    total_us += std::chrono::duration<double, std::micro>(clock.Now() - start).count();
    const cache::NearDupText* partner = q.partner >= 0 && prepared[static_cast<size_t>(q.partner)]
                                            ? &*prepared[static_cast<size_t>(q.partner)]
                                            : nullptr;
    if (partner && cache::ScorePair(*t, *partner).similarity >= f.threshold - 1e-9) {
      ++r.pair_hits;
      r.in_reach +=
          cache::HammingDistance(t->fingerprint, partner->fingerprint) <= index->max_distance();
    }
    if (!m) continue;
    ++r.hits;
    const uint64_t got = prepared[m->payload]->sequence_hash;
    bool correct = false, wrong = false;
    if (got == t->sequence_hash) {
      correct = true;
    } else if (auto it =
                   labels.find({std::min(got, t->sequence_hash), std::max(got, t->sequence_hash)});
               it != labels.end()) {
      (it->second == 1 ? correct : wrong) = true;
    } else if (q.any_hit_wrong) {
      wrong = true;
    }
    r.correct += correct;
    r.wrong += wrong;
    r.unlabelled += !correct && !wrong;
    r.found += correct && q.partner >= 0;
  }
  const size_t looked = c.queries.size() - r.unpreparable;
  r.us_per_lookup = looked ? total_us / static_cast<double>(looked) : 0;
  r.candidates_per_lookup =
      looked ? static_cast<double>(index->stats().candidates) / static_cast<double>(looked) : 0;
  return r;
}

// Store the first text of every pair, look the second up; every labelled
// pair judges.
LookupCase PairsLookup(const std::string& name, const std::vector<Pair>& pairs) {
  LookupCase c;
  c.name = name;
  c.labels = pairs;
  for (size_t i = 0; i < pairs.size(); ++i) {
    c.stored.push_back(pairs[i].a);
    c.queries.push_back({pairs[i].b, pairs[i].label ? static_cast<int>(i) : -1, false});
  }
  return c;
}

// ---------------------------------------------------------------------------
// Output.

struct DatasetResult {
  const Dataset* data;
  Scored dev, test;
  std::vector<std::vector<Point>> dev_curve, test_curve;  // [variant]
  std::vector<std::optional<double>> chosen;              // [variant]
};

std::string CurveTable(const DatasetResult& r, double default_t) {
  std::string out = fmt::format("| {:>9} | {:>6} | {:>6} | {:>6} | {:>6} | {:>7} |\n", "threshold",
                                "dev P", "dev R", "test P", "test R", "test F1");
  out += "|----------:|-------:|-------:|-------:|-------:|--------:|\n";
  std::vector<double> rows;
  for (int k = 50; k <= 100; k += 5) rows.push_back(k / 100.0);
  rows.push_back(default_t);
  if (r.chosen[0]) rows.push_back(*r.chosen[0]);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end(),
                         [](double a, double b) { return std::abs(a - b) < 1e-9; }),
             rows.end());
  for (double t : rows) {
    const Point d = At(r.dev.score[0], r.dev.label, t);
    const Point s = At(r.test.score[0], r.test.label, t);
    const double f1 = s.precision() + s.recall() > 0
                          ? 2 * s.precision() * s.recall() / (s.precision() + s.recall())
                          : 0;
    std::string mark;
    if (std::abs(t - default_t) < 1e-9) mark += " default";
    if (r.chosen[0] && std::abs(t - *r.chosen[0]) < 1e-9) mark += " chosen";
    out +=
        fmt::format("| {:>9} | {:>6} | {:>6} | {:>6} | {:>6} | {:>7} |{}\n",
                    fmt::format("{:.2f}", t), d.any() ? Pct(d.precision()) : "-", Pct(d.recall()),
                    s.any() ? Pct(s.precision()) : "-", Pct(s.recall()), Pct(f1), mark);
  }
  return out;
}

std::string AblationTable(const DatasetResult& r, const std::vector<Variant>& variants,
                          double default_t, double target) {
  std::string out =
      fmt::format("| {:<38} | {:>13} | {:>6} | {:>6} | {:>9} | {:>9} |\n", "variant",
                  fmt::format("dev t, P>={:.2f}", target), "test P", "test R",
                  fmt::format("P @ {:.2f}", default_t), fmt::format("R @ {:.2f}", default_t));
  out +=
      "|:---------------------------------------|--------------:|-------:|-------:|----------:|"
      "----------:|\n";
  for (size_t v = 0; v < variants.size(); ++v) {
    const Point d = At(r.test.score[v], r.test.label, default_t);
    std::string t = "none", tp = "-", tr = "-";
    if (r.chosen[v]) {
      const Point c = At(r.test.score[v], r.test.label, *r.chosen[v]);
      t = fmt::format("{:.2f}", *r.chosen[v]);
      tp = c.any() ? Pct(c.precision()) : "-";
      tr = Pct(c.recall());
    }
    out += fmt::format("| {:<38} | {:>13} | {:>6} | {:>6} | {:>9} | {:>9} |\n", variants[v].name, t,
                       tp, tr, d.any() ? Pct(d.precision()) : "-", Pct(d.recall()));
  }
  return out;
}

// What each guard changed at the default threshold on the dev split: pairs
// the unguarded score accepts that the guard rejects, by label.
std::string GuardTable(const DatasetResult& r, double t) {
  std::string out = "| guard    | false hits removed | true hits lost |\n";
  out += "|:---------|-------------------:|---------------:|\n";
  for (cache::Guard g : {cache::Guard::kSlots, cache::Guard::kNegation, cache::Guard::kOrder,
                         cache::Guard::kEntity}) {
    size_t removed = 0, lost = 0;
    for (size_t i = 0; i < r.dev.label.size(); ++i) {
      if (r.dev.guard[i] != g || r.dev.unguarded[i] < t - 1e-9) continue;
      (r.dev.label[i] ? lost : removed) += 1;
    }
    out += fmt::format("| {:<8} | {:>18} | {:>14} |\n", cache::GuardName(g), removed, lost);
  }
  return out;
}

std::string LookupTable(const std::vector<LookupResult>& rs) {
  std::string out = fmt::format(
      "| {:<13} | {:>6} | {:>7} | {:>7} | {:>5} | {:>7} | {:>5} | {:>10} | {:>5} | {:>8} | {:>5} | "
      "{:>6} | {:>5} | {:>8} | {:>9} |\n",
      "set", "stored", "pos qry", "neg qry", "hits", "correct", "wrong", "unlabelled", "P",
      "P strict", "R", "pair R", "reach", "cand/qry", "us/lookup");
  out +=
      "|:--------------|-------:|--------:|--------:|------:|--------:|------:|-----------:|------:"
      "|"
      "---------:|------:|-------:|------:|---------:|----------:|\n";
  for (const LookupResult& r : rs) {
    out += fmt::format(
        "| {:<13} | {:>6} | {:>7} | {:>7} | {:>5} | {:>7} | {:>5} | {:>10} | {:>5} | {:>8} | {:>5} "
        "| "
        "{:>6} | {:>5} | {:>8.1f} | {:>9.1f} |\n",
        r.name, r.stored, r.positives, r.negatives, r.hits, r.correct, r.wrong, r.unlabelled,
        Pct(r.precision()), Pct(r.strict_precision()), Pct(r.recall()), Pct(r.pair_recall()),
        Pct(r.reach()), r.candidates_per_lookup, r.us_per_lookup);
  }
  return out;
}

// Precision over recall of the default variant: one colour per dataset, test
// solid, dev dashed, a dot at the default threshold, the target dashed grey.
std::string Svg(const std::vector<DatasetResult>& results, double default_t, double target) {
  const double w = 820, h = 520, left = 70, right = 230, top = 40, bottom = 55;
  const double pw = w - left - right, ph = h - top - bottom;
  const double y_lo = 0.4;
  auto x = [&](double r) { return left + pw * r; };
  auto y = [&](double p) { return top + ph * (1 - (std::max(p, y_lo) - y_lo) / (1 - y_lo)); };
  static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"};
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"22\" font-size=\"15\">L3 near-duplicate confirmation: precision over "
      "recall (thresholds 0.50-1.00)</text>\n",
      w, h, left);
  for (int k = 4; k <= 10; ++k) {
    const double p = k / 10.0;
    s += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{:.1f}</text>\n",
        left, y(p), left + pw, y(p), left - 6, y(p) + 4, p);
  }
  for (int k = 0; k <= 10; k += 2) {
    const double r = k / 10.0;
    s += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#eee\"/>"
        "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4:.1f}</text>\n",
        x(r), top, top + ph, top + ph + 18, r);
  }
  s += fmt::format(
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"black\"/>"
      "<line x1=\"{0}\" y1=\"{2}\" x2=\"{3}\" y2=\"{2}\" stroke=\"black\"/>\n"
      "<text x=\"{4}\" y=\"{5}\" text-anchor=\"middle\">recall</text>\n"
      "<text x=\"18\" y=\"{6}\" transform=\"rotate(-90 18 {6})\" text-anchor=\"middle\">"
      "precision</text>\n",
      left, top, top + ph, left + pw, left + pw / 2, h - 12, top + ph / 2);
  s += fmt::format(
      "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#888\" "
      "stroke-dasharray=\"3,3\"/><text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"#555\">P = {:.2f}</text>\n",
      left, y(target), left + pw, y(target), left + pw - 50, y(target) - 4, target);
  for (size_t i = 0; i < results.size(); ++i) {
    const DatasetResult& r = results[i];
    const char* color = kColors[i % 5];
    for (int split = 0; split < 2; ++split) {
      const std::vector<Point>& c = split == 0 ? r.test_curve[0] : r.dev_curve[0];
      std::string pts;
      for (const Point& p : c) {
        if (p.any()) pts += fmt::format("{:.1f},{:.1f} ", x(p.recall()), y(p.precision()));
      }
      s += fmt::format(
          "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"{}\"{} points=\"{}\"/>\n", color,
          split == 0 ? 2 : 1, split == 0 ? "" : " stroke-dasharray=\"5,4\"", pts);
    }
    const Point d = At(r.test.score[0], r.test.label, default_t);
    if (d.any()) {
      s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4.5\" fill=\"{}\"/>\n",
                       x(d.recall()), y(d.precision()), color);
    }
    const double ly = top + 10 + 18 * static_cast<double>(i);
    s += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
        "stroke-width=\"3\"/><text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n",
        left + pw + 12, ly, left + pw + 32, ly, color, left + pw + 38, ly + 4, r.data->name);
  }
  s += fmt::format(
      "<text x=\"{0:.1f}\" y=\"{1:.1f}\" fill=\"#555\">solid: test, dashed: dev</text>"
      "<text x=\"{0:.1f}\" y=\"{2:.1f}\" fill=\"#555\">dot: default threshold {3:.2f}</text>\n",
      left + pw + 12, top + 10 + 18 * static_cast<double>(results.size()) + 6,
      top + 10 + 18 * static_cast<double>(results.size()) + 24, default_t);
  s += "</svg>\n";
  return s;
}

nlohmann::json PointJson(const Point& p) {
  return {{"threshold", p.threshold},   {"tp", p.tp},          {"fp", p.fp}, {"fn", p.fn},
          {"precision", p.precision()}, {"recall", p.recall()}};
}

nlohmann::json Json(const std::vector<DatasetResult>& results, const std::vector<Variant>& variants,
                    const std::vector<LookupResult>& lookups, const EvalL3Flags& f,
                    int max_distance) {
  nlohmann::json j;
  j["target_precision"] = f.target_precision;
  j["default_threshold"] = f.threshold;
  j["index"] = {
      {"bands", f.bands}, {"probe_radius", f.probe_radius}, {"max_distance", max_distance}};
  j["datasets"] = nlohmann::json::array();
  for (const DatasetResult& r : results) {
    nlohmann::json d;
    d["name"] = r.data->name;
    d["dev"] = {{"source", r.data->dev_source},
                {"pairs", r.dev.label.size()},
                {"identical_pairs", r.dev.identical},
                {"identical_positive", r.dev.identical_pos},
                {"unscorable", r.dev.unscorable}};
    d["test"] = {{"source", r.data->test_source},
                 {"pairs", r.test.label.size()},
                 {"identical_pairs", r.test.identical},
                 {"identical_positive", r.test.identical_pos},
                 {"unscorable", r.test.unscorable}};
    d["variants"] = nlohmann::json::array();
    for (size_t v = 0; v < variants.size(); ++v) {
      nlohmann::json e;
      e["name"] = variants[v].name;
      e["dev_curve"] = nlohmann::json::array();
      e["test_curve"] = nlohmann::json::array();
      for (const Point& p : r.dev_curve[v]) e["dev_curve"].push_back(PointJson(p));
      for (const Point& p : r.test_curve[v]) e["test_curve"].push_back(PointJson(p));
      if (r.chosen[v]) {
        e["chosen_threshold"] = *r.chosen[v];
        e["test_at_chosen"] = PointJson(At(r.test.score[v], r.test.label, *r.chosen[v]));
      } else {
        e["chosen_threshold"] = nullptr;
      }
      e["test_at_default"] = PointJson(At(r.test.score[v], r.test.label, f.threshold));
      d["variants"].push_back(e);
    }
    j["datasets"].push_back(d);
  }
  j["lookup"] = nlohmann::json::array();
  for (const LookupResult& r : lookups) {
    j["lookup"].push_back({{"set", r.name},
                           {"stored", r.stored},
                           {"positive_queries", r.positives},
                           {"negative_queries", r.negatives},
                           {"unpreparable_queries", r.unpreparable},
                           {"hits", r.hits},
                           {"correct", r.correct},
                           {"wrong", r.wrong},
                           {"unlabelled", r.unlabelled},
                           {"precision", r.precision()},
                           {"strict_precision", r.strict_precision()},
                           {"recall", r.recall()},
                           {"pair_recall", r.pair_recall()},
                           {"reach", r.reach()},
                           {"candidates_per_lookup", r.candidates_per_lookup},
                           {"us_per_lookup", r.us_per_lookup}});
  }
  return j;
}

int RunEvalL3(const Env& env, const EvalL3Flags& f) {
  if (!(f.target_precision > 0 && f.target_precision <= 1)) {
    return UsageError(fmt::format("--target-precision {} is outside (0, 1]", f.target_precision));
  }
  if (!(f.threshold > 0 && f.threshold <= 1)) {
    return UsageError(fmt::format("--threshold {} is outside (0, 1]", f.threshold));
  }
  if (f.bands < 2 || f.bands > 16)
    return UsageError(fmt::format("--bands {} is outside [2, 16]", f.bands));
  if (f.probe_radius < 0 || f.probe_radius > 3) {
    return UsageError(fmt::format("--probe-radius {} is outside [0, 3]", f.probe_radius));
  }
  const std::string dir = f.data_dir + "/";
  const std::string qqp_path =
      f.qqp.empty() ? dir + "gptcache_similiar_qqp_full.json.tar.gz" : f.qqp;

  // Every file first, so a missing one is reported before any work.
  std::vector<Dataset> datasets(3);
  auto paws_dev = LoadPaws(*env.fs, dir + "paws_wiki_labeled_final_dev.tsv");
  if (!paws_dev.ok()) return ReportError(paws_dev.status());
  auto paws_test = LoadPaws(*env.fs, dir + "paws_wiki_labeled_final_test.tsv");
  if (!paws_test.ok()) return ReportError(paws_test.status());
  auto qqp = LoadQqp(*env.fs, qqp_path);
  if (!qqp.ok()) return ReportError(qqp.status());
  auto mock = LoadMock(*env.fs, dir + "gptcache_mock_data.json");
  if (!mock.ok()) return ReportError(mock.status());
  auto arena1 = LoadArena(*env.fs, dir + "arena_hard_v0.1_question.jsonl");
  if (!arena1.ok()) return ReportError(arena1.status());
  auto arena2 = LoadArena(*env.fs, dir + "arena_hard_v2.0_question.jsonl");
  if (!arena2.ok()) return ReportError(arena2.status());

  datasets[0].name = "PAWS-Wiki";
  datasets[0].dev_source = "paws_wiki_labeled_final_dev.tsv";
  datasets[0].test_source = "paws_wiki_labeled_final_test.tsv";
  datasets[0].dev = std::move(*paws_dev);
  datasets[0].test = std::move(*paws_test);
  datasets[1].name = "QQP";
  datasets[1].dev_source = "similiar_qqp_full.json, even items";
  datasets[1].test_source = "similiar_qqp_full.json, odd items";
  std::tie(datasets[1].dev, datasets[1].test) = SplitHalves(*qqp);
  // Mock prompts: its paraphrase pairs are the positives; negatives are each
  // `similar` against the next pair's `origin` (same domain, other question)
  // and the two prompts of each Arena-Hard v0.1 topic cluster.
  const std::vector<Pair> mock_pairs = MockPairs(*mock, *arena1);
  datasets[2].name = "GPTCache mock";
  datasets[2].dev_source = "mock_data.json + arena-hard v0.1 clusters, even items";
  datasets[2].test_source = "mock_data.json + arena-hard v0.1 clusters, odd items";
  std::tie(datasets[2].dev, datasets[2].test) = SplitHalves(mock_pairs);
  for (Dataset& d : datasets) {
    Cap(d.dev, f.max_pairs);
    Cap(d.test, f.max_pairs);
  }

  const std::vector<Variant> variants = Variants();
  std::vector<DatasetResult> results;
  for (const Dataset& d : datasets) {
    DatasetResult r;
    r.data = &d;
    r.dev = ScoreAll(d.dev, variants);
    r.test = ScoreAll(d.test, variants);
    for (size_t v = 0; v < variants.size(); ++v) {
      r.dev_curve.push_back(Curve(r.dev.score[v], r.dev.label));
      r.test_curve.push_back(Curve(r.test.score[v], r.test.label));
      r.chosen.push_back(Choose(r.dev_curve[v], f.target_precision));
    }
    results.push_back(std::move(r));
  }

  std::printf(
      "strata eval l3: confirmation score (weighted LCS + guards) on labelled pairs; "
      "target precision %.2f, default threshold %.2f\n\n",
      f.target_precision, f.threshold);
  std::printf("| %-13s | %-58s | %6s | %5s | %16s |\n", "dataset", "split", "pairs", "pos",
              "identical text");
  std::printf(
      "|:--------------|:-----------------------------------------------------------|"
      "-------:|------:|-----------------:|\n");
  for (const DatasetResult& r : results) {
    for (int split = 0; split < 2; ++split) {
      const Scored& s = split == 0 ? r.dev : r.test;
      size_t pos = 0;
      for (int l : s.label) pos += static_cast<size_t>(l);
      std::printf(
          "| %-13s | %-58s | %6zu | %5zu | %16s |\n", r.data->name.c_str(),
          fmt::format("{}: {}", split == 0 ? "dev" : "test",
                      split == 0 ? r.data->dev_source : r.data->test_source)
              .c_str(),
          s.label.size(), pos,
          s.identical ? fmt::format("{} ({} pos)", s.identical, s.identical_pos).c_str() : "0");
    }
  }
  std::printf(
      "\n'identical text': pairs whose normalized token sequences are equal; when some "
      "of\nthose are labelled different, no text-only measure can reach precision 1.\n");

  for (const DatasetResult& r : results) {
    std::printf("\n### %s: precision/recall over the threshold (default settings)\n\n",
                r.data->name.c_str());
    std::fputs(CurveTable(r, f.threshold).c_str(), stdout);
    if (r.chosen[0]) {
      std::printf("\nlowest dev threshold with precision >= %.2f at and above it: %.2f\n",
                  f.target_precision, *r.chosen[0]);
    } else {
      std::printf("\nno dev threshold keeps precision >= %.2f (best dev precision %s)\n",
                  f.target_precision,
                  Pct(std::max_element(r.dev_curve[0].begin(), r.dev_curve[0].end(),
                                       [](const Point& a, const Point& b) {
                                         return a.precision() < b.precision();
                                       })
                          ->precision())
                      .c_str());
    }
    std::printf(
        "\nablation (each row a complete setting; thresholds chosen on dev, measured on "
        "test):\n\n");
    std::fputs(AblationTable(r, variants, f.threshold, f.target_precision).c_str(), stdout);
    std::printf("\nguards at threshold %.2f on dev (pairs the unguarded weighted LCS accepts):\n\n",
                f.threshold);
    std::fputs(GuardTable(r, f.threshold).c_str(), stdout);
  }

  // The index: store one side, look the other up.
  std::vector<LookupCase> cases;
  cases.push_back(PairsLookup("PAWS test", datasets[0].test));
  cases.push_back(PairsLookup("QQP test", datasets[1].test));
  {
    // Every mock origin stored; queries are their paraphrases and all
    // Arena-Hard prompts (v0.1 and v2.0), which no stored text answers.
    LookupCase c;
    c.name = "mock + arena";
    c.labels = *mock;
    for (size_t i = 0; i < mock->size(); ++i) {
      c.stored.push_back((*mock)[i].a);
      c.queries.push_back({(*mock)[i].b, static_cast<int>(i), false});
    }
    for (const auto* arena : {&*arena1, &*arena2}) {
      for (const ArenaPrompt& p : *arena) c.queries.push_back({p.prompt, -1, true});
    }
    cases.push_back(std::move(c));
  }
  std::vector<LookupResult> lookups;
  for (const LookupCase& c : cases) {
    auto r = RunLookup(c, f);
    if (!r.ok()) return ReportError(r.status());
    lookups.push_back(*r);
  }
  const int max_distance = f.bands * (f.probe_radius + 1) - 1;
  std::printf(
      "\n### Cache lookups through NearDupIndex (threshold %.2f, %d bands, probe radius %d: "
      "every fingerprint within %d bits is a candidate)\n\n",
      f.threshold, f.bands, f.probe_radius, max_distance);
  std::fputs(LookupTable(lookups).c_str(), stdout);
  std::printf(
      "\nA hit is correct when the stored text has the query's token sequence or a labelled pair\n"
      "of the split calls them paraphrases; wrong when a label says they differ or the query is\n"
      "an unrelated Arena-Hard prompt; unlabelled otherwise (texts recur across pairs).\n"
      "P: correct / (correct + wrong); P strict: correct / hits; R: positive queries with a\n"
      "correct hit / positive queries (an exact duplicate stored for another pair counts);\n"
      "pair R: positive queries whose labelled paraphrase scores >= the threshold directly (no\n"
      "index); reach: the share of those whose fingerprints are within the index's max distance\n"
      "(what the banded candidate stage can find).\n");

  if (!f.svg.empty()) {
    if (util::Status st =
            env.fs->WriteFileAtomic(f.svg, Svg(results, f.threshold, f.target_precision));
        !st.ok()) {
      return ReportError(st);
    }
    std::printf("\nplot: %s\n", f.svg.c_str());
  }
  if (!f.json.empty()) {
    const std::string j = Json(results, variants, lookups, f, max_distance).dump(2) + "\n";
    if (util::Status st = env.fs->WriteFileAtomic(f.json, j); !st.ok()) return ReportError(st);
    std::printf("json: %s\n", f.json.c_str());
  }
  return kExitOk;
}

}  // namespace

Command RegisterEvalL3(CLI::App& app) {
  auto f = std::make_shared<EvalL3Flags>();
  CLI::App* eval = EvalGroup(app);
  CLI::App* cmd = eval->add_subcommand(
      "l3",
      "Precision/recall of the L3 near-duplicate tier on paraphrase sets (PAWS, QQP, "
      "GPTCache mock + Arena-Hard)");
  cmd->add_option("--data-dir", f->data_dir, "Directory of the prompt sets")->capture_default_str();
  cmd->add_option("--qqp", f->qqp,
                  "QQP pairs: the .json.tar.gz or an extracted .json (default: "
                  "<data-dir>/gptcache_similiar_qqp_full.json.tar.gz)");
  cmd->add_option("--target-precision", f->target_precision,
                  "Precision the chosen threshold must keep on dev")
      ->capture_default_str();
  cmd->add_option("--threshold", f->threshold, "Similarity threshold to report and to look up at")
      ->capture_default_str();
  cmd->add_option("--bands", f->bands, "NearDupIndex fingerprint blocks")->capture_default_str();
  cmd->add_option("--probe-radius", f->probe_radius, "NearDupIndex bits flipped per block")
      ->capture_default_str();
  cmd->add_option("--max-pairs", f->max_pairs, "Use at most this many pairs per split (0 = all)")
      ->capture_default_str();
  cmd->add_option("--json", f->json, "Also write the results as JSON to this file");
  cmd->add_option("--svg", f->svg, "Write the precision/recall plot here ('' = none)")
      ->capture_default_str();
  return {cmd, [f](const Env& env) { return RunEvalL3(env, *f); }};
}

}  // namespace strata::cli
