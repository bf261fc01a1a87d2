#include "obs/metrics.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include <fmt/format.h>

#include "util/status.h"

namespace strata::obs {
namespace {

bool ValidName(const std::string& s, bool label) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alpha =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (!label && c == ':');
    const bool digit = c >= '0' && c <= '9';
    if (!(alpha || (i > 0 && digit))) return false;
  }
  return !(label && s.rfind("__", 0) == 0);
}

std::string EscapeLabel(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string EscapeHelp(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

std::string Labels(const std::vector<std::string>& names, const std::vector<std::string>& values,
                   const std::string& extra_name = "", const std::string& extra_value = "") {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += (out.empty() ? "" : ",") + names[i] + "=\"" + EscapeLabel(values[i]) + "\"";
  }
  if (!extra_name.empty()) {
    out += (out.empty() ? "" : ",") + extra_name + "=\"" + extra_value + "\"";
  }
  return out.empty() ? "" : "{" + out + "}";
}

void AtomicAdd(std::atomic<double>& a, double by) {
  double cur = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(cur, cur + by, std::memory_order_relaxed)) {
  }
}

}  // namespace

void CounterValue::Inc(double by) {
  if (by > 0) AtomicAdd(value_, by);
}

void GaugeValue::Add(double by) { AtomicAdd(value_, by); }

HistogramValue::HistogramValue(const std::vector<double>& bounds)
    : bounds_(bounds), buckets_(new std::atomic<uint64_t>[bounds.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void HistogramValue::Observe(double v) {
  const size_t i =
      static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, v);
  count_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<uint64_t> HistogramValue::CumulativeCounts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  uint64_t acc = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    acc += buckets_[i].load(std::memory_order_relaxed);
    out[i] = acc;
  }
  return out;
}

template <typename V>
V& Family<V>::With(const std::vector<std::string>& label_values) {
  STRATA_CHECK_MSG(label_values.size() == labels_.size(), "wrong number of label values");
  std::lock_guard<std::mutex> lock(mu_);
  STRATA_CHECK_MSG(read_children_.count(label_values) == 0, "label set is read from a callback");
  auto& slot = children_[label_values];
  if (!slot) slot = make_();
  return *slot;
}

template class Family<CounterValue>;
template class Family<GaugeValue>;
template class Family<HistogramValue>;

struct MetricsRegistry::Entry {
  std::string name, help, type;
  std::unique_ptr<Family<CounterValue>> counter;
  std::unique_ptr<Family<GaugeValue>> gauge;
  std::unique_ptr<Family<HistogramValue>> histogram;
  std::function<double()> callback;
};

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

MetricsRegistry::Entry& MetricsRegistry::Add(const std::string& name, const std::string& help,
                                             const char* type) {
  STRATA_CHECK_MSG(ValidName(name, false), "invalid metric name");
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& e : entries_) STRATA_CHECK_MSG(e->name != name, "metric registered twice");
  entries_.push_back(std::make_unique<Entry>());
  Entry& e = *entries_.back();
  e.name = name;
  e.help = help;
  e.type = type;
  return e;
}

Family<CounterValue>& MetricsRegistry::Counter(const std::string& name, const std::string& help,
                                               std::vector<std::string> labels) {
  for (const auto& l : labels) STRATA_CHECK_MSG(ValidName(l, true), "invalid label name");
  Entry& e = Add(name, help, "counter");
  e.counter.reset(
      new Family<CounterValue>(std::move(labels), [] { return std::make_unique<CounterValue>(); }));
  return *e.counter;
}

Family<GaugeValue>& MetricsRegistry::Gauge(const std::string& name, const std::string& help,
                                           std::vector<std::string> labels) {
  for (const auto& l : labels) STRATA_CHECK_MSG(ValidName(l, true), "invalid label name");
  Entry& e = Add(name, help, "gauge");
  e.gauge.reset(
      new Family<GaugeValue>(std::move(labels), [] { return std::make_unique<GaugeValue>(); }));
  return *e.gauge;
}

Family<HistogramValue>& MetricsRegistry::Histogram(const std::string& name, const std::string& help,
                                                   std::vector<std::string> labels,
                                                   std::vector<double> bounds) {
  for (const auto& l : labels) {
    STRATA_CHECK_MSG(ValidName(l, true) && l != "le", "invalid label name");
  }
  STRATA_CHECK_MSG(std::is_sorted(bounds.begin(), bounds.end()), "bucket bounds must be sorted");
  Entry& e = Add(name, help, "histogram");
  e.histogram.reset(new Family<HistogramValue>(
      std::move(labels), [bounds] { return std::make_unique<HistogramValue>(bounds); }));
  return *e.histogram;
}

void MetricsRegistry::GaugeCallback(const std::string& name, const std::string& help,
                                    std::function<double()> read) {
  Entry& e = Add(name, help, "gauge");
  e.callback = std::move(read);
}

void MetricsRegistry::CounterCallback(const std::string& name, const std::string& help,
                                      std::function<double()> read) {
  Entry& e = Add(name, help, "counter");
  e.callback = std::move(read);
}

void MetricsRegistry::ChildCallback(const std::string& name, std::vector<std::string> label_values,
                                    std::function<double()> read) {
  std::lock_guard<std::mutex> lock(mu_);
  auto attach = [&](auto& family) {
    STRATA_CHECK_MSG(label_values.size() == family.labels_.size(), "wrong number of label values");
    std::lock_guard<std::mutex> l(family.mu_);
    STRATA_CHECK_MSG(
        family.children_.count(label_values) == 0 && family.read_children_.count(label_values) == 0,
        "label set registered twice");
    family.read_children_.emplace(std::move(label_values), std::move(read));
  };
  for (const auto& e : entries_) {
    if (e->name != name) continue;
    STRATA_CHECK_MSG(e->counter || e->gauge, "ChildCallback needs a labelled counter or gauge");
    if (e->counter)
      attach(*e->counter);
    else
      attach(*e->gauge);
    return;
  }
  STRATA_CHECK_MSG(false, "ChildCallback: no such metric family");
}

// A counter or gauge family's samples, stored and read-at-render-time
// children merged in label order.
template <typename V>
void MetricsRegistry::RenderChildren(const std::string& name, const Family<V>& family,
                                     std::string& out) {
  std::map<std::vector<std::string>, double> samples;
  std::vector<std::pair<std::vector<std::string>, std::function<double()>>> reads;
  {
    std::lock_guard<std::mutex> l(family.mu_);
    for (const auto& [values, v] : family.children_) samples.emplace(values, v->Get());
    reads.assign(family.read_children_.begin(), family.read_children_.end());
  }
  // Outside the family's lock: a callback may take its owner's lock.
  for (const auto& [values, read] : reads) samples.emplace(values, read());
  for (const auto& [values, v] : samples) {
    out += name + Labels(family.labels_, values) + " " + FormatValue(v) + "\n";
  }
}

std::string MetricsRegistry::Render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& e : entries_) {
    out += "# HELP " + e->name + " " + EscapeHelp(e->help) + "\n";
    out += "# TYPE " + e->name + " " + e->type + "\n";
    if (e->callback) {
      out += e->name + " " + FormatValue(e->callback()) + "\n";
    } else if (e->counter) {
      RenderChildren(e->name, *e->counter, out);
    } else if (e->gauge) {
      RenderChildren(e->name, *e->gauge, out);
    } else if (e->histogram) {
      std::lock_guard<std::mutex> l(e->histogram->mu_);
      for (const auto& [values, h] : e->histogram->children_) {
        const auto counts = h->CumulativeCounts();
        for (size_t i = 0; i < counts.size(); ++i) {
          const std::string le = i < h->bounds().size() ? FormatValue(h->bounds()[i]) : "+Inf";
          out += e->name + "_bucket" + Labels(e->histogram->labels_, values, "le", le) + " " +
                 std::to_string(counts[i]) + "\n";
        }
        out += e->name + "_sum" + Labels(e->histogram->labels_, values) + " " +
               FormatValue(h->Sum()) + "\n";
        out += e->name + "_count" + Labels(e->histogram->labels_, values) + " " +
               std::to_string(h->Count()) + "\n";
      }
    }
  }
  return out;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> b;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) b.push_back(v);
  return b;
}

}  // namespace strata::obs
