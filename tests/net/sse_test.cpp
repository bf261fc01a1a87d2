#include "net/sse.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace strata::net {
namespace {

std::vector<SseEvent> ParseAll(std::string_view bytes, size_t step = 1000000) {
  SseParser p;
  std::vector<SseEvent> out;
  for (size_t i = 0; i < bytes.size(); i += step) {
    EXPECT_TRUE(p.Feed(bytes.substr(i, step), &out).ok());
  }
  return out;
}

TEST(SseFrame, WritesOneDataLinePerLine) {
  EXPECT_EQ(SseFrame(R"({"a":1})"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(SseFrame("x", "message_start"), "event: message_start\ndata: x\n\n");
  EXPECT_EQ(SseFrame("a\nb\r\nc\rd"), "data: a\ndata: b\ndata: c\ndata: d\n\n");
}

TEST(SseFrame, DataCannotEndTheEventOrInjectAnother) {
  const std::string frame = SseFrame("one\n\ndata: injected\n\nevent: evil", "ok\n\nevent: x");
  const auto events = ParseAll(frame);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].event, "okevent: x");
  EXPECT_EQ(events[0].data, "one\n\ndata: injected\n\nevent: evil");
}

TEST(SseParser, ReadsEventsSplitAnywhere) {
  const std::string stream =
      ": keep-alive\r\nevent: delta\r\ndata: hel\r\ndata: lo\r\n\r\ndata:no space\n\nid: 7\rdata: "
      "x\r\r";
  for (size_t step : {1, 2, 3, 7, 1000}) {
    const auto events = ParseAll(stream, step);
    ASSERT_EQ(events.size(), 3u) << step;
    EXPECT_EQ(events[0].event, "delta");
    EXPECT_EQ(events[0].data, "hel\nlo");
    EXPECT_EQ(events[1].event, "message");
    EXPECT_EQ(events[1].data, "no space");
    EXPECT_EQ(events[2].id, "7");
    EXPECT_EQ(events[2].data, "x");
  }
}

TEST(SseParser, IgnoresEventsWithoutDataAndUnknownFields) {
  const auto events = ParseAll("event: ping\n\nretry: 10\nfoo: bar\ndata: y\n\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "y");
  EXPECT_EQ(events[0].event, "message");
}

TEST(SseParser, RefusesAnEventBeyondItsLimit) {
  SseParser p(64);
  std::vector<SseEvent> out;
  EXPECT_EQ(p.Feed("data: " + std::string(100, 'a'), &out).code(),
            util::StatusCode::kResourceExhausted);
  SseParser q(64);
  std::string many;
  for (int i = 0; i < 20; ++i) many += "data: abcdef\n";
  EXPECT_EQ(q.Feed(many, &out).code(), util::StatusCode::kResourceExhausted);
}

TEST(SseParser, ReadsBackWhatTheWriterWrote) {
  for (const std::string data : {"", "\n", "a\n", "\r\n\r\n", "x\ry", "plain"}) {
    const auto events = ParseAll(SseFrame(data, "e"));
    ASSERT_EQ(events.size(), 1u) << data;
    std::string want;
    for (size_t i = 0; i < data.size(); ++i) {
      if (data[i] == '\r') {
        want += '\n';
        if (i + 1 < data.size() && data[i + 1] == '\n') ++i;
      } else {
        want += data[i];
      }
    }
    EXPECT_EQ(events[0].data, want);
  }
}

// Random streams of fields, comments and CR/LF/CRLF breaks, fed in random
// pieces: the same events, and the same limit failure, as one byte at a time.
TEST(SseParser, PiecesGiveWhatSingleBytesGive) {
  std::mt19937 rng(11);
  const std::vector<std::string> parts = {"data: ", "data:", "event: x", "id: 7", ": c", "retry: 1",
                                          "abc",    "\r",    "\n",       "\r\n",  "",    "dat"};
  auto show = [](const std::vector<SseEvent>& events, const util::Status& st) {
    std::string s;
    for (const SseEvent& e : events) s += e.event + "|" + e.data + "|" + e.id + "\n";
    return s + st.ToString();
  };
  for (int round = 0; round < 2000; ++round) {
    std::string bytes;
    for (int k = 0; k < 30; ++k) bytes += parts[rng() % parts.size()];
    const size_t limit = 16 + rng() % 64;
    SseParser one(limit);
    std::vector<SseEvent> one_out;
    util::Status one_st;
    for (char c : bytes) {
      one_st = one.Feed(std::string_view(&c, 1), &one_out);
      if (!one_st.ok()) break;
    }
    SseParser pieces(limit);
    std::vector<SseEvent> pieces_out;
    util::Status pieces_st;
    for (size_t at = 0; at < bytes.size();) {
      const size_t n = 1 + rng() % 24;
      // Each piece in a buffer overwritten after the call: the parser keeps
      // nothing of the bytes it was fed.
      std::string piece(std::string_view(bytes).substr(at, n));
      pieces_st = pieces.Feed(piece, &pieces_out);
      piece.assign(piece.size(), 'Z');
      if (!pieces_st.ok()) break;
      at += n;
    }
    ASSERT_EQ(show(pieces_out, pieces_st), show(one_out, one_st)) << bytes;
  }
}

// The callback form: an event of one data line that came whole is a view
// into the bytes fed; joined lines and events split over calls are the
// parser's; an error from the callback stops the parse.
TEST(SseParser, HandsEventsToACallbackInPlaceWhenTheyCameWhole) {
  SseParser p;
  const std::string bytes = "data: whole\n\nevent: e\ndata: a\ndata: b\n\ndata: spl";
  std::vector<std::string> seen;
  std::vector<bool> in_place;
  auto record = [&](const SseEventView& e) {
    seen.push_back(std::string(e.event) + "|" + std::string(e.data));
    in_place.push_back(e.data.data() >= bytes.data() &&
                       e.data.data() < bytes.data() + bytes.size());
    return util::OkStatus();
  };
  ASSERT_TRUE(p.Feed(bytes, record).ok());
  ASSERT_TRUE(p.Feed("it\n\n", record).ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"message|whole", "e|a\nb", "message|split"}));
  EXPECT_EQ(in_place, (std::vector<bool>{true, false, false}));

  SseParser q;
  int calls = 0;
  const util::Status st = q.Feed("data: 1\n\ndata: 2\n\n", [&](const SseEventView&) {
    ++calls;
    return util::CancelledError("enough");
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(st.message(), "enough");
}

}  // namespace
}  // namespace strata::net
