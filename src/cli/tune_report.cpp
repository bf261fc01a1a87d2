#include "cli/tune_report.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "cli/serve_config.h"
#include "config/config.h"

namespace strata::cli {
namespace {

std::string Escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// A knob's value as a person reads it (bytes in MiB, switches as on/off).
std::string Show(const std::string& key, double v) {
  if (key == "l1.bytes") return fmt::format("{:.0f} MiB", v / (1 << 20));
  if (key == "cache.coalesce" || key == "l3.mode" || key == "semantic.mode") {
    return v != 0 ? "on" : "off";
  }
  return fmt::format("{}", v);
}

std::string Describe(const tune::Settings& s) {
  std::string out;
  for (const auto& [k, v] : s)
    out += fmt::format("{}{} = {}", out.empty() ? "" : "\n", k, Show(k, v));
  return out;
}

// White (0) to red (>= 1) through orange, for a sensitivity.
std::string Heat(double x) {
  const double t = std::clamp(x, 0.0, 1.0);
  const int g = static_cast<int>(std::lround(255 - 175 * t));
  const int b = static_cast<int>(std::lround(255 - 215 * t));
  return fmt::format("rgb(255,{},{})", g, b);
}

// Red (low quality) to green (1).
std::string QualityColour(double q) {
  const double t = std::clamp((q - 0.9) / 0.1, 0.0, 1.0);
  return fmt::format("rgb({},{},80)", static_cast<int>(std::lround(220 - 170 * t)),
                     static_cast<int>(std::lround(60 + 120 * t)));
}

}  // namespace

std::string SensitivityCsv(const tune::SensitivityResult& r) {
  std::string out = "scenario,knob,throughput,ttft_p95,quality,largest,frozen\n";
  for (const tune::SensitivityRow& row : r.rows) {
    const bool frozen = std::find(r.frozen.begin(), r.frozen.end(), row.knob) != r.frozen.end();
    out += fmt::format("{},{},{:.6f},{:.6f},{:.6f},{:.6f},{}\n", row.scenario, row.knob,
                       row.throughput, row.ttft_p95, row.quality, row.largest(),
                       frozen ? "yes" : "no");
  }
  return out;
}

std::string SensitivitySvg(const tune::SensitivityResult& r,
                           const std::vector<std::string>& scenarios,
                           const std::vector<tune::TuneKnob>& knobs, double freeze_below) {
  const int cell_w = 86, cell_h = 30, left = 190, top = 150;
  const int w = left + cell_w * static_cast<int>(knobs.size()) + 20;
  const int h = top + cell_h * static_cast<int>(scenarios.size()) + 60;
  std::map<std::pair<std::string, std::string>, double> value;
  for (const tune::SensitivityRow& row : r.rows) value[{row.scenario, row.knob}] = row.largest();
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<title>strata tune sensitivity</title>\n"
      "<text x=\"10\" y=\"20\" font-size=\"15\">Sensitivity: largest |relative change of "
      "throughput, P95 TTFT or quality| per relative change of the knob</text>\n"
      "<text x=\"10\" y=\"38\" fill=\"#555\">Knobs below {} everywhere are frozen (struck "
      "through); colour saturates at 1.</text>\n",
      w, h, freeze_below);
  for (size_t j = 0; j < knobs.size(); ++j) {
    const bool frozen = std::find(r.frozen.begin(), r.frozen.end(), knobs[j].key) != r.frozen.end();
    const int x = left + static_cast<int>(j) * cell_w + cell_w / 2;
    svg += fmt::format("<text transform=\"translate({},{}) rotate(-40)\"{}>{}</text>\n", x, top - 8,
                       frozen ? " fill=\"#999\" text-decoration=\"line-through\"" : "",
                       Escape(knobs[j].key));
  }
  for (size_t i = 0; i < scenarios.size(); ++i) {
    const int y = top + static_cast<int>(i) * cell_h;
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", left - 8,
                       y + cell_h / 2 + 4, Escape(scenarios[i]));
    for (size_t j = 0; j < knobs.size(); ++j) {
      const auto it = value.find({scenarios[i], knobs[j].key});
      const int x = left + static_cast<int>(j) * cell_w;
      if (it == value.end()) {
        svg += fmt::format(
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#eee\" stroke=\"#fff\"/>\n",
            x, y, cell_w, cell_h);
        continue;
      }
      svg += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"#fff\">"
          "<title>{} × {}: {:.3f}</title></rect>\n"
          "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{:.2f}</text>\n",
          x, y, cell_w, cell_h, Heat(it->second), Escape(scenarios[i]), Escape(knobs[j].key),
          it->second, x + cell_w / 2, y + cell_h / 2 + 4, it->second);
    }
  }
  if (!r.complete) {
    svg += fmt::format(
        "<text x=\"10\" y=\"{}\" fill=\"#a00\">The time budget ran out: grey "
        "cells were not measured.</text>\n",
        h - 20);
  }
  return svg + "</svg>\n";
}

std::string FrontCsv(const tune::ParetoResult& r, const std::vector<tune::TuneKnob>& knobs) {
  std::string out = "rank,throughput_ratio,ttft_p95_ratio,quality,violation";
  for (const tune::TuneKnob& k : knobs) out += "," + k.key;
  out += "\n";
  auto line = [&](const std::string& rank, const tune::ParetoPoint& p) {
    std::string l = fmt::format("{},{:.6f},{:.6f},{:.6f},{:.6f}", rank, p.throughput_ratio,
                                p.ttft_p95_ratio, p.quality, p.violation);
    for (const tune::TuneKnob& k : knobs) {
      const auto it = p.settings.find(k.key);
      l += it == p.settings.end() ? "," : fmt::format(",{}", it->second);
    }
    return l + "\n";
  };
  for (const tune::ParetoPoint& p : r.front) out += line("0", p);
  out += line("base", r.base);
  return out;
}

std::string FrontHtml(const tune::ParetoResult& r, const std::vector<tune::TuneKnob>& knobs,
                      const std::vector<std::string>& scenarios, const tune::ParetoPoint* chosen,
                      const std::string& source) {
  const int w = 720, h = 480, pad = 60;
  double x_max = 1.2, y_max = 1.2;
  for (const tune::ParetoPoint& p : r.evaluated) {
    x_max = std::max(x_max, std::min(p.ttft_p95_ratio, 20.0));
    y_max = std::max(y_max, std::min(p.throughput_ratio, 20.0));
  }
  auto px = [&](double x) { return pad + (w - 2 * pad) * std::min(x, x_max) / x_max; };
  auto py = [&](double y) { return h - pad - (h - 2 * pad) * std::min(y, y_max) / y_max; };
  std::string plot = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>"
      "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>\n"
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">P95 TTFT ÷ the base's (lower is better)"
      "</text>\n<text transform=\"translate(16,{}) rotate(-90)\" text-anchor=\"middle\">"
      "throughput ÷ the base's (higher is better)</text>\n"
      "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#bbb\" stroke-dasharray=\"4\"/>"
      "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#bbb\" stroke-dasharray=\"4\"/>\n",
      w, h, pad, h - pad, w - pad, h - pad, pad, h - pad, pad, pad, w / 2, h - 20, h / 2, px(1),
      pad, px(1), h - pad, pad, py(1), w - pad, py(1));
  for (double t : {0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0}) {
    if (t > x_max) break;
    plot += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>", px(t),
                        h - pad + 16, t);
  }
  for (double t : {0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0}) {
    if (t > y_max) break;
    plot +=
        fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>", pad - 6, py(t) + 4, t);
  }
  plot += "\n";
  std::vector<const tune::ParetoPoint*> front;
  for (const tune::ParetoPoint& p : r.front) front.push_back(&p);
  std::sort(front.begin(), front.end(),
            [](const auto* a, const auto* b) { return a->ttft_p95_ratio < b->ttft_p95_ratio; });
  std::string path;
  for (const auto* p : front) {
    path += fmt::format("{}{:.1f},{:.1f}", path.empty() ? "M" : " L", px(p->ttft_p95_ratio),
                        py(p->throughput_ratio));
  }
  if (!path.empty()) {
    plot +=
        fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"#36c\" stroke-width=\"1.5\"/>\n", path);
  }
  for (const tune::ParetoPoint& p : r.evaluated) {
    plot += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{}\" fill=\"{}\" stroke=\"{}\" "
        "opacity=\"{}\"><title>throughput ×{:.2f}, P95 TTFT ×{:.2f}, quality {:.4f}{}\n{}</title>"
        "</circle>\n",
        px(p.ttft_p95_ratio), py(p.throughput_ratio), p.rank == 0 ? 5 : 3, QualityColour(p.quality),
        p.violation > 0 ? "#000" : "none", p.rank == 0 ? 1.0 : 0.45, p.throughput_ratio,
        p.ttft_p95_ratio, p.quality,
        p.violation > 0 ? fmt::format(", violates the constraints by {:.2f}", p.violation) : "",
        Escape(Describe(p.settings)));
  }
  plot += fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"10\" height=\"10\" fill=\"none\" stroke=\"#000\" "
      "stroke-width=\"2\"><title>the base configuration</title></rect>\n",
      px(r.base.ttft_p95_ratio) - 5, py(r.base.throughput_ratio) - 5);
  if (chosen != nullptr) {
    plot += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"10\" fill=\"none\" stroke=\"#36c\" "
        "stroke-width=\"2.5\"><title>chosen (best.toml)\n{}</title></circle>\n",
        px(chosen->ttft_p95_ratio), py(chosen->throughput_ratio),
        Escape(Describe(chosen->settings)));
  }
  plot += "</svg>\n";
  std::string table = "<table><thead><tr><th>throughput ×</th><th>P95 TTFT ×</th><th>quality</th>";
  for (const tune::TuneKnob& k : knobs) table += "<th>" + Escape(k.key) + "</th>";
  table += "</tr></thead><tbody>\n";
  auto row = [&](const tune::ParetoPoint& p, const std::string& cls) {
    std::string tr = fmt::format("<tr class=\"{}\"><td>{:.3f}</td><td>{:.3f}</td><td>{:.4f}</td>",
                                 cls, p.throughput_ratio, p.ttft_p95_ratio, p.quality);
    for (const tune::TuneKnob& k : knobs) {
      const auto it = p.settings.find(k.key);
      tr += "<td>" + (it == p.settings.end() ? std::string("–") : Escape(Show(k.key, it->second))) +
            "</td>";
    }
    return tr + "</tr>\n";
  };
  table += row(r.base, "base");
  for (const tune::ParetoPoint& p : r.front) {
    const bool is_chosen = chosen != nullptr && p.settings == chosen->settings;
    table += row(p, is_chosen ? "chosen" : "");
  }
  table += "</tbody></table>\n";
  std::string per;
  if (chosen != nullptr) {
    per =
        "<h2>The chosen point per scenario (against the base)</h2><table><thead><tr>"
        "<th>scenario</th><th>throughput (req/s)</th><th>P95 TTFT (ms)</th><th>P99 TTFT "
        "(ms)</th><th>errors</th><th>quality</th></tr></thead><tbody>\n";
    for (size_t i = 0;
         i < scenarios.size() && i < chosen->per_scenario.size() && i < r.base.per_scenario.size();
         ++i) {
      const tune::Measured& a = r.base.per_scenario[i];
      const tune::Measured& b = chosen->per_scenario[i];
      per += fmt::format(
          "<tr><td>{}</td><td>{:.3f} → {:.3f}</td><td>{:.0f} → {:.0f}</td><td>{:.0f} → "
          "{:.0f}</td><td>{:.4f} → {:.4f}</td><td>{:.4f} → {:.4f}</td></tr>\n",
          Escape(scenarios[i]), a.throughput, b.throughput, a.ttft_p95_s * 1e3, b.ttft_p95_s * 1e3,
          a.ttft_p99_s * 1e3, b.ttft_p99_s * 1e3, a.error_rate, b.error_rate, a.quality, b.quality);
    }
    per += "</tbody></table>\n";
  }
  return fmt::format(
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>strata tune pareto</title>\n"
      "<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}"
      "table{{border-collapse:collapse;font-size:13px}}td,th{{border:1px solid #ddd;padding:3px "
      "6px;text-align:right}}tr.chosen{{background:#e6efff}}tr.base{{background:#f4f4f4}}"
      "</style></head><body>\n<h1>The Pareto front</h1>\n<p>{} configurations measured on {} "
      "scenario(s) ({}); objectives: throughput and P95 time to first token as geometric means of "
      "the ratio to the base configuration over the scenarios, and the lowest quality. Points "
      "outlined in black break a constraint (P99 TTFT SLO or error rate). Hover a point for its "
      "settings.{}</p>\n{}<h2>The front</h2>\n{}{}</body></html>\n",
      r.evaluated.size(), scenarios.size(), Escape(source),
      r.complete ? "" : " <b>The time budget ran out before the last generation.</b>", plot, table,
      per);
}

// What the simulator models of `f`. A tier in opt-in mode serves only the
// requests that ask for it, and a scenario's never do: it counts as off.
tune::SimConfig SimConfigOf(const ServeFlags& f) {
  tune::SimConfig c;
  c.parallel = f.parallel;
  c.queue = f.queue;
  c.batch_tokens = f.batch_tokens;
  c.ctx = f.ctx;
  c.kv_tokens = f.kv_tokens;
  c.l1_bytes = static_cast<int64_t>(f.l1_bytes);
  c.l1_ttl_s = f.l1_ttl_s;
  c.coalesce = f.coalesce;
  c.l3 = f.cache.l3 == "on";
  c.l3_similarity = f.cache.l3_similarity;
  c.semantic = f.semantic.mode == "on";
  c.semantic_similarity = f.semantic.similarity;
  c.semantic_verify = f.semantic.verify;
  c.semantic_verify_min = static_cast<int64_t>(f.semantic.verify_min);
  c.max_tokens_cap = f.max_tokens_cap;
  return c;
}

// `base` with the tuner's settings: the fields the simulator's knobs name.
// A tier switched off keeps the base's opt-in (it serves no scenario request either).
ServeFlags WithSettings(ServeFlags f, const tune::Settings& settings) {
  const tune::SimConfig base = SimConfigOf(f);
  for (const auto& [key, v] : settings) {
    if (v == tune::KnobValue(base, key)) continue;  // as it was (kv_tokens 0 stays 0)
    if (key == "engine.parallel") f.parallel = static_cast<int32_t>(v);
    if (key == "engine.batch_tokens") f.batch_tokens = static_cast<int32_t>(v);
    if (key == "engine.queue") f.queue = static_cast<int32_t>(v);
    if (key == "engine.kv_tokens") f.kv_tokens = static_cast<int32_t>(v);
    if (key == "l1.bytes") f.l1_bytes = static_cast<uint64_t>(v);
    if (key == "l1.ttl") f.l1_ttl_s = v;
    if (key == "cache.coalesce") f.coalesce = v != 0;
    if (key == "l3.mode") f.cache.l3 = v != 0 ? "on" : (f.cache.l3 == "on" ? "off" : f.cache.l3);
    if (key == "l3.similarity") f.cache.l3_similarity = v;
    if (key == "semantic.mode") {
      f.semantic.mode = v != 0 ? "on" : (f.semantic.mode == "on" ? "off" : f.semantic.mode);
    }
    if (key == "semantic.similarity") f.semantic.similarity = v;
    if (key == "limits.max_tokens_cap") f.max_tokens_cap = static_cast<int32_t>(v);
  }
  return f;
}

// A configuration file of every knob of `f` that differs from serve's
// defaults ([[backend]] tables are not repeated: the comment says so).
std::string RenderConfig(const ServeFlags& f, const std::string& comment) {
  std::map<std::string, std::vector<std::string>> tables;
  bool backends = false;
  for (const ServeKnob* k : ChangedKnobs(ServeFlags{}, f)) {
    if (k->knob.type == config::Type::kTables) {
      backends = true;
      continue;
    }
    const size_t dot = k->knob.key.find('.');
    tables[k->knob.key.substr(0, dot)].push_back(k->knob.key.substr(dot + 1) + " = " + k->get(f));
  }
  std::string out;
  std::string text = comment;
  if (backends) text += "\nThe base configuration's [[backend]] tables are not repeated here.";
  for (size_t at = 0; at < text.size();) {
    const size_t nl = std::min(text.find('\n', at), text.size());
    out += "# " + text.substr(at, nl - at) + "\n";
    at = nl + 1;
  }
  for (const auto& [table, lines] : tables) {
    out += "\n[" + table + "]\n";
    for (const std::string& l : lines) out += l + "\n";
  }
  return out;
}

util::StatusOr<ServeFlags> BaseFlags(const Env& env, const std::string& path) {
  ServeFlags f;
  if (!path.empty()) {
    STRATA_ASSIGN_OR_RETURN(config::Document doc, ReadConfigFile(env, path, ServeFileSchema()));
    ApplyConfig(doc, {}, f);
  }
  return f;
}

}  // namespace strata::cli
