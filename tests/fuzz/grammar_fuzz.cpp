// Fuzz target: the GBNF parser and its matcher (grammar/grammar.h). The
// input up to its first NUL byte is grammar text, the rest bytes to feed.
// The parser answers a grammar or a Status, never a crash or a hang; with
// a grammar, a refused byte never changes the matcher's state, FeedAll is
// all or nothing and agrees with Feed byte by byte, and a matcher that
// cannot continue is accepting.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "grammar/grammar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using strata::grammar::Grammar;
  using strata::grammar::GrammarMatcher;
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  const std::string_view text = all.substr(0, nul);
  const std::string_view input = nul == std::string_view::npos ? "" : all.substr(nul + 1);
  auto g = Grammar::Parse(text, {.max_text_bytes = 1 << 16,
                                 .max_rules = 4096,
                                 .max_elements = 1 << 16,
                                 .max_nesting = 64,
                                 .max_repeat = 1000});
  if (!g.ok()) {
    if (g.status().message().empty()) std::abort();
    return 0;
  }
  GrammarMatcher m(**g);
  std::string taken;
  for (const char c : input) {
    const std::string before = m.key();
    if (m.Feed(static_cast<uint8_t>(c))) {
      taken += c;
    } else if (m.key() != before) {
      std::abort();  // a refusal changed the state
    }
    if (!m.can_continue() && !m.accepting() && !m.stacks().ends.empty()) std::abort();
  }
  // FeedAll of what Feed took lands in the same state.
  GrammarMatcher again(**g);
  if (!again.FeedAll(taken) || again.key() != m.key()) {
    if (!m.bound_exceeded() && !again.bound_exceeded()) std::abort();
  }
  GrammarMatcher whole(**g);
  const std::string start = whole.key();
  if (!whole.FeedAll(input) && whole.key() != start) std::abort();
  return 0;
}
