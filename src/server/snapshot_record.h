// server/snapshot_record.h — what a request snapshot holds, and its JSON
// (docs/formats/snapshot.md, "The record"): everything needed to run a
// request again and to tell whether the answer is the same.
//
// Promise: DecodeSnapshotRecord(EncodeSnapshotRecord(r)) gives r back field
// for field (floats exactly, 64-bit seeds and fingerprints as decimal and
// hex strings so that no JSON reader rounds them). Decode treats its input
// as untrusted — it comes from a file, even if an authenticated one —:
// every field is type- and range-checked, and a record this version cannot
// read is DataLoss naming the field, never a crash or an exception.
//
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/gateway.h"
#include "util/status.h"

namespace strata::server {

inline constexpr int kSnapshotRecordVersion = 1;

// One prompt the request ran: every request has one, a /v1/completions
// prompt array one per prompt (in order; the request's choices of prompt i
// are numbered i * n + j).
struct SnapshotPrompt {
  // Prompts after the first of an array: the part's own prompt, which
  // replaces the request's (text, or token ids).
  std::optional<std::string> prompt = {};
  std::vector<int32_t> prompt_ids = {};
  // What the backend prepared: the local engine's prompt tokens after the
  // chat template (empty for a remote backend) and their text with control
  // tokens rendered, the effective max_tokens (0: the upstream's default)
  // and stop strings (the request's, then the template's turn ends).
  std::vector<int32_t> tokens = {};
  std::string text = {};
  int32_t max_tokens = 0;
  std::vector<std::string> stops = {};
};

// One choice of the answer, as the client got it.
struct SnapshotChoice {
  int32_t index = 0;
  // The seed its sampler drew from (local engine); nullopt when unknown (a
  // remote backend, an answer from the shared Redis tier).
  std::optional<uint64_t> seed = {};
  std::string text = {};
  std::vector<gateway::ToolCall> tool_calls = {};
  // Every token id generated (local engine); empty when unknown.
  std::vector<int32_t> tokens = {};
  gateway::FinishReason finish = gateway::FinishReason::kLength;
  std::string stop_sequence = {};
  gateway::Usage usage = {};
  // The RT-Switcher's terms the choice ran on (" rt_level=1 sampling=topk
  // max_tokens_cap=256"); "" when it ran as the request asked.
  std::string terms = {};
  std::string replica = {};  // a remote backend's replica base URL; "" for the local engine
};

// What answered: the backend, and for the local engine the model file and
// the settings that decide how a prompt renders.
struct SnapshotBackend {
  std::string name = {};  // the model id
  std::string kind = {};  // "local", "openai", "anthropic"
  uint64_t fingerprint = 0;
  int32_t n_ctx = 0;  // the context it served with (0: a remote backend)
  // Local engine only.
  std::string model_path = {};
  std::string model_sha256 = {};  // "" when the background digest had not finished
  std::string chat_format = {};   // --chat-format; "" = the model's own template
  bool prompt_special_tokens = false;
  int32_t max_tokens_cap = 0;
  // The KV cache's element type ("F32", "F16", "Q8_0"); "" in a snapshot
  // taken before the engine had a choice, which means F32.
  std::string kv_type = {};
  // --repack as served ("auto", "on", "off"); "" in a snapshot taken before
  // weights could be packed, which means off.
  std::string repack = {};
};

struct SnapshotRecord {
  std::string request_id = {};
  std::string tenant = {};
  int64_t created_ms = 0;     // Unix milliseconds, when the request arrived
  std::string api = {};       // "openai.chat", "openai.completions", "anthropic.messages"
  std::string endpoint = {};  // the canonical path
  bool stream = false;
  std::string strata_version = {};
  SnapshotBackend backend = {};
  std::string cache = "miss";             // miss, l1, l3, coalesced
  std::optional<double> similarity = {};  // l3: the request's similarity to the stored one
  // The request exactly as parsed (a prompt array's first prompt).
  gateway::CompletionRequest request = {};
  std::vector<SnapshotPrompt> prompts = {};  // at least one
  std::vector<SnapshotChoice> choices = {};  // by index; prompts × n
};

std::string EncodeSnapshotRecord(const SnapshotRecord& record);
util::StatusOr<SnapshotRecord> DecodeSnapshotRecord(std::string_view json);

// About the size of EncodeSnapshotRecord's result, without encoding (for the
// snapshot queue's byte bound).
size_t EstimateSnapshotBytes(const SnapshotRecord& record);

// "end_of_turn", ... (backend::FinishReasonLabel) back to the reason.
std::optional<gateway::FinishReason> ParseFinishReason(std::string_view label);

}  // namespace strata::server
