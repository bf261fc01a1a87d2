// Fuzz target: GGUF parsing and model loading from arbitrary bytes. Whatever
// the input, parsing returns a Status; when it succeeds, every tensor's bytes
// lie inside the input, and building a Model (or an Encoder, which then embeds
// a text) from it either succeeds or returns a Status. Nothing may crash, hang or read out of
// bounds.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "format/gguf.h"
#include "model/encoder.h"
#include "model/transformer.h"
#include "text/tokenizer.h"
#include "util/log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  std::span<const uint8_t> bytes(data, size);
  auto gguf = format::GgufFile::ParseBytes(bytes, "fuzz");
  if (!gguf.ok()) return 0;
  for (const auto& t : (*gguf)->tensors()) {
    if (t.data.data() < data || t.data.data() + t.data.size() > data + size) std::abort();
  }
  for (const auto& [key, value] : (*gguf)->metadata()) (void)value.DebugString();
  auto tok = text::Tokenizer::FromGguf(**gguf);
  if (tok.ok()) {
    const auto ids =
        (*tok)->Encode("Hello world <s> \xF0\x9F\x99\x82 \xFF", {.parse_special = true});
    (void)(*tok)->Decode(ids);
  }
  auto null_log = util::NewNullLogger();
  (void)model::Model::FromGguf(std::move(gguf).value(), *null_log);
  // The same bytes as a sentence encoder (bert, nomic-bert); one that loads embeds a text.
  if (auto again = format::GgufFile::ParseBytes(bytes, "fuzz"); again.ok()) {
    auto enc = model::Encoder::FromGguf(std::move(again).value(), *null_log);
    if (enc.ok()) {
      util::ThreadPool pool(1);
      (void)(*enc)->Embed("Hello world, 12 \xF0\x9F\x99\x82", pool);
    }
  }
  return 0;
}
