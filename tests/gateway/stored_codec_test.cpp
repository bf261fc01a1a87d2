// A stored generation's byte form for the shared tier: it round-trips every
// event field, and bytes from Redis that are damaged or inconsistent are
// DataLoss, never a crash or a replay that could index out of bounds.
#include "gateway/internal/stored_codec.h"

#include <gtest/gtest.h>

#include "gateway/internal/flight.h"

namespace strata::gateway {
namespace {

std::vector<Event> TwoChoices() {
  std::vector<Event> ev;
  Event d0;
  d0.index = 0;
  d0.text = "Hello";
  TokenLogprob lp;
  lp.text = "Hel";
  lp.bytes = {'H', 'e', 'l'};
  lp.logprob = -0.25f;
  lp.id = 317;
  lp.top = {{"Hel", -0.25f}, {"Hi", -1.5f}};
  d0.logprobs = {lp};
  ev.push_back(d0);
  Event d1;
  d1.index = 1;
  d1.text = "World \xE2\x9C\x93";
  ev.push_back(d1);
  Event f0;
  f0.kind = Event::Kind::kFinish;
  f0.index = 0;
  f0.finish = FinishReason::kStopString;
  f0.stop_sequence = "\n\n";
  f0.usage = {.prompt_tokens = 12, .cached_tokens = 4, .completion_tokens = 3};
  ev.push_back(f0);
  Event f1;
  f1.kind = Event::Kind::kFinish;
  f1.index = 1;
  f1.finish = FinishReason::kLength;
  f1.usage = {.prompt_tokens = 12, .cached_tokens = 4, .completion_tokens = 6};
  ev.push_back(f1);
  return ev;
}

TEST(StoredCodec, RoundTripsEveryEventField) {
  const StoredResponse original(TwoChoices(), 2, 12,
                                {"tenant a", "tiny", 0x0123456789abcdefULL, "You are terse.\nHi"});
  StoredResponseCodec codec;
  auto decoded = codec.Decode(codec.Encode(original));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  const auto& d = static_cast<const StoredResponse&>(**decoded);
  EXPECT_EQ(d.n_choices(), 2);
  EXPECT_EQ(d.prompt_tokens(), 12);
  EXPECT_EQ(d.origin().tenant, "tenant a");
  EXPECT_EQ(d.origin().model, "tiny");
  EXPECT_EQ(d.origin().fingerprint, 0x0123456789abcdefULL);
  EXPECT_EQ(d.origin().prompt, "You are terse.\nHi");
  ASSERT_EQ(d.events().size(), original.events().size());
  for (size_t i = 0; i < d.events().size(); ++i) {
    const Event& a = original.events()[i];
    const Event& b = d.events()[i];
    EXPECT_EQ(a.kind, b.kind);
    EXPECT_EQ(a.index, b.index);
    EXPECT_EQ(a.text, b.text);
    EXPECT_EQ(a.finish, b.finish);
    EXPECT_EQ(a.stop_sequence, b.stop_sequence);
    EXPECT_EQ(a.usage.prompt_tokens, b.usage.prompt_tokens);
    EXPECT_EQ(a.usage.cached_tokens, b.usage.cached_tokens);
    EXPECT_EQ(a.usage.completion_tokens, b.usage.completion_tokens);
    ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
    for (size_t k = 0; k < a.logprobs.size(); ++k) {
      EXPECT_EQ(a.logprobs[k].text, b.logprobs[k].text);
      EXPECT_EQ(a.logprobs[k].bytes, b.logprobs[k].bytes);
      EXPECT_EQ(a.logprobs[k].logprob, b.logprobs[k].logprob);
      EXPECT_EQ(a.logprobs[k].id, b.logprobs[k].id);
      EXPECT_EQ(a.logprobs[k].top, b.logprobs[k].top);
    }
    EXPECT_TRUE(b.status.ok());
  }
  EXPECT_EQ(d.ByteSize(), original.ByteSize());
}

TEST(StoredCodec, EveryTruncationAndStrayByteIsDataLoss) {
  StoredResponseCodec codec;
  const std::string good = codec.Encode(StoredResponse(TwoChoices(), 2, 12));
  for (size_t cut = 0; cut < good.size(); ++cut) {
    auto r = codec.Decode(good.substr(0, cut));
    ASSERT_FALSE(r.ok()) << cut;
    EXPECT_EQ(r.status().code(), util::StatusCode::kDataLoss);
  }
  EXPECT_FALSE(codec.Decode(good + "!").ok());
  std::string flipped = good;
  flipped[1] = 'X';
  EXPECT_FALSE(codec.Decode(flipped).ok());
}

TEST(StoredCodec, InconsistentEventsAreRejected) {
  StoredResponseCodec codec;
  auto bad = [&](std::vector<Event> ev, int32_t n) {
    return codec.Decode(codec.Encode(StoredResponse(std::move(ev), n, 1))).status();
  };
  std::vector<Event> ev = TwoChoices();
  EXPECT_FALSE(bad(ev, 1).ok()) << "choice 1 of a one-choice response";
  ev.pop_back();
  EXPECT_NE(bad(ev, 2).message().find("never finishes"), std::string::npos);
  ev = TwoChoices();
  Event late;
  late.index = 0;
  late.text = "after the end";
  ev.push_back(late);
  EXPECT_FALSE(bad(ev, 2).ok()) << "a delta after its choice finished";
  // A count far larger than the bytes that follow.
  std::string huge = codec.Encode(StoredResponse(TwoChoices(), 2, 12));
  huge[12] = huge[13] = huge[14] = '\x7f';
  EXPECT_FALSE(codec.Decode(huge).ok());
}

}  // namespace
}  // namespace strata::gateway
