#include "session/session.h"

#include <algorithm>

namespace strata::session {

bool ValidSessionId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '@' || c == '-';
  });
}

std::vector<int32_t> ConversationTokens(const Session& s) {
  std::vector<int32_t> tokens;
  for (const Turn& t : s.turns) {
    if (t.tokens.empty() || t.tokens_from > tokens.size()) return {};
    tokens.resize(t.tokens_from);
    tokens.insert(tokens.end(), t.tokens.begin(), t.tokens.end());
  }
  return tokens;
}

}  // namespace strata::session
