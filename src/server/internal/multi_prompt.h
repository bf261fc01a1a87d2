// server/internal/multi_prompt.h — one /v1/completions response over several
// prompts (OpenAI's array prompt): a generation per prompt, read as one.
//
// Promise: the choices of prompt i are numbered i * n + j (j the choice
// within its prompt), as OpenAI numbers them; events come in the order they
// become readable, and the whole ends (OutOfRange) once every part has.
// prompt_tokens() is the parts' sum. A part learning its prompt's size only
// from its usage (a remote backend) has each finish event carry the sum so
// far of every part's prompt and cached tokens, so that a reader keeping the
// largest value it saw (the responder) ends with the total. Cancel cancels
// every part. Its provenance lists the parts' in order.
//
// Threading: Next, Cancel and NotifyWhenReady on the reader's thread (one
// at a time, as for any Generation); the parts' ready callbacks may run on
// any thread and only touch the shared wake-up state, under its mutex.
#pragma once

#include <memory>
#include <vector>

#include "gateway/gateway.h"

namespace strata::server {

// `parts` (at least one, each with `choices_per_part` choices).
std::unique_ptr<gateway::Generation> CombinePromptGenerations(
    std::vector<std::unique_ptr<gateway::Generation>> parts, int32_t choices_per_part);

}  // namespace strata::server
