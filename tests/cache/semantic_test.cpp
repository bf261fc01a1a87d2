#include "cache/semantic.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "testing/fake_clock.h"
#include "testing/mem_file_system.h"
#include "util/random.h"

namespace strata::cache {
namespace {

constexpr int kDim = 32;

std::vector<float> RandomUnit(util::Rng& rng, int dim = kDim) {
  std::vector<float> v(static_cast<size_t>(dim));
  double n = 0;
  for (float& x : v) {
    x = static_cast<float>(rng.Normal());
    n += static_cast<double>(x) * x;
  }
  for (float& x : v) x = static_cast<float>(x / std::sqrt(n));
  return v;
}

// `v` moved towards a random direction so that its cosine to `v` is about `cos`.
std::vector<float> Near(const std::vector<float>& v, double cos, util::Rng& rng) {
  std::vector<float> noise = RandomUnit(rng, static_cast<int>(v.size()));
  double d = 0;
  for (size_t i = 0; i < v.size(); ++i) d += static_cast<double>(v[i]) * noise[i];
  double n = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    noise[i] = static_cast<float>(noise[i] - d * v[i]);
    n += static_cast<double>(noise[i]) * noise[i];
  }
  const double sin = std::sqrt(1 - cos * cos);
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    out[i] = static_cast<float>(cos * v[i] + sin * noise[i] / std::sqrt(n));
  }
  return out;
}

SemanticOptions Options(AnnKind ann = AnnKind::kHnsw) {
  SemanticOptions o;
  o.dim = kDim;
  o.ann = ann;
  o.min_similarity = 0.9;
  return o;
}

std::unique_ptr<SemanticIndex> Make(const SemanticOptions& o, const util::Clock& clock) {
  auto index = SemanticIndex::Create(o, clock);
  EXPECT_TRUE(index.ok()) << index.status().ToString();
  return std::move(index).value();
}

TEST(SemanticIndex, FindsTheMostSimilarEntryAboveTheThresholdOnly) {
  testing::FakeClock clock;
  auto index = Make(Options(), clock);
  util::Rng rng(1);
  const std::string ns = SemanticNamespace("t1", "scope");
  std::vector<std::vector<float>> stored;
  for (uint64_t i = 0; i < 20; ++i) {
    stored.push_back(RandomUnit(rng));
    ASSERT_TRUE(index->Insert(ns, stored.back(), nullptr, 100 + i).ok());
  }
  auto hit = index->Lookup(ns, Near(stored[7], 0.95, rng), nullptr);
  ASSERT_TRUE(hit.ok());
  ASSERT_TRUE(hit->match.has_value());
  EXPECT_EQ(hit->match->payload, 107u);
  EXPECT_NEAR(hit->match->similarity, 0.95, 0.01);
  EXPECT_GE(hit->screened, 1u);

  auto miss = index->Lookup(ns, Near(stored[7], 0.8, rng), nullptr);
  ASSERT_TRUE(miss.ok());
  EXPECT_FALSE(miss->match.has_value());
  EXPECT_NEAR(miss->best_similarity, 0.8, 0.01);
  // An override of the threshold per lookup.
  auto lenient = index->Lookup(ns, Near(stored[7], 0.8, rng), nullptr, 0.75);
  ASSERT_TRUE(lenient.ok());
  EXPECT_TRUE(lenient->match.has_value());
  // Below τ4 nothing survives the screen.
  auto far = index->Lookup(ns, Near(stored[7], 0.5, rng), nullptr, 0.45);
  ASSERT_TRUE(far.ok());
  EXPECT_FALSE(far->match.has_value());

  const SemanticStats s = index->stats();
  EXPECT_EQ(s.lookups, 4u);
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.entries, 20u);
}

TEST(SemanticIndex, NeverMatchesAcrossNamespacesOrTenants) {
  testing::FakeClock clock;
  auto index = Make(Options(), clock);
  util::Rng rng(2);
  const auto v = RandomUnit(rng);
  const std::string a = SemanticNamespace("tenant-a", "s"), b = SemanticNamespace("tenant-b", "s");
  EXPECT_EQ(SemanticNamespaceTenant(a), "tenant-a");
  ASSERT_TRUE(index->Insert(a, v, nullptr, 1).ok());
  EXPECT_FALSE(index->Lookup(b, v, nullptr)->match.has_value());
  EXPECT_TRUE(index->Lookup(a, v, nullptr)->match.has_value());
  // A tenant whose name is a prefix of another's gets its own namespace.
  EXPECT_NE(SemanticNamespace("ab", "c"), SemanticNamespace("a", "bc"));
}

TEST(SemanticIndex, GuardsRejectAWouldBeHitAndTheNextBestMayAnswer) {
  testing::FakeClock clock;
  auto index = Make(Options(), clock);
  util::Rng rng(3);
  const std::string ns = SemanticNamespace("t", "s");
  const auto base = RandomUnit(rng);
  auto q2 = PrepareNearDupText("what is 2 + 2");
  auto q3 = PrepareNearDupText("what is 2 + 3");
  auto safe = PrepareNearDupText("is the bridge safe to cross today");
  auto unsafe = PrepareNearDupText("is the bridge not safe to cross today");
  ASSERT_TRUE(q2.ok() && q3.ok() && safe.ok() && unsafe.ok());
  // The nearest entry differs in a number; a farther one agrees.
  ASSERT_TRUE(index->Insert(ns, Near(base, 0.99, rng), &*q3, 1).ok());
  ASSERT_TRUE(index->Insert(ns, Near(base, 0.93, rng), &*q2, 2).ok());
  auto r = index->Lookup(ns, base, &*q2);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->match.has_value());
  EXPECT_EQ(r->match->payload, 2u);
  EXPECT_EQ(r->rejected_by, Guard::kSlots);
  // A negation guard with nothing else to fall back on: no answer.
  const std::string ns2 = SemanticNamespace("t", "other");
  ASSERT_TRUE(index->Insert(ns2, base, &*unsafe, 3).ok());
  auto n = index->Lookup(ns2, base, &*safe);
  ASSERT_TRUE(n.ok());
  EXPECT_FALSE(n->match.has_value());
  EXPECT_EQ(n->rejected_by, Guard::kNegation);
  EXPECT_NEAR(n->best_similarity, 1.0, 1e-5);
}

TEST(SemanticIndex, EvictsThroughThePolicyAndExpiresByTtl) {
  testing::FakeClock clock;
  SemanticOptions o = Options();
  o.max_entries = 10;
  o.ttl = std::chrono::seconds(60);
  auto index = Make(o, clock);
  util::Rng rng(4);
  const std::string ns = SemanticNamespace("t", "s");
  std::vector<std::vector<float>> vs;
  size_t dropped = 0;
  for (uint64_t i = 0; i < 15; ++i) {
    vs.push_back(RandomUnit(rng));
    auto d = index->Insert(ns, vs.back(), nullptr, i);
    ASSERT_TRUE(d.ok());
    dropped += d->size();
    clock.Advance(std::chrono::seconds(1));
  }
  EXPECT_EQ(dropped, 5u);
  EXPECT_EQ(index->stats().entries, 10u);
  EXPECT_EQ(index->stats().evictions, 5u);
  size_t found = 0;
  for (const auto& v : vs) found += index->Lookup(ns, v, nullptr)->match.has_value();
  EXPECT_EQ(found, 10u);
  // Replacing a payload keeps one entry.
  ASSERT_TRUE(index->Insert(ns, vs[14], nullptr, 14).ok());
  EXPECT_EQ(index->stats().entries, 10u);
  clock.Advance(std::chrono::seconds(61));
  EXPECT_FALSE(index->Lookup(ns, vs[14], nullptr)->match.has_value());
  EXPECT_EQ(index->stats().entries, 0u);
  EXPECT_EQ(index->stats().expired, 10u);
}

TEST(SemanticIndex, EraseIfRemovesOnlyWhatMatches) {
  testing::FakeClock clock;
  auto index = Make(Options(), clock);
  util::Rng rng(5);
  const auto v = RandomUnit(rng);
  const std::string a = SemanticNamespace("a", "s"), b = SemanticNamespace("b", "s");
  ASSERT_TRUE(index->Insert(a, v, nullptr, 1).ok());
  ASSERT_TRUE(index->Insert(b, v, nullptr, 2).ok());
  EXPECT_EQ(index->EraseIf([](std::string_view ns, uint64_t, const CachedValue*) {
    return SemanticNamespaceTenant(ns) == "a";
  }),
            1u);
  EXPECT_FALSE(index->Lookup(a, v, nullptr)->match.has_value());
  EXPECT_TRUE(index->Lookup(b, v, nullptr)->match.has_value());
  EXPECT_EQ(index->stats().erased, 1u);
}

// Each nearest-neighbour kind, once a namespace is large enough to use it,
// finds what the exact scan finds (the stored vector nearest a perturbed copy),
// also after most entries were removed and the index rebuilt.
class SemanticAnnTest : public ::testing::TestWithParam<AnnKind> {};

TEST_P(SemanticAnnTest, FindsWhatTheExactScanFinds) {
  testing::FakeClock clock;
  SemanticOptions o = Options(GetParam());
  o.ann_min_entries = 256;
  auto index = Make(o, clock);
  util::Rng rng(6);
  const std::string ns = SemanticNamespace("t", "s");
  std::vector<std::vector<float>> vs;
  for (uint64_t i = 0; i < 1500; ++i) {
    vs.push_back(RandomUnit(rng));
    ASSERT_TRUE(index->Insert(ns, vs.back(), nullptr, i).ok());
  }
  auto recall = [&](size_t from) {
    size_t found = 0, n = 0;
    for (size_t i = from; i < vs.size(); i += 7, ++n) {
      auto r = index->Lookup(ns, Near(vs[i], 0.95, rng), nullptr);
      EXPECT_TRUE(r.ok());
      found += r->match && r->match->payload == i;
    }
    return static_cast<double>(found) / static_cast<double>(n);
  };
  EXPECT_GE(recall(0), 0.95) << AnnKindName(GetParam());
  // Retrained (the hit-rate trigger's remedy): the same answers.
  EXPECT_EQ(index->Retrain(), GetParam() == AnnKind::kFlat ? 0u : 1u);
  EXPECT_GE(recall(0), 0.95) << AnnKindName(GetParam());
  // Remove the first 1000: tombstones, then a rebuild.
  EXPECT_EQ(
      index->EraseIf([](std::string_view, uint64_t p, const CachedValue*) { return p < 1000; }),
      1000u);
  EXPECT_GE(index->stats().rebuilds, 1u);
  EXPECT_GE(recall(1000), 0.95) << AnnKindName(GetParam());
  EXPECT_FALSE(index->Lookup(ns, vs[3], nullptr)->match.has_value());
}

INSTANTIATE_TEST_SUITE_P(Kinds, SemanticAnnTest,
                         ::testing::Values(AnnKind::kFlat, AnnKind::kHnsw, AnnKind::kIvf,
                                           AnnKind::kLsh),
                         [](const auto& p) { return std::string(AnnKindName(p.param)); });

TEST(SemanticIndex, RefusesBadOptionsAndVectors) {
  testing::FakeClock clock;
  SemanticOptions o = Options();
  o.dim = 0;
  EXPECT_FALSE(SemanticIndex::Create(o, clock).ok());
  o = Options();
  o.min_similarity = 0.5;  // not above τ4
  EXPECT_FALSE(SemanticIndex::Create(o, clock).ok());
  o = Options();
  o.lsh_bits = 100;
  EXPECT_FALSE(SemanticIndex::Create(o, clock).ok());
  auto index = Make(Options(), clock);
  const std::vector<float> wrong(kDim + 1, 0.1f), zero(kDim, 0.0f);
  EXPECT_FALSE(index->Insert("n", wrong, nullptr, 1).ok());
  EXPECT_FALSE(index->Insert("n", zero, nullptr, 1).ok());
  EXPECT_FALSE(index->Lookup("n", wrong, nullptr).ok());
  EXPECT_FALSE(index->Reconfigure(1.5, std::chrono::seconds(0), 0).ok());
  EXPECT_TRUE(index->Reconfigure(0.95, std::chrono::seconds(10), 0.1).ok());
  EXPECT_EQ(ParseAnnKind("hnsw"), AnnKind::kHnsw);
  EXPECT_FALSE(ParseAnnKind("annoy").has_value());
}

}  // namespace
}  // namespace strata::cache

namespace strata::cache {
namespace {

class TextValue final : public CachedValue {
 public:
  explicit TextValue(std::string s) : s_(std::move(s)) {}
  uint64_t ByteSize() const override { return s_.size(); }
  const std::string& text() const { return s_; }

 private:
  std::string s_;
};

class TextCodec final : public ValueCodec {
 public:
  std::string Encode(const CachedValue& v) const override {
    return static_cast<const TextValue&>(v).text();
  }
  util::StatusOr<std::shared_ptr<const CachedValue>> Decode(std::string_view b) const override {
    if (b == "bad") return util::DataLossError("bad value");
    return std::make_shared<const TextValue>(std::string(b));
  }
};

TEST(SemanticIndex, SavesAndLoadsItsEntriesWithTheirValuesTextsAndTtls) {
  testing::FakeClock clock;
  SemanticOptions o = Options();
  o.ttl = std::chrono::seconds(100);
  auto index = Make(o, clock);
  util::Rng rng(7);
  const std::string ns = SemanticNamespace("t", "s");
  auto q2 = PrepareNearDupText("what is 2 + 2");
  ASSERT_TRUE(q2.ok());
  std::vector<std::vector<float>> vs;
  for (uint64_t i = 0; i < 30; ++i) {
    vs.push_back(RandomUnit(rng));
    ASSERT_TRUE(index
                    ->Insert(ns, vs.back(), i == 0 ? &*q2 : nullptr, i,
                             std::make_shared<TextValue>("answer " + std::to_string(i)))
                    .ok());
  }
  ASSERT_TRUE(index->Insert(ns, RandomUnit(rng), nullptr, 99).ok());  // no value: not saved
  clock.Advance(std::chrono::seconds(40));
  testing::MemFileSystem fs;
  TextCodec codec;
  ASSERT_TRUE(index->Save(fs, "sem.bin", codec, /*encoder=*/42).ok());
  EXPECT_FALSE(fs.Exists("sem.bin.tmp"));

  auto loaded = Make(o, clock);
  EXPECT_EQ(loaded->Load(fs, "sem.bin", codec, /*encoder=*/43).status().code(),
            util::StatusCode::kInvalidArgument)
      << "another encoder's vectors";
  auto n = loaded->Load(fs, "sem.bin", codec, 42);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 30u);
  auto hit = loaded->Lookup(ns, vs[17], nullptr);
  ASSERT_TRUE(hit.ok() && hit->match);
  EXPECT_EQ(hit->match->payload, 17u);
  EXPECT_EQ(static_cast<const TextValue&>(*hit->match->value).text(), "answer 17");
  // The text came along: its guard still rejects another number.
  auto q3 = PrepareNearDupText("what is 2 + 3");
  EXPECT_FALSE(loaded->Lookup(ns, vs[0], &*q3)->match.has_value());
  // The remaining 60 s of TTL came along too, not a fresh 100 s.
  clock.Advance(std::chrono::seconds(61));
  EXPECT_FALSE(loaded->Lookup(ns, vs[17], nullptr)->match.has_value());

  // Damaged, foreign and other-width files add nothing.
  const std::string good = *fs.ReadFile("sem.bin");
  auto write = [&](const std::string& name, const std::string& bytes) {
    auto f = fs.NewWritableFile(name);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Append(std::span<const uint8_t>(
                                 reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()))
                    .ok());
    ASSERT_TRUE((*f)->Close().ok());
  };
  write("cut.bin", good.substr(0, good.size() - 5));
  write("foreign.bin", "hello");
  auto fresh = Make(o, clock);
  EXPECT_EQ(fresh->Load(fs, "cut.bin", codec, 42).status().code(), util::StatusCode::kDataLoss);
  EXPECT_EQ(fresh->Load(fs, "foreign.bin", codec, 42).status().code(), util::StatusCode::kDataLoss);
  EXPECT_EQ(fresh->stats().entries, 0u);
  SemanticOptions wide = o;
  wide.dim = kDim * 2;
  EXPECT_EQ(Make(wide, clock)->Load(fs, "sem.bin", codec, 42).status().code(),
            util::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::cache
