// W3C Trace Context parsing against the specification's examples and the
// cases of its conformance suite (w3c/trace-context test/test.py, strict
// level 2), one assertion per rule.
#include "obs/trace_context.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace strata::obs {
namespace {

constexpr std::string_view kTrace = "12345678901234567890123456789012";

std::string Tp(std::string_view version, std::string_view trace, std::string_view parent,
               std::string_view flags) {
  return std::string(version) + "-" + std::string(trace) + "-" + std::string(parent) + "-" +
         std::string(flags);
}

std::string State(std::vector<std::string_view> fields) { return ParseTracestate(fields); }

TEST(Traceparent, TheSpecificationsExamplesParse) {
  const auto sampled = ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  ASSERT_TRUE(sampled);
  EXPECT_EQ(sampled->trace_id.Hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(sampled->span_id.Hex(), "00f067aa0ba902b7");
  EXPECT_TRUE(sampled->sampled());
  const auto not_sampled =
      ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  ASSERT_TRUE(not_sampled);
  EXPECT_FALSE(not_sampled->sampled());
}

TEST(Traceparent, FormattingRoundTripsAndSendsOnlyTheSampledFlag) {
  const std::string in = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  EXPECT_EQ(FormatTraceparent(*ParseTraceparent(in)), in);
  // 0x09: sampled plus a reserved bit, which is never sent on.
  const auto c = ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09");
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->sampled());
  EXPECT_EQ(FormatTraceparent(*c), in);
}

TEST(Traceparent, SurroundingSpacesAndTabsAreIgnored) {
  const std::string v = Tp("00", kTrace, "1234567890123456", "01");
  for (const std::string& s : {" " + v, "\t" + v, v + " ", v + "\t", "\t " + v + " \t"}) {
    const auto c = ParseTraceparent(s);
    ASSERT_TRUE(c) << s;
    EXPECT_EQ(c->trace_id.Hex(), kTrace);
  }
}

TEST(Traceparent, Version00MustBeExactly55Characters) {
  EXPECT_FALSE(ParseTraceparent(Tp("00", kTrace, "1234567890123456", "01") + "."));
  EXPECT_FALSE(
      ParseTraceparent(Tp("00", kTrace, "1234567890123456", "01") + "-what-the-future-will-be"));
}

TEST(Traceparent, AHigherVersionIsReadAsVersion00) {
  const auto plain = ParseTraceparent(Tp("cc", kTrace, "1234567890123456", "01"));
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->trace_id.Hex(), kTrace);
  EXPECT_TRUE(plain->sampled());
  const auto longer =
      ParseTraceparent(Tp("cc", kTrace, "1234567890123456", "01") + "-what-the-future-will-be");
  ASSERT_TRUE(longer);
  EXPECT_EQ(longer->trace_id.Hex(), kTrace);
  // What follows the flags must start with a dash.
  EXPECT_FALSE(
      ParseTraceparent(Tp("cc", kTrace, "1234567890123456", "01") + ".what-the-future-will-be"));
  // Only the sampled flag of an unknown version is understood.
  EXPECT_EQ(ParseTraceparent(Tp("cc", kTrace, "1234567890123456", "ff"))->flags, kSampledFlag);
}

TEST(Traceparent, VersionFfIsInvalid) {
  EXPECT_FALSE(ParseTraceparent(Tp("ff", kTrace, "1234567890123456", "01")));
}

TEST(Traceparent, MalformedVersionsAreInvalid) {
  for (std::string_view version : {".0", "0.", "000", "0000", "0", "0A", "A0"}) {
    EXPECT_FALSE(ParseTraceparent(Tp(version, kTrace, "1234567890123456", "01"))) << version;
  }
}

TEST(Traceparent, AllZeroIdsAreInvalid) {
  EXPECT_FALSE(
      ParseTraceparent(Tp("00", "00000000000000000000000000000000", "1234567890123456", "01")));
  EXPECT_FALSE(ParseTraceparent(Tp("00", kTrace, "0000000000000000", "01")));
}

TEST(Traceparent, IdsMustBeLowercaseHexOfTheRightLength) {
  const std::vector<std::string> bad = {
      Tp("00", ".2345678901234567890123456789012", "1234567890123456", "01"),
      Tp("00", "1234567890123456789012345678901.", "1234567890123456", "01"),
      Tp("00", "123456789012345678901234567890123", "1234567890123456", "01"),
      Tp("00", "1234567890123456789012345678901", "1234567890123456", "01"),
      Tp("00", "4BF92F3577B34DA6A3CE929D0E0E4736", "1234567890123456", "01"),
      Tp("00", kTrace, ".234567890123456", "01"),
      Tp("00", kTrace, "123456789012345.", "01"),
      Tp("00", kTrace, "12345678901234567", "01"),
      Tp("00", kTrace, "123456789012345", "01"),
      Tp("00", kTrace, "00F067AA0BA902B7", "01"),
      Tp("00", kTrace, "1234567890123456", ".0"),
      Tp("00", kTrace, "1234567890123456", "0."),
      Tp("00", kTrace, "1234567890123456", "001"),
      Tp("00", kTrace, "1234567890123456", "1"),
      Tp("00", kTrace, "1234567890123456", "0A"),
      "",
      "00",
      "00-",
      "00_" + std::string(kTrace) + "-1234567890123456-01",
  };
  for (const std::string& s : bad) EXPECT_FALSE(ParseTraceparent(s)) << s;
}

TEST(Traceparent, TwoTraceparentFieldsAreNone) {
  const std::string a = Tp("00", "12345678901234567890123456789011", "1234567890123456", "01");
  const std::string b = Tp("00", kTrace, "1234567890123456", "01");
  const std::vector<std::string_view> both = {a, b};
  EXPECT_FALSE(ParseTraceparentFields(both));
  const std::vector<std::string_view> one = {b};
  EXPECT_TRUE(ParseTraceparentFields(one));
  EXPECT_FALSE(ParseTraceparentFields({}));
}

TEST(Tracestate, MembersAreKeptInOrderAcrossFields) {
  EXPECT_EQ(State({"foo=1,bar=2"}), "foo=1,bar=2");
  EXPECT_EQ(State({"foo=1,bar=2", "rojo=1,congo=2", "baz=3"}), "foo=1,bar=2,rojo=1,congo=2,baz=3");
  EXPECT_EQ(State({"rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"}),
            "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE");
}

TEST(Tracestate, OwsAndEmptyMembersAreDropped) {
  EXPECT_EQ(State({"foo=1 \t , \t bar=2, \t baz=3"}), "foo=1,bar=2,baz=3");
  EXPECT_EQ(State({" foo=1"}), "foo=1");
  EXPECT_EQ(State({"\t foo=1 \t"}), "foo=1");
  EXPECT_EQ(State({"foo=1,,  ,bar=2"}), "foo=1,bar=2");
  EXPECT_EQ(State({""}), "");
  EXPECT_EQ(State({"foo=1", ""}), "foo=1");
  EXPECT_EQ(State({"", "foo=1"}), "foo=1");
  EXPECT_EQ(State({}), "");
}

TEST(Tracestate, AValueKeepsItsLeadingSpaces) { EXPECT_EQ(State({"foo= 1"}), "foo= 1"); }

TEST(Tracestate, EveryAllowedCharacterIsKept) {
  std::string key = "abcdefghijklmnopqrstuvwxyz0123456789_-*/";
  std::string value;
  for (int c = 0x20; c <= 0x7e; ++c) {
    if (c != ',' && c != '=') value.push_back(static_cast<char>(c));
  }
  EXPECT_EQ(State({key + "=" + value}), key + "=" + value);
  const std::string vendor = key + "@a-z0-9_-*/";
  EXPECT_EQ(State({vendor + "=" + value}), vendor + "=" + value);
}

TEST(Tracestate, ADuplicateKeyDiscardsTheWholeHeader) {
  EXPECT_EQ(State({"foo=1,foo=1"}), "");
  EXPECT_EQ(State({"foo=1,foo=2"}), "");
  EXPECT_EQ(State({"foo=1", "foo=2"}), "");
}

TEST(Tracestate, AnIllegalKeyDiscardsTheWholeHeader) {
  for (std::string_view s : {"foo =1", "FOO=1", "foo.bar=1", "foo@=1,bar=2", "@foo=1,bar=2",
                             "foo@@bar=1,bar=2", "foo@bar@baz=1,bar=2", "1abc=1", "=1"}) {
    EXPECT_EQ(State({s}), "") << s;
  }
  EXPECT_EQ(State({"1tenant@vendor=1"}), "1tenant@vendor=1");  // a tenant may start with a digit
}

TEST(Tracestate, AnIllegalValueDiscardsTheWholeHeader) {
  for (std::string_view s : {"foo=bar=baz", "foo=,bar=3", "foo", "foo=\x7f", "foo=a\tb"}) {
    EXPECT_EQ(State({s}), "") << s;
  }
  EXPECT_EQ(State({"foo=" + std::string(256, 'v')}), "foo=" + std::string(256, 'v'));
  EXPECT_EQ(State({"foo=" + std::string(257, 'v')}), "");
}

TEST(Tracestate, KeyLengthsFollowTheGrammar) {
  EXPECT_EQ(State({"foo=1", std::string(256, 'z') + "=1"}),
            "foo=1," + std::string(256, 'z') + "=1");
  EXPECT_EQ(State({"foo=1", std::string(257, 'z') + "=1"}), "");
  const std::string tenant_vendor = std::string(241, 't') + "@" + std::string(14, 'v') + "=1";
  EXPECT_EQ(State({tenant_vendor}), tenant_vendor);
  EXPECT_EQ(State({"foo=1", std::string(242, 't') + "@v=1"}), "");
  EXPECT_EQ(State({"foo=1", "t@" + std::string(15, 'v') + "=1"}), "");
}

TEST(Tracestate, ThirtyTwoMembersAreKeptAndThirtyThreeDiscarded) {
  std::string fields;
  for (int i = 1; i <= 32; ++i) {
    const std::string n = (i < 10 ? "0" : "") + std::to_string(i);
    fields += (i > 1 ? ",bar" : "bar") + n + "=" + n;
  }
  EXPECT_EQ(State({fields}), fields);
  EXPECT_EQ(State({fields, "bar33=33"}), "");
}

TEST(Tracestate, ALongHeaderLosesItsLongMembersFirstThenItsLast) {
  // 4 members of 100 bytes and one of 200: 604 bytes with the commas. The
  // long one goes first, leaving 403.
  auto member = [](char key, size_t bytes) {
    return std::string(1, key) + "=" + std::string(bytes - 2, 'v');
  };
  const std::string a = member('a', 100), b = member('b', 200), c = member('c', 100),
                    d = member('d', 100), e = member('e', 100);
  EXPECT_EQ(State({a + "," + b + "," + c + "," + d + "," + e}), a + "," + c + "," + d + "," + e);
  // Six of 100: the last ones go until it fits in 512.
  const std::string f = member('f', 100);
  EXPECT_EQ(State({a + "," + c + "," + d + "," + e + "," + f + "," + member('g', 100)}),
            a + "," + c + "," + d + "," + e + "," + f);
  for (const std::string& s : {State({a + "," + b + "," + c + "," + d + "," + e + "," + f})}) {
    EXPECT_LE(s.size(), kMaxTracestateBytes);
  }
}

}  // namespace
}  // namespace strata::obs
