#include "obs/metrics.h"

#include <gtest/gtest.h>

#include <thread>

namespace strata::obs {
namespace {

TEST(Metrics, RendersTheTextExpositionFormat) {
  MetricsRegistry reg;
  auto& req = reg.Counter("strata_requests_total", "Requests.", {"endpoint", "status"});
  req.With({"/v1/completions", "200"}).Inc();
  req.With({"/v1/completions", "200"}).Inc(2);
  req.With({"/v1/chat/completions", "429"}).Inc();
  reg.Gauge("strata_queue_depth", "Waiting requests.").With({}).Set(3);
  auto& h = reg.Histogram("strata_ttft_seconds", "Time to first token.", {}, {0.1, 0.5});
  h.With({}).Observe(0.05);
  h.With({}).Observe(0.3);
  h.With({}).Observe(7);
  reg.GaugeCallback("strata_kv_blocks_free", "Free KV blocks.", [] { return 42.0; });
  const std::string text = reg.Render();
  EXPECT_NE(text.find("# TYPE strata_requests_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("strata_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 3\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("strata_queue_depth 3\n"), std::string::npos);
  EXPECT_NE(text.find("strata_ttft_seconds_bucket{le=\"0.1\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("strata_ttft_seconds_bucket{le=\"0.5\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("strata_ttft_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("strata_ttft_seconds_count 3\n"), std::string::npos);
  EXPECT_NE(text.find("strata_ttft_seconds_sum 7.35\n"), std::string::npos) << text;
  EXPECT_NE(text.find("strata_kv_blocks_free 42\n"), std::string::npos);
}

TEST(Metrics, LabelValuesAreEscaped) {
  MetricsRegistry reg;
  reg.Counter("x_total", "X.", {"v"}).With({"a\"b\\c\nd"}).Inc();
  EXPECT_NE(reg.Render().find("x_total{v=\"a\\\"b\\\\c\\nd\"} 1"), std::string::npos)
      << reg.Render();
}

TEST(Metrics, ConcurrentUpdatesAreNotLost) {
  MetricsRegistry reg;
  auto& c = reg.Counter("c_total", "C.", {"t"});
  auto& h = reg.Histogram("h", "H.", {}, {1.0});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.With({"x"}).Inc();
        h.With({}).Observe(0.5);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.With({"x"}).Get(), 40000);
  EXPECT_EQ(h.With({}).Count(), 40000u);
  EXPECT_EQ(h.With({}).Sum(), 20000);
}

TEST(MetricsDeathTest, BadNamesAndDuplicatesAreProgrammingErrors) {
  MetricsRegistry reg;
  EXPECT_DEATH(reg.Counter("bad-name", "x"), "invalid metric name");
  reg.Counter("ok_total", "x");
  EXPECT_DEATH(reg.Counter("ok_total", "x"), "registered twice");
  EXPECT_DEATH(reg.Histogram("h2", "x", {"le"}, {1}), "invalid label name");
}

TEST(Metrics, ACallbackChildJoinsALabelledFamilyInLabelOrder) {
  MetricsRegistry reg;
  auto& hits = reg.Counter("strata_cache_hits_total", "Hits.", {"tier"});
  hits.With({"l3"}).Inc(2);
  hits.With({"l1"}).Inc(5);
  double l2 = 7;
  reg.ChildCallback("strata_cache_hits_total", {"l2"}, [&l2] { return l2; });
  reg.Gauge("strata_cache_entries", "Entries.", {"tier"});
  reg.ChildCallback("strata_cache_entries", {"l2"}, [] { return 4.0; });
  l2 = 9;  // read at render time
  const std::string text = reg.Render();
  EXPECT_NE(text.find("strata_cache_hits_total{tier=\"l1\"} 5\n"
                      "strata_cache_hits_total{tier=\"l2\"} 9\n"
                      "strata_cache_hits_total{tier=\"l3\"} 2\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("strata_cache_entries{tier=\"l2\"} 4\n"), std::string::npos) << text;
}

TEST(MetricsDeathTest, CallbackChildrenNeedTheirFamilyAndAFreeLabelSet) {
  MetricsRegistry reg;
  reg.Counter("c_total", "C.", {"tier"}).With({"l1"});
  EXPECT_DEATH(reg.ChildCallback("missing_total", {"l2"}, [] { return 0.0; }),
               "no such metric family");
  EXPECT_DEATH(reg.ChildCallback("c_total", {"l1"}, [] { return 0.0; }), "registered twice");
  EXPECT_DEATH(reg.ChildCallback("c_total", {"l2", "x"}, [] { return 0.0; }), "wrong number");
}

TEST(Metrics, ExponentialBuckets) {
  EXPECT_EQ(ExponentialBuckets(0.01, 2, 3), (std::vector<double>{0.01, 0.02, 0.04}));
}

}  // namespace
}  // namespace strata::obs
