// obs/metrics.h — counters, gauges and histograms, rendered in the Prometheus
// text exposition format (version 0.0.4) for GET /metrics.
//
// Promise: updating a metric is lock-free (atomics) and safe from any thread;
// creating a labelled child takes a short lock once per label set. Render()
// gives a consistent-enough snapshot: each sample is read atomically, families
// in registration order, children in label order. Names and label names are
// checked against the Prometheus grammar at registration (a bad name is a
// programming error: CHECK). Label values are escaped.
//
// Threading: thread-safe.
//
// Usage:
//   MetricsRegistry reg;
//   auto& requests = reg.Counter("strata_requests_total", "Requests by endpoint and status",
//                                {"endpoint", "status"});
//   requests.With({"/v1/chat/completions", "200"}).Inc();
//   auto& ttft = reg.Histogram("strata_ttft_seconds", "Time to first token", {}, {0.05, 0.1});
//   ttft.With({}).Observe(0.083);
//   std::string text = reg.Render();
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace strata::obs {

class CounterValue {
 public:
  void Inc(double by = 1.0);  // by >= 0
  double Get() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class GaugeValue {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double by);
  double Get() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class HistogramValue {
 public:
  explicit HistogramValue(const std::vector<double>& bounds);
  void Observe(double v);
  // Cumulative counts per upper bound (last = +Inf), sum, count.
  std::vector<uint64_t> CumulativeCounts() const;
  double Sum() const { return sum_.load(std::memory_order_relaxed); }
  uint64_t Count() const { return count_.load(std::memory_order_relaxed); }
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_.size() + 1 (the +Inf bucket)
  std::atomic<double> sum_{0.0};
  std::atomic<uint64_t> count_{0};
};

// A metric with a fixed list of label names; With(values) returns the child
// for one combination of label values (created on first use).
template <typename V>
class Family {
 public:
  V& With(const std::vector<std::string>& label_values);

 private:
  friend class MetricsRegistry;
  Family(std::vector<std::string> labels, std::function<std::unique_ptr<V>()> make)
      : labels_(std::move(labels)), make_(std::move(make)) {}
  const std::vector<std::string> labels_;
  const std::function<std::unique_ptr<V>()> make_;
  mutable std::mutex mu_;
  // Guarded by mu_; a label set is in at most one of the two maps.
  std::map<std::vector<std::string>, std::unique_ptr<V>> children_;
  std::map<std::vector<std::string>, std::function<double()>> read_children_;  // ChildCallback
};

class MetricsRegistry {
 public:
  MetricsRegistry();
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  Family<CounterValue>& Counter(const std::string& name, const std::string& help,
                                std::vector<std::string> labels = {});
  Family<GaugeValue>& Gauge(const std::string& name, const std::string& help,
                            std::vector<std::string> labels = {});
  Family<HistogramValue>& Histogram(const std::string& name, const std::string& help,
                                    std::vector<std::string> labels, std::vector<double> bounds);
  // A gauge read from `read` at render time (e.g. the scheduler's queue depth).
  void GaugeCallback(const std::string& name, const std::string& help,
                     std::function<double()> read);
  // A counter kept elsewhere (monotonic), read at render time.
  void CounterCallback(const std::string& name, const std::string& help,
                       std::function<double()> read);

  // One child of the labelled counter or gauge family `name` whose value is
  // read from `read` at render time: a tier of a per-tier family that another
  // component keeps (the KV pool's prefix cache as
  // strata_cache_hits_total{tier="l2"}). The family's owner registers it
  // first. A missing family, a histogram, the wrong number of label values or
  // a label set already in use is a programming error (CHECK). `read` runs
  // under the registry's lock: it must not call back into the registry.
  void ChildCallback(const std::string& name, std::vector<std::string> label_values,
                     std::function<double()> read);

  std::string Render() const;

 private:
  struct Entry;
  template <typename V>
  static void RenderChildren(const std::string& name, const Family<V>& family, std::string& out);
  Entry& Add(const std::string& name, const std::string& help, const char* type);
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_;  // guarded by mu_ (registration order)
};

// Bucket bounds: `count` values from `start`, each `factor` times the previous.
std::vector<double> ExponentialBuckets(double start, double factor, int count);

}  // namespace strata::obs
