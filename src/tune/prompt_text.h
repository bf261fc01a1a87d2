// tune/prompt_text.h — prompts of a chosen length without a tokenizer.
//
// Promise: text that a server will tokenize into roughly the requested number
// of tokens, built from a fixed list of common lowercase English words joined
// by single spaces. The approximation is `words = round(tokens *
// words_per_token)`; the default 1.0 holds because every list word is one
// token after a space ("▁word" / "Ġword") in the common vocabularies: a
// 200-token /v1/completions prompt was counted by strata as 201 tokens with
// the Llama 2 SentencePiece and Llama 3 BPE vocabularies (200 + BOS) and 200
// with GPT-2's. Chat templates add their own tokens, and other vocabularies
// may split differently, so the load generator reports the server's
// prompt_tokens next to the target.
//
// Determinism: the same (seed, stream) gives the same words. Mooncake prefix
// blocks are keyed by hash id alone, so two requests whose hash_ids agree on a
// prefix get prompts that agree on the matching text prefix, and a server's
// prefix cache sees the sharing the trace recorded.
//
// Thread-compatible: const methods may be called from several threads.
//
//   PromptBuilder b({.seed = 7});
//   std::string p = b.Unique(/*request=*/3, /*tokens=*/200);
//   std::string m = b.Mooncake({0, 1, 2}, /*tokens=*/1200, /*block_tokens=*/512);
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace strata::tune {

struct PromptOptions {
  uint64_t seed = 0;             // fixes every word drawn
  double words_per_token = 1.0;  // words per target token, > 0
};

class PromptBuilder {
 public:
  explicit PromptBuilder(PromptOptions options) : options_(options) {}

  // Words for `tokens` tokens (0 words for tokens <= 0).
  int64_t WordsFor(int64_t tokens) const;

  // A prompt of about `tokens` tokens private to request `request`.
  std::string Unique(int64_t request, int64_t tokens) const;
  // The shared system prompt of about `tokens` tokens; `which` picks one of
  // several distinct ones (0 is the one a single-prompt run uses).
  std::string System(int64_t tokens, int64_t which = 0) const;
  // Which of `n` system prompts request `request` gets (0 when n <= 1):
  // uniform over [0, n), fixed by (seed, request).
  int64_t SystemIndex(int64_t request, int64_t n) const;
  // The first `tokens` tokens' worth of the text of Mooncake block `hash_id`
  // (a full block is `block_tokens` tokens); a prefix of the full block's text.
  std::string Block(int64_t hash_id, int64_t tokens) const;
  // A prompt of about `tokens` tokens made of the blocks `hash_ids` in order,
  // `block_tokens` tokens each, the last one cut to fit. Blocks run out → the
  // rest is request-private text keyed by `request`.
  std::string Mooncake(std::span<const int64_t> hash_ids, int64_t tokens, int64_t block_tokens,
                       int64_t request = 0) const;

  // The fixed word list (tests check its properties).
  static std::span<const std::string_view> Words();

 private:
  // `n_words` words of the stream (domain, key), appended to `out` with a
  // separating space when `out` is non-empty.
  void AppendWords(uint64_t domain, uint64_t key, int64_t n_words, std::string& out) const;

  PromptOptions options_;
};

// The prompts of a --prompt-file: JSON lines, each a JSON string (the user
// message) or an object with a string "prompt"; blank lines are skipped. A
// line that is neither, or a file without prompts, is an error naming the line.
// Request i of a run sends prompt i mod n, so a file written in request order
// replays a workload (repetition, popularity, paraphrases) exactly.
util::StatusOr<std::vector<std::string>> ParsePromptFile(std::string_view text);

}  // namespace strata::tune
