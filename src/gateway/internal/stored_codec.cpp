#include "gateway/internal/stored_codec.h"

#include <bit>
#include <cstring>

#include <fmt/format.h>

#include "gateway/internal/flight.h"

namespace strata::gateway {
namespace {

// Version 3: each logprob carries its token id. Version 4: the answer's origin.
constexpr char kMagic[4] = {'S', 'R', '1', '\x04'};
constexpr int32_t kMaxChoices = 128;

class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void I32(int32_t v) { U32(static_cast<uint32_t>(v)); }
  void F32(float v) { U32(std::bit_cast<uint32_t>(v)); }
  void Str(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s.data(), s.size());
  }
  std::string Take() { return std::move(out_); }
  std::string& raw() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  util::StatusOr<uint32_t> U32() {
    if (left() < 4) return Short("an integer");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(b_[pos_ + i])} << (8 * i);
    pos_ += 4;
    return v;
  }
  util::StatusOr<int32_t> I32() {
    STRATA_ASSIGN_OR_RETURN(uint32_t v, U32());
    return static_cast<int32_t>(v);
  }
  util::StatusOr<float> F32() {
    STRATA_ASSIGN_OR_RETURN(uint32_t v, U32());
    return std::bit_cast<float>(v);
  }
  util::StatusOr<uint8_t> U8() {
    if (left() < 1) return Short("a byte");
    return static_cast<uint8_t>(b_[pos_++]);
  }
  util::StatusOr<std::string> Str() {
    STRATA_ASSIGN_OR_RETURN(uint32_t n, U32());
    if (left() < n) return Short("a string");
    std::string s(b_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  // A count of items each at least `min_bytes` long: never more than what is left.
  util::StatusOr<uint32_t> Count(size_t min_bytes) {
    STRATA_ASSIGN_OR_RETURN(uint32_t n, U32());
    if (static_cast<uint64_t>(n) * min_bytes > left()) {
      return util::DataLossError(
          fmt::format("stored response: {} items cannot fit in {} bytes", n, left()));
    }
    return n;
  }
  size_t left() const { return b_.size() - pos_; }

 private:
  util::Status Short(const char* what) const {
    return util::DataLossError(
        fmt::format("stored response: cut short reading {} at byte {}", what, pos_));
  }
  std::string_view b_;
  size_t pos_ = 0;
};

}  // namespace

std::string StoredResponseCodec::Encode(const cache::CachedValue& value) const {
  const auto& s = static_cast<const StoredResponse&>(value);
  Writer w;
  w.raw().append(kMagic, sizeof kMagic);
  w.I32(s.n_choices());
  w.I32(s.prompt_tokens());
  w.Str(s.origin().tenant);
  w.Str(s.origin().model);
  w.U32(static_cast<uint32_t>(s.origin().fingerprint));
  w.U32(static_cast<uint32_t>(s.origin().fingerprint >> 32));
  w.Str(s.origin().prompt);
  w.U32(static_cast<uint32_t>(s.events().size()));
  for (const Event& e : s.events()) {
    w.U8(static_cast<uint8_t>(e.kind));
    w.I32(e.index);
    w.Str(e.text);
    w.U32(static_cast<uint32_t>(e.logprobs.size()));
    for (const TokenLogprob& lp : e.logprobs) {
      w.Str(lp.text);
      w.Str(std::string_view(reinterpret_cast<const char*>(lp.bytes.data()), lp.bytes.size()));
      w.F32(lp.logprob);
      w.I32(lp.id);
      w.U32(static_cast<uint32_t>(lp.top.size()));
      for (const auto& [t, l] : lp.top) {
        w.Str(t);
        w.F32(l);
      }
    }
    w.U32(static_cast<uint32_t>(e.tool_calls.size()));
    for (const ToolCallDelta& t : e.tool_calls) {
      w.I32(t.index);
      w.Str(t.id);
      w.Str(t.name);
      w.Str(t.arguments);
    }
    w.U8(static_cast<uint8_t>(e.finish));
    w.Str(e.stop_sequence);
    w.I32(e.usage.prompt_tokens);
    w.I32(e.usage.cached_tokens);
    w.I32(e.usage.completion_tokens);
  }
  return w.Take();
}

util::StatusOr<std::shared_ptr<const cache::CachedValue>> StoredResponseCodec::Decode(
    std::string_view bytes) const {
  using util::DataLossError;
  if (bytes.size() < sizeof kMagic || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    return DataLossError("stored response: bad magic or version");
  }
  Reader r(bytes.substr(sizeof kMagic));
  STRATA_ASSIGN_OR_RETURN(int32_t n_choices, r.I32());
  STRATA_ASSIGN_OR_RETURN(int32_t prompt_tokens, r.I32());
  if (n_choices < 1 || n_choices > kMaxChoices || prompt_tokens < 0) {
    return DataLossError(
        fmt::format("stored response: {} choices, {} prompt tokens", n_choices, prompt_tokens));
  }
  AnswerOrigin origin;
  STRATA_ASSIGN_OR_RETURN(origin.tenant, r.Str());
  STRATA_ASSIGN_OR_RETURN(origin.model, r.Str());
  STRATA_ASSIGN_OR_RETURN(uint32_t fp_lo, r.U32());
  STRATA_ASSIGN_OR_RETURN(uint32_t fp_hi, r.U32());
  origin.fingerprint = uint64_t{fp_hi} << 32 | fp_lo;
  STRATA_ASSIGN_OR_RETURN(origin.prompt, r.Str());
  STRATA_ASSIGN_OR_RETURN(uint32_t n_events, r.Count(34));
  std::vector<Event> events;
  events.reserve(n_events);
  std::vector<bool> finished(static_cast<size_t>(n_choices), false);
  for (uint32_t i = 0; i < n_events; ++i) {
    Event e;
    STRATA_ASSIGN_OR_RETURN(uint8_t kind, r.U8());
    STRATA_ASSIGN_OR_RETURN(e.index, r.I32());
    if (kind > static_cast<uint8_t>(Event::Kind::kFinish) || e.index < 0 || e.index >= n_choices ||
        finished[static_cast<size_t>(e.index)]) {
      return DataLossError(fmt::format(
          "stored response: event {} (kind {}, choice {}) is out of place", i, kind, e.index));
    }
    e.kind = static_cast<Event::Kind>(kind);
    STRATA_ASSIGN_OR_RETURN(e.text, r.Str());
    STRATA_ASSIGN_OR_RETURN(uint32_t n_lp, r.Count(20));
    e.logprobs.reserve(n_lp);
    for (uint32_t k = 0; k < n_lp; ++k) {
      TokenLogprob lp;
      STRATA_ASSIGN_OR_RETURN(lp.text, r.Str());
      STRATA_ASSIGN_OR_RETURN(std::string raw, r.Str());
      lp.bytes.assign(raw.begin(), raw.end());
      STRATA_ASSIGN_OR_RETURN(lp.logprob, r.F32());
      STRATA_ASSIGN_OR_RETURN(lp.id, r.I32());
      STRATA_ASSIGN_OR_RETURN(uint32_t n_top, r.Count(8));
      lp.top.reserve(n_top);
      for (uint32_t t = 0; t < n_top; ++t) {
        STRATA_ASSIGN_OR_RETURN(std::string text, r.Str());
        STRATA_ASSIGN_OR_RETURN(float l, r.F32());
        lp.top.emplace_back(std::move(text), l);
      }
      e.logprobs.push_back(std::move(lp));
    }
    STRATA_ASSIGN_OR_RETURN(uint32_t n_calls, r.Count(16));
    e.tool_calls.reserve(n_calls);
    for (uint32_t k = 0; k < n_calls; ++k) {
      ToolCallDelta t;
      STRATA_ASSIGN_OR_RETURN(t.index, r.I32());
      if (t.index < 0) {
        return DataLossError(fmt::format("stored response: tool call index {}", t.index));
      }
      STRATA_ASSIGN_OR_RETURN(t.id, r.Str());
      STRATA_ASSIGN_OR_RETURN(t.name, r.Str());
      STRATA_ASSIGN_OR_RETURN(t.arguments, r.Str());
      e.tool_calls.push_back(std::move(t));
    }
    STRATA_ASSIGN_OR_RETURN(uint8_t finish, r.U8());
    if (finish > static_cast<uint8_t>(FinishReason::kToolCalls)) {
      return DataLossError(fmt::format("stored response: finish reason {} is unknown", finish));
    }
    e.finish = static_cast<FinishReason>(finish);
    STRATA_ASSIGN_OR_RETURN(e.stop_sequence, r.Str());
    STRATA_ASSIGN_OR_RETURN(e.usage.prompt_tokens, r.I32());
    STRATA_ASSIGN_OR_RETURN(e.usage.cached_tokens, r.I32());
    STRATA_ASSIGN_OR_RETURN(e.usage.completion_tokens, r.I32());
    if (e.kind == Event::Kind::kFinish) finished[static_cast<size_t>(e.index)] = true;
    events.push_back(std::move(e));
  }
  for (int32_t c = 0; c < n_choices; ++c) {
    if (!finished[static_cast<size_t>(c)]) {
      return DataLossError(fmt::format("stored response: choice {} never finishes", c));
    }
  }
  if (r.left() != 0)
    return DataLossError(fmt::format("stored response: {} bytes after the end", r.left()));
  return std::shared_ptr<const cache::CachedValue>(std::make_shared<StoredResponse>(
      std::move(events), n_choices, prompt_tokens, std::move(origin)));
}

}  // namespace strata::gateway
