#include "cache/near_dup.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "cache/simhash.h"
#include "testing/fake_clock.h"
#include "testing/shared_data.h"
#include "util/random.h"

namespace strata::cache {
namespace {

NearDupText Prep(std::string_view s) {
  auto t = PrepareNearDupText(s);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : NearDupText{};
}

SimilarityOptions NoGuards() {
  SimilarityOptions o;
  o.slot_guard = o.negation_guard = o.order_guard = o.entity_guard = false;
  return o;
}

// Options with a few fields changed (GCC warns on partial designated initializers).
NearDupOptions With(void (*change)(NearDupOptions&)) {
  NearDupOptions o;
  change(o);
  return o;
}

class NearDupIndexTest : public ::testing::Test {
 protected:
  std::unique_ptr<NearDupIndex> Make(NearDupOptions o = {}) {
    auto r = NearDupIndex::Create(o, clock_);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return std::move(r).value();
  }
  testing::FakeClock clock_;
  const std::string ns_ = NearDupNamespace("tenant-a", "model-1");
};

TEST_F(NearDupIndexTest, FindsARephrasingThatDiffersInCasePunctuationAndForm) {
  auto index = Make();
  ASSERT_TRUE(index->Insert(ns_, "How do I reverse a linked list in Python?", 7).ok());
  auto hit = index->Lookup(ns_, "how do i reverse a linked-list in ＰＹＴＨＯＮ");
  ASSERT_TRUE(hit.ok());
  ASSERT_TRUE(hit->has_value());
  EXPECT_EQ((*hit)->payload, 7u);
  EXPECT_DOUBLE_EQ((*hit)->similarity, 1.0);
  // A filler word more still matches; a different question does not.
  auto near = index->Lookup(ns_, "So how do I reverse a linked list in Python?");
  ASSERT_TRUE(near.ok());
  ASSERT_TRUE(near->has_value());
  EXPECT_GE((*near)->similarity, kDefaultNearDupSimilarity);
  EXPECT_LT((*near)->similarity, 1.0);
  auto other = index->Lookup(ns_, "How do I sort a linked list in Python?");
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->has_value());
}

TEST_F(NearDupIndexTest, EraseIfRemovesOnlyTheSelectedEntries) {
  auto index = Make();
  const std::string other = NearDupNamespace("tenant-b", "model-1");
  ASSERT_TRUE(index->Insert(ns_, "How do I reverse a linked list in Python?", 1).ok());
  ASSERT_TRUE(index->Insert(ns_, "What is the capital city of France?", 2).ok());
  ASSERT_TRUE(index->Insert(other, "How do I reverse a linked list in Python?", 3).ok());
  EXPECT_EQ(index->EraseIf([&](std::string_view ns, uint64_t payload, const CachedValue* v) {
    EXPECT_EQ(v, nullptr);
    return ns == ns_ && payload == 1;
  }),
            1u);
  EXPECT_FALSE(index->Lookup(ns_, "How do I reverse a linked list in Python?")->has_value());
  EXPECT_TRUE(index->Lookup(ns_, "What is the capital city of France?")->has_value());
  EXPECT_TRUE(index->Lookup(other, "How do I reverse a linked list in Python?")->has_value());
  EXPECT_EQ(index->stats().entries, 2u);
}

// Each pair is near-identical text; without the guard it would be a hit.
struct GuardCase {
  const char* a;
  const char* b;
  Guard guard;
};

TEST(ScorePair, GuardsRejectNearDuplicatesThatDifferInMeaning) {
  const GuardCase cases[] = {
      {"What is 2+3?", "What is 2+4?", Guard::kSlots},
      {"What is 2+3?", "What is 2*3?", Guard::kSlots},
      {"Is it safe to eat raw cookie dough during pregnancy?",
       "Is it not safe to eat raw cookie dough during pregnancy?", Guard::kNegation},
      {"Find cheap flights from Boston to Denver", "Find cheap flights from Denver to Boston",
       Guard::kOrder},
      {"Tell me about the history of the Netherlands", "Tell me about the history of the Portugal",
       Guard::kEntity},
  };
  for (const GuardCase& c : cases) {
    const NearDupText a = Prep(c.a), b = Prep(c.b);
    const PairScore guarded = ScorePair(a, b);
    EXPECT_EQ(guarded.rejected_by, c.guard) << c.a << " | " << c.b;
    EXPECT_EQ(guarded.similarity, 0.0);
    EXPECT_EQ(ScorePair(b, a).rejected_by, c.guard) << "not symmetric: " << c.a;
  }
}

// In long prompts one changed number, negation, order or name moves the
// similarity little: without the guards these would all be served.
TEST(ScorePair, GuardsAreWhatKeepsLongNearDuplicatesApart) {
  const GuardCase cases[] = {
      {"Please compute the total cost for an order of 12 units at the listed unit price, "
       "including the shipping fee and the sales tax, and show every step of the calculation "
       "clearly in a table at the end",
       "Please compute the total cost for an order of 13 units at the listed unit price, "
       "including the shipping fee and the sales tax, and show every step of the calculation "
       "clearly in a table at the end",
       Guard::kSlots},
      {"Explain why this function is thread safe, how the locking works, which invariants the "
       "mutex protects and what would happen under heavy contention from many writers",
       "Explain why this function isn't thread safe, how the locking works, which invariants the "
       "mutex protects and what would happen under heavy contention from many writers",
       Guard::kNegation},
      {"Plan a two week road trip itinerary from Boston to Denver with stops at national parks, "
       "cheap motels and good local restaurants along the way, with driving times for each day",
       "Plan a two week road trip itinerary from Denver to Boston with stops at national parks, "
       "cheap motels and good local restaurants along the way, with driving times for each day",
       Guard::kOrder},
      {"Write a detailed essay about the economic and social history of the Netherlands during "
       "the nineteenth century, with a focus on trade, industry and colonial policy, citing "
       "sources",
       "Write a detailed essay about the economic and social history of the Belgium during "
       "the nineteenth century, with a focus on trade, industry and colonial policy, citing "
       "sources",
       Guard::kEntity},
  };
  for (const GuardCase& c : cases) {
    const NearDupText a = Prep(c.a), b = Prep(c.b);
    EXPECT_GE(ScorePair(a, b, NoGuards()).similarity, kDefaultNearDupSimilarity) << c.a;
    EXPECT_EQ(ScorePair(a, b).rejected_by, c.guard) << c.a;
  }
}

TEST(ScorePair, IsSymmetricAndOneForIdenticalSequences) {
  const NearDupText a = Prep("the quick brown fox jumps over the lazy dog");
  const NearDupText b = Prep("The quick brown fox jumped over the lazy dog!");
  EXPECT_DOUBLE_EQ(ScorePair(a, a).similarity, 1.0);
  EXPECT_DOUBLE_EQ(ScorePair(a, b).similarity, ScorePair(b, a).similarity);
  EXPECT_GT(ScorePair(a, b).similarity, 0.8);
  EXPECT_LT(ScorePair(a, b).similarity, 1.0);
  SimilarityOptions j;
  j.measure = SimilarityOptions::Measure::kShingleJaccard;
  EXPECT_DOUBLE_EQ(ScorePair(a, a, j).similarity, 1.0);
  EXPECT_LT(ScorePair(a, b, j).similarity, 1.0);
}

TEST(ScorePair, TheEarlyBoundNeverHidesAPairAboveTheThreshold) {
  util::Rng rng(11);
  for (int i = 0; i < 300; ++i) {
    std::string a, b;
    for (int k = 0; k < 12; ++k) {
      a += fmt::format(" w{}", rng.Below(30));
      b += fmt::format(" w{}", rng.Below(30));
    }
    const double exact = ScorePair(Prep(a), Prep(b), NoGuards()).similarity;
    const double t = rng.Uniform();
    const double bounded = ScorePair(Prep(a), Prep(b), NoGuards(), t).similarity;
    if (exact >= t) {
      EXPECT_DOUBLE_EQ(bounded, exact);
    } else {
      EXPECT_LT(bounded, t);
    }
  }
}

TEST(PrepareNearDupText, RejectsInvalidUtf8EmptyTextAndTooManyWords) {
  EXPECT_EQ(PrepareNearDupText("caf\xC3").status().code(), util::StatusCode::kInvalidArgument);
  EXPECT_EQ(PrepareNearDupText(" ?! ").status().code(), util::StatusCode::kInvalidArgument);
  PrepareOptions three;
  three.max_words = 3;
  EXPECT_EQ(PrepareNearDupText("a b c d", three).status().code(), util::StatusCode::kOutOfRange);
}

TEST_F(NearDupIndexTest, InvalidUtf8IsAnErrorNotACrash) {
  auto index = Make();
  EXPECT_EQ(index->Insert(ns_, "bad \xFF text", 1).status().code(),
            util::StatusCode::kInvalidArgument);
  EXPECT_EQ(index->Lookup(ns_, "bad \xFF text").status().code(),
            util::StatusCode::kInvalidArgument);
  EXPECT_EQ(index->stats().entries, 0u);
}

TEST_F(NearDupIndexTest, TenantsNeverSeeEachOthersEntries) {
  auto index = Make();
  const std::string a = NearDupNamespace("tenant-a", "m"), b = NearDupNamespace("tenant-b", "m");
  const std::string other_model = NearDupNamespace("tenant-a", "m2");
  // Length prefixes keep ("a|b", "c") and ("a", "b|c") apart.
  EXPECT_NE(NearDupNamespace("a|b", "c"), NearDupNamespace("a", "b|c"));
  ASSERT_TRUE(index->Insert(a, "What is the boiling point of water at sea level?", 1).ok());
  EXPECT_FALSE(index->Lookup(b, "What is the boiling point of water at sea level?")->has_value());
  EXPECT_FALSE(
      index->Lookup(other_model, "What is the boiling point of water at sea level?")->has_value());
  // Many namespaces holding the same text: each sees only its own payload.
  for (uint64_t t = 0; t < 50; ++t) {
    ASSERT_TRUE(index
                    ->Insert(NearDupNamespace(fmt::format("t{}", t), "m"),
                             "What is the boiling point of water at sea level?", 100 + t)
                    .ok());
  }
  for (uint64_t t = 0; t < 50; ++t) {
    auto hit = index->Lookup(NearDupNamespace(fmt::format("t{}", t), "m"),
                             "what is the boiling point of water at sea level");
    ASSERT_TRUE(hit.ok() && hit->has_value());
    EXPECT_EQ((*hit)->payload, 100 + t);
  }
  EXPECT_EQ(index->Lookup(a, "what is the boiling point of water at sea level").value()->payload,
            1u);
  EXPECT_EQ(index->stats().namespaces, 51u);
}

TEST_F(NearDupIndexTest, GuardedNearDuplicatesAreNotServed) {
  auto index = Make();
  ASSERT_TRUE(index->Insert(ns_, "What is 2+3?", 1).ok());
  ASSERT_TRUE(index->Insert(ns_, "Is it safe to eat raw cookie dough during pregnancy?", 2).ok());
  EXPECT_FALSE(index->Lookup(ns_, "What is 2+4?")->has_value());
  EXPECT_FALSE(
      index->Lookup(ns_, "Is it not safe to eat raw cookie dough during pregnancy?")->has_value());
  EXPECT_TRUE(index->Lookup(ns_, "what is 2 + 3")->has_value());
}

// The banded index against brute force: every stored fingerprint within
// max_distance of the query is a candidate, and none beyond it is.
class BandedGuarantee : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(BandedGuarantee, FindsTheClosestFingerprintWithinMaxDistanceLikeBruteForce) {
  const auto [bands, radius] = GetParam();
  testing::FakeClock clock;
  NearDupOptions o;
  o.bands = bands;
  o.probe_radius = radius;
  o.max_candidates = 1;  // the closest candidate only
  auto index = NearDupIndex::Create(o, clock).value();
  const int max_d = index->max_distance();
  ASSERT_EQ(max_d, bands * (radius + 1) - 1);
  // Entries with identical tokens (so any candidate confirms with similarity
  // 1) but chosen fingerprints: only the candidate stage decides.
  NearDupText base = Prep("identical words in every entry");
  util::Rng rng(static_cast<uint64_t>(bands * 10 + radius));
  std::vector<uint64_t> stored;
  for (uint64_t i = 0; i < 400; ++i) {
    NearDupText t = base;
    t.fingerprint = rng.Next();
    t.sequence_hash = i;  // distinct, so no entry replaces another
    stored.push_back(t.fingerprint);
    ASSERT_TRUE(index->Insert("ns", t, i).ok());
  }
  int found = 0, absent = 0;
  for (int q = 0; q < 2000; ++q) {
    // A stored fingerprint with 0..max_d+4 random bits flipped.
    uint64_t fp = stored[rng.Below(stored.size())];
    const int flips = static_cast<int>(rng.Below(static_cast<uint64_t>(max_d + 5)));
    for (int k = 0; k < flips; ++k) fp ^= uint64_t{1} << rng.Below(64);
    int best = 65;
    for (uint64_t s : stored) best = std::min(best, HammingDistance(s, fp));
    NearDupText query = base;
    query.fingerprint = fp;
    const auto hit = index->Lookup("ns", query);
    if (best <= max_d) {
      ASSERT_TRUE(hit.has_value()) << "distance " << best << " <= " << max_d << " not found";
      EXPECT_EQ(hit->distance, best);
      EXPECT_EQ(HammingDistance(stored[hit->payload], fp), best);
      ++found;
    } else {
      EXPECT_FALSE(hit.has_value()) << "distance " << best << " > " << max_d << " found";
      ++absent;
    }
  }
  EXPECT_GT(found, 1000);
  EXPECT_GT(absent, 50);
}

INSTANTIATE_TEST_SUITE_P(Configs, BandedGuarantee,
                         ::testing::Values(std::pair{4, 2}, std::pair{4, 0}, std::pair{2, 1},
                                           std::pair{5, 1}, std::pair{8, 1}, std::pair{3, 3}));

TEST_F(NearDupIndexTest, StaysWithinMaxEntriesAndReportsWhatItEvicts) {
  auto index = Make(With([](NearDupOptions& o) { o.max_entries = 100; }));
  std::set<uint64_t> dropped;
  for (uint64_t i = 0; i < 1000; ++i) {
    clock_.Advance(std::chrono::milliseconds(10));
    auto r = index->Insert(ns_, fmt::format("request number {} about topic x", i), i);
    ASSERT_TRUE(r.ok());
    for (const NearDupDropped& d : *r) {
      EXPECT_EQ(d.ns, ns_);
      EXPECT_TRUE(dropped.insert(d.payload).second) << d.payload << " dropped twice";
    }
    ASSERT_LE(index->stats().entries, 100u);
  }
  EXPECT_EQ(dropped.size(), 900u);
  EXPECT_EQ(index->stats().evictions, 900u);
  // The newest entry is still there.
  auto hit = index->Lookup(ns_, "request number 999 about topic x");
  ASSERT_TRUE(hit.ok() && hit->has_value());
  EXPECT_EQ((*hit)->payload, 999u);
}

TEST_F(NearDupIndexTest, StaysWithinMaxBytes) {
  auto index = Make(With([](NearDupOptions& o) { o.max_bytes = 64 * 1024; }));
  for (uint64_t i = 0; i < 2000; ++i) {
    const std::string text =
        fmt::format("a somewhat longer request text, number {}, with more words to take space", i);
    ASSERT_TRUE(index->Insert(ns_, text, i).ok());
    ASSERT_LE(index->stats().bytes, 64u * 1024);
  }
  EXPECT_GT(index->stats().evictions, 0u);
  EXPECT_GT(index->stats().entries, 10u);
}

TEST_F(NearDupIndexTest, AnEntryLargerThanMaxBytesIsRefused) {
  auto index = Make(With([](NearDupOptions& o) { o.max_bytes = 4096; }));
  std::string text;
  for (int i = 0; i < 1000; ++i) text += fmt::format(" word{}", i);
  EXPECT_EQ(index->Insert(ns_, text, 1).status().code(), util::StatusCode::kResourceExhausted);
  EXPECT_EQ(index->stats().entries, 0u);
}

TEST_F(NearDupIndexTest, EvictionFollowsThePolicy) {
  auto index = Make(With([](NearDupOptions& o) {
    o.max_entries = 2;
    o.policy = PolicyKind::kLru;
  }));
  ASSERT_TRUE(index->Insert(ns_, "first request about apples", 1).ok());
  clock_.Advance(std::chrono::seconds(1));
  ASSERT_TRUE(index->Insert(ns_, "second request about pears", 2).ok());
  clock_.Advance(std::chrono::seconds(1));
  ASSERT_TRUE(index->Lookup(ns_, "first request about apples")->has_value());  // 1 is now recent
  clock_.Advance(std::chrono::seconds(1));
  auto r = index->Insert(ns_, "third request about plums", 3);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].payload, 2u);
  EXPECT_TRUE(index->Lookup(ns_, "first request about apples")->has_value());
  EXPECT_FALSE(index->Lookup(ns_, "second request about pears")->has_value());
}

TEST_F(NearDupIndexTest, InsertReplacesTheSamePayloadOrTheSameText) {
  auto index = Make();
  ASSERT_TRUE(index->Insert(ns_, "tell me a joke about cats", 1).ok());
  auto r = index->Insert(ns_, "Tell me a joke about cats!", 2);  // same tokens
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].payload, 1u);
  r = index->Insert(ns_, "tell me a joke about dogs", 2);  // same payload
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ(index->stats().entries, 1u);
  EXPECT_FALSE(index->Lookup(ns_, "tell me a joke about cats")->has_value());
  EXPECT_EQ(index->Lookup(ns_, "tell me a joke about dogs").value()->payload, 2u);
}

TEST_F(NearDupIndexTest, EraseForgetsAnEntryAndItsNamespace) {
  auto index = Make();
  ASSERT_TRUE(index->Insert(ns_, "translate good morning into french", 5).ok());
  EXPECT_FALSE(index->Erase(ns_, 6));
  EXPECT_FALSE(index->Erase("other", 5));
  EXPECT_TRUE(index->Erase(ns_, 5));
  EXPECT_FALSE(index->Lookup(ns_, "translate good morning into french")->has_value());
  EXPECT_EQ(index->stats().entries, 0u);
  EXPECT_EQ(index->stats().namespaces, 0u);
  EXPECT_EQ(index->stats().bytes, 0u);
}

TEST_F(NearDupIndexTest, EntriesOlderThanTheTtlNeverMatch) {
  auto index = Make(With([](NearDupOptions& o) { o.ttl = std::chrono::seconds(60); }));
  ASSERT_TRUE(index->Insert(ns_, "what is the weather like in spring", 1).ok());
  clock_.Advance(std::chrono::seconds(59));
  EXPECT_TRUE(index->Lookup(ns_, "what is the weather like in spring")->has_value());
  clock_.Advance(std::chrono::seconds(1));
  EXPECT_FALSE(index->Lookup(ns_, "what is the weather like in spring")->has_value());
  EXPECT_EQ(index->stats().expired, 1u);
  EXPECT_EQ(index->stats().entries, 0u);
}

TEST(NearDupIndexCreate, RejectsOptionsOutOfRange) {
  testing::FakeClock clock;
  const std::vector<void (*)(NearDupOptions&)> bad = {
      [](NearDupOptions& o) { o.max_entries = 0; },
      [](NearDupOptions& o) { o.max_bytes = 100; },
      [](NearDupOptions& o) { o.min_similarity = 0; },
      [](NearDupOptions& o) { o.min_similarity = 1.5; },
      [](NearDupOptions& o) { o.bands = 1; },
      [](NearDupOptions& o) { o.bands = 17; },
      [](NearDupOptions& o) { o.probe_radius = 4; },
      [](NearDupOptions& o) { o.max_candidates = 0; },
      [](NearDupOptions& o) { o.ttl = std::chrono::seconds(-1); },
  };
  for (auto change : bad) {
    auto r = NearDupIndex::Create(With(change), clock);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), util::StatusCode::kInvalidArgument);
  }
}

TEST_F(NearDupIndexTest, ConcurrentInsertsLookupsAndErasesAreSafe) {
  auto index = Make(With([](NearDupOptions& o) { o.max_entries = 200; }));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const std::string ns = NearDupNamespace(fmt::format("tenant{}", t % 2), "m");
      for (uint64_t i = 0; i < 300; ++i) {
        const std::string text = fmt::format("question {} from thread", i % 97);
        if (i % 3 == 0) {
          EXPECT_TRUE(index->Insert(ns, text, i).ok());
        } else if (i % 7 == 0) {
          index->Erase(ns, i - 1);
        } else {
          EXPECT_TRUE(index->Lookup(ns, text).ok());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(index->stats().entries, 200u);
}

// On real data: at the default threshold the dev split of PAWS (adversarial
// paraphrases with high word overlap) keeps precision >= 0.97.
TEST(NearDupPaws, DefaultThresholdKeepsPrecisionOnPawsDev) {
  const std::string file = "data/prompts/paws_wiki_labeled_final_dev.tsv";
  STRATA_REQUIRE_SHARED(file);
  std::ifstream in(testing::SharedPath(file));
  std::string line;
  size_t tp = 0, fp = 0, pos = 0, unguarded_fp = 0;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::vector<std::string> cols;
    std::stringstream ss(line);
    std::string c;
    while (std::getline(ss, c, '\t')) cols.push_back(c);
    ASSERT_EQ(cols.size(), 4u) << line;
    const bool label = cols[3] == "1";
    pos += label;
    auto a = PrepareNearDupText(cols[1]);
    auto b = PrepareNearDupText(cols[2]);
    ASSERT_TRUE(a.ok() && b.ok());
    const bool hit = ScorePair(*a, *b).similarity >= kDefaultNearDupSimilarity;
    tp += hit && label;
    fp += hit && !label;
    unguarded_fp += !label && ScorePair(*a, *b, NoGuards()).similarity >= kDefaultNearDupSimilarity;
  }
  ASSERT_GT(tp + fp, 0u);
  const double precision = static_cast<double>(tp) / static_cast<double>(tp + fp);
  EXPECT_GE(precision, 0.97) << tp << " true, " << fp << " false hits";
  EXPECT_GE(static_cast<double>(tp) / static_cast<double>(pos), 0.10);
  EXPECT_LT(fp, unguarded_fp) << "the guards should remove false hits";
}

}  // namespace
}  // namespace strata::cache
