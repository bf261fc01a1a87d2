// backend — what answers a request once the gateway's tiers have not: the
// embedded engine (backend/local.h) or a model server reached over HTTP
// (backend/remote.h: any OpenAI-compatible server, the Anthropic Messages
// API), behind one interface.
//
// Promise: a Backend takes the normalised request (Request: messages or a
// prompt, sampling fields, stop strings, max_tokens, n, tenant, session) and
// produces the same event stream whatever it is: for each choice, text
// deltas in order, then exactly one kFinish with the finish reason, the
// usage (cached prompt tokens included) and, when the choice failed, a
// Status saying why with a machine-readable reason. Nothing of HTTP reaches
// the caller: an upstream's errors, timeouts and broken streams arrive as
// failed kFinish events. Prepare checks what this backend cannot serve
// (InvalidArgument naming the field, never a silent drop) and learns what
// the gateway's tiers key on; Start begins the run and never blocks on the
// model (a remote run waits on its upstream without holding a thread).
//
// Threading: a Backend is thread-safe (any request thread calls Prepare,
// Start and Embed). Events reach the Sink on the backend's own threads (the
// scheduler thread, an HTTP client I/O thread); a Sink is thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/request.h"
#include "obs/tracer.h"
#include "sampling/sampler.h"
#include "sampling/tiers.h"
#include "text/chat_template.h"
#include "util/status.h"

namespace strata::backend {

// Which SamplingParams fields the client gave itself. A remote backend sends
// only these (an upstream keeps its own defaults for the rest); the local
// engine uses every field as parsed.
struct SamplingFieldsSet {
  bool temperature = false;
  bool top_p = false;
  bool top_k = false;
  bool min_p = false;
  bool presence_penalty = false;
  bool frequency_penalty = false;
  bool repetition_penalty = false;
  bool seed = false;
  // Any of strata's own samplers (target_entropy, typical_p, mirostat):
  // the local engine's alone.
  bool strata_sampler = false;
  bool logit_bias = false;  // SamplingParams::logit_bias (OpenAI's)
};

// The shape every choice's text must have.
enum class ResponseFormat { kText, kJsonObject, kJsonSchema };

// OpenAI's response_format {"type": "json_schema", "json_schema": {...}}.
struct JsonSchemaFormat {
  std::string name;         // ^[a-zA-Z0-9_-]{1,64}$
  std::string description;  // "" = none
  std::string schema;       // the schema as JSON text, its keys in the client's order
  bool strict = false;      // passed to an upstream; the local engine always constrains
};

// One message of a chat: role ("system", "user", "assistant", "tool"), text,
// and an assistant's tool calls or a tool result's call id.
using ChatMessage = text::ChatMessage;
// A function the model may call, and a call it made (text/chat_template.h).
using ToolDefinition = text::ToolDefinition;
using ToolCall = text::ToolCall;

// Whether and how the model calls tools (OpenAI's tool_choice, Anthropic's
// tool_choice.type): kAuto it decides (OpenAI "auto", Anthropic "auto");
// kNone it answers in text ("none"); kRequired it calls at least one
// ("required", Anthropic "any"); kNamed it calls `name` (a named function,
// Anthropic "tool").
struct ToolChoice {
  enum class Mode { kAuto, kNone, kRequired, kNamed };
  Mode mode = Mode::kAuto;
  std::string name;  // kNamed
};

// A piece of a tool call as it is generated: the first piece of call
// `index` (the call's place among the choice's calls, from 0) carries its
// id and name, every piece a fragment of its arguments' JSON text; the
// fragments, joined, are the arguments.
struct ToolCallDelta {
  int32_t index = 0;
  std::string id;    // first piece only
  std::string name;  // first piece only
  std::string arguments;
};

// Adds one event's tool-call pieces to the calls of its choice so far, as a
// whole response assembles them: a call's first piece (it has an id, or an
// index past the calls so far) opens a call, the rest extend its
// arguments. `Call` is any type with string members id, name, arguments.
template <typename Call, typename Deltas>
void AppendToolCallDeltas(std::vector<Call>& calls, const Deltas& deltas) {
  for (const ToolCallDelta& t : deltas) {
    if (!t.id.empty() || static_cast<size_t>(t.index) >= calls.size()) {
      Call call{};
      call.id = t.id;
      call.name = t.name;
      calls.push_back(std::move(call));
    }
    calls.back().arguments += t.arguments;
  }
}

// The normalised request the gateway hands a backend.
struct Request {
  std::string request_id;
  std::string tenant = "default";
  // The model id the client asked for ("" = the default backend).
  std::string model;
  // The conversation this request belongs to, as the client names it ("" =
  // none). Scoped to the tenant: equal ids of two tenants are two sessions.
  // Labels the request's log lines and pins it to one upstream replica; it
  // never changes what is generated.
  std::string session_id;
  // Whether the client reads the answer as it is generated. A remote
  // backend asks its upstream for a stream only then: otherwise for one
  // whole JSON answer, which both sides produce and decode at a fraction of
  // the cost of an event per token. The run's events are the same.
  bool stream = true;
  std::vector<ChatMessage> messages;  // chat
  std::optional<std::string> prompt;  // completion: raw text (used when set)
  // Completion: the prompt as token ids, used as they are (no BOS added);
  // set instead of `prompt`. Their meaning is the backend's vocabulary's.
  std::vector<int32_t> prompt_ids;
  // A completion (a raw prompt, as text or as token ids), not a chat.
  bool completion() const { return prompt.has_value() || !prompt_ids.empty(); }
  // Chat, a hint from a durable session: the local engine's token ids of
  // the conversation so far (its last turn's prompt and answer, as the
  // engine saw and generated them). The local engine starts the prompt with
  // them where their text is where the rendered conversation starts, so
  // the KV blocks of earlier answers are found in L2 even when their text
  // would tokenize differently; otherwise, and on remote backends, unused.
  std::vector<int32_t> prefix_tokens;
  // Indices into `messages` after which an Anthropic client put a
  // cache_control breakpoint (passed through to an anthropic backend).
  std::vector<int32_t> cache_breakpoints;
  std::optional<int32_t> max_tokens;  // default: what is left of the context, capped
  sampling::SamplingParams sampling;
  SamplingFieldsSet sampling_set;
  std::vector<std::string> stop;
  // kJsonObject: every choice is one JSON object (OpenAI's response_format
  // {"type": "json_object"}); kJsonSchema: one JSON document valid against
  // json_schema.schema. The local engine constrains its decoding so, an
  // OpenAI upstream is asked for it.
  ResponseFormat response_format = ResponseFormat::kText;
  // The functions the model may call (empty: none), whether and which it
  // must call, and whether one turn may hold several calls.
  std::vector<ToolDefinition> tools;
  ToolChoice tool_choice;
  bool parallel_tool_calls = true;
  JsonSchemaFormat json_schema;  // kJsonSchema: the schema every choice validates against
  // strata's `grammar` (GBNF text, grammar/grammar.h; "" = none): every choice
  // is a sentence of it. The local engine constrains its decoding so, an
  // OpenAI-compatible upstream gets it as `grammar` (llama-server's field).
  std::string grammar;
  int32_t n = 1;
  int32_t top_logprobs = -1;  // -1: no logprobs; 0..20: chosen token (+ top N)
  bool prefix_cache = true;   // reuse cached KV blocks of this tenant's prompts
  bool ignore_eos = false;    // keep generating past end-of-generation tokens (benchmarks)
  // The client chose sampling.seed: sampling at temperature > 0 is then
  // reproducible, so the response may be cached and shared.
  bool fixed_seed = false;
  // L1 and single flight for this request; false = neither served from the
  // response cache, nor coalesced, nor stored (the header still says "miss").
  bool response_cache = true;
  // L3 for this request: true asks for near-duplicate answers, false refuses
  // them (and does not fill L3); nullopt = the tenant's default.
  std::optional<bool> l3;
  // The semantic tiers (L4/L5) likewise: true asks for answers of requests
  // of similar meaning, false refuses them; nullopt = the tenant's default.
  std::optional<bool> semantic;
  // The request's trace (obs/tracer.h; null: none). The gateway and the
  // backend make their spans under it when it is recording (tier lookups,
  // the local engine's queue wait, prefill and decode, a remote backend's
  // call), and a remote backend sends its context upstream (traceparent,
  // tracestate) whether or not it records.
  std::shared_ptr<obs::RequestTrace> trace = nullptr;
};

// How a choice ended: the engine's reasons (engine/request.h), and
// kToolCalls, an end of turn after the choice called tools (its deltas
// carried ToolCallDeltas). kStopString comes with Event::stop_sequence;
// kCancelled with Event::status when the choice failed.
enum class FinishReason { kEndOfTurn, kStopString, kLength, kCancelled, kToolCalls };
// The engine's reason as a backend's.
FinishReason FromEngine(engine::FinishReason reason);
// "end_of_turn", "stop_string", "length", "cancelled", "tool_calls" (metric
// labels, logs).
std::string_view FinishReasonLabel(FinishReason reason);

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;       // of prompt_tokens, read from a prefix cache (L2, or upstream's)
  int32_t cache_write_tokens = 0;  // of prompt_tokens, written to an upstream's prompt cache
  int32_t completion_tokens = 0;
  int32_t preemptions = 0;  // times the local engine evicted and recomputed the request
  // Tokens the local engine's memory-aware admission took off max_tokens
  // (admitted under KV pressure; engine::Usage::max_tokens_cut); 0 = none.
  int32_t max_tokens_cut = 0;
};

struct TokenLogprob {
  std::string text;  // the token's bytes as text (may be partial UTF-8, sanitized)
  std::vector<uint8_t> bytes;
  float logprob = 0.0f;
  int32_t id = -1;  // the vocabulary id (the local engine's); -1 where a backend does not say
  std::vector<std::pair<std::string, float>> top;  // most likely tokens at that step
};

// When a choice's milestones happened (steady clock; a default value = did
// not happen): for the trace line and the latency metrics.
struct Timing {
  std::chrono::steady_clock::time_point submitted;  // handed to the backend
  std::chrono::steady_clock::time_point admitted;   // got a sequence / the upstream answered
  std::chrono::steady_clock::time_point first_token;
  std::chrono::steady_clock::time_point finished;
  int32_t tokens = 0;  // tokens produced (the local engine's count; remote: completion tokens)
};

struct Event {
  enum class Kind { kDelta, kFinish };
  Kind kind = Kind::kDelta;
  int32_t index = 0;                            // choice index
  std::string text;                             // kDelta: new text
  std::vector<TokenLogprob> logprobs;           // kDelta: one per token that produced this text
  std::vector<ToolCallDelta> tool_calls;        // kDelta: pieces of tool calls, after `text`
  FinishReason finish = FinishReason::kLength;  // kFinish
  std::string stop_sequence;                    // kFinish with kStopString: the string that matched
  util::Status status;                          // kFinish: not OK when the choice failed
  // kFinish: the choice's usage. kDelta: zero, except that a backend which
  // learns the prompt's counts before the end (an Anthropic upstream's
  // message_start) puts them (prompt, cached, cache_write) on the first delta.
  Usage usage;
  Timing timing;  // kFinish
  // kFinish: the terms the choice ran on when the Governor set any (" rt_level=1
  // sampling=... max_tokens_cap=..."), and whether it is traced.
  std::string terms;
  bool traced = true;
  // kFinish, what reproduces the choice (request snapshots): the seed its
  // sampler drew from (the local engine; nullopt for a remote backend), the
  // ids of every token it generated in order (the local engine; the end-of-
  // generation token and stop-string tokens included; empty for a remote
  // backend), and the replica that answered (a remote backend's base URL;
  // "" for the local engine).
  std::optional<uint64_t> seed;
  std::vector<int32_t> token_ids;
  std::string replica;
};

// The RT-Switcher as a backend sees it (gateway/rt_control.h implements it):
// the terms a choice gets when it starts, and the latencies it reports.
class Governor {
 public:
  struct Terms {
    sampling::SamplingTier sampling_tier = sampling::SamplingTier::kEntropyTargeted;
    int32_t max_tokens_cap = 0;  // 0 = none
    bool traced = true;
    std::string describe;  // for the trace line ("" = no switcher)
    int32_t level = -1;    // the RT-Switcher level these terms are (-1 = none)
  };
  virtual ~Governor() = default;
  // Called on the thread that starts the choice (the scheduler thread for
  // the local engine; a request thread for a remote one).
  virtual Terms Admit() = 0;
  virtual void ObserveTtft(std::chrono::nanoseconds ttft) = 0;
  virtual void ObserveTpot(std::chrono::nanoseconds tpot) = 0;
};

// Where a run's events go (the gateway's flight). Thread-safe.
class Sink {
 public:
  virtual ~Sink() = default;
  // Appends `e`. Per choice: deltas, then one kFinish.
  virtual void Push(Event&& e) = 0;
  // Appends `events` in order, as Push would one by one (a backend that
  // reads several at once hands them over together: one lock, no move of
  // each). `events` is left in an unspecified state.
  virtual void PushAll(std::vector<Event>&& events) {
    for (Event& e : events) Push(std::move(e));
  }
  // A choice produced its first token, `ttft` after it was submitted (before
  // that token's text, which a stop string may hold back, is pushed).
  virtual void OnFirstToken(std::chrono::nanoseconds ttft) = 0;
  // A choice runs on cheaper terms than the request asked (the Governor's):
  // the answer is served, never stored as the answer to the request.
  virtual void DoNotStore() = 0;
};

// A run in progress. Cancel is idempotent and thread-safe; every choice still
// running then finishes soon with kCancelled.
class Run {
 public:
  virtual ~Run() = default;
  virtual void Cancel() = 0;
};

// What Prepare learned about a request; immutable, shared with its run.
struct Prepared {
  virtual ~Prepared() = default;
  int32_t prompt_tokens = 0;  // 0 = not known before the backend reports usage
  int32_t max_tokens = 0;     // per choice as it will run; 0 = the upstream's default
  // The effective stop strings: the request's own, then the chat template's
  // turn ends (local engine).
  std::vector<std::string> stops;
  // The local engine's prompt tokens: the response tiers key on them (two
  // requests that render to the same tokens get the same answer). Empty for
  // a remote backend, whose requests are keyed on their fields.
  std::vector<int32_t> tokens;
  // The run reports its events only once the whole answer is in (a remote
  // backend asked its upstream for a whole answer: Request::stream false).
  // The single-flight table keeps such runs apart from streaming ones.
  bool whole = false;
};

struct EmbeddingRequest {
  std::string request_id;
  std::string tenant = "default";
  std::string model;                            // as the client asked ("" = default backend)
  std::vector<std::string> texts;               // each is embedded separately
  std::vector<std::vector<int32_t>> token_ids;  // or pre-tokenized inputs
  // The request's trace (null: none); a remote backend sends it upstream.
  std::shared_ptr<obs::RequestTrace> trace = nullptr;
};

struct EmbeddingResult {
  std::vector<std::vector<float>> embeddings;  // one per input, in order, unit length
  int32_t prompt_tokens = 0;
};

// Which of a backend's own cached state an invalidation (DELETE /v1/cache)
// drops: the prefix blocks (L2) of the local engine. Every field set must
// hold (nothing set: everything).
struct PrefixInvalidation {
  std::optional<std::string> tenant;  // that tenant's blocks only
  // An exact request: the blocks holding its prompt's last token and what
  // follows it (its answer), not the prefix it shares with other prompts.
  std::optional<std::vector<int32_t>> prompt;
  // Blocks of chains whose text (the rendered prompt, control tokens as
  // their text) contains this within its first bytes (kMaxPrefixLead past
  // the prefix's length), from the block holding its last byte on.
  std::optional<std::string> text_prefix;
  static constexpr size_t kMaxPrefixLead = 1024;  // room for a chat template's header
};

// A cached prompt prefix of the local engine (L2), for a warm-up: its
// cache namespace (a hash of the model and tenant: the same on every
// instance of the same model) and its tokens.
struct CachedPrefix {
  uint64_t cache_namespace = 0;
  std::vector<int32_t> tokens;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // The model id clients use for this backend (the "model" field, /v1/models).
  virtual const std::string& name() const = 0;
  // "local", "openai" or "anthropic".
  virtual std::string_view kind() const = 0;
  // Identifies what answers: the local model's fingerprint, or a hash of a
  // remote backend's kind and upstream model. Cache keys and namespaces
  // include it, so answers of two models never mix.
  virtual uint64_t fingerprint() const = 0;
  // The context length in tokens when known (local), else 0.
  virtual int32_t n_ctx() const = 0;
  // Checks `r` for this backend and learns its prompt (see Prepared).
  virtual util::StatusOr<std::shared_ptr<const Prepared>> Prepare(const Request& r) const = 0;
  // Starts every choice of `r`, each reporting into `sink`. An error here
  // means nothing started. `governor` may be null.
  virtual util::StatusOr<std::shared_ptr<Run>> Start(const Request& r,
                                                     std::shared_ptr<const Prepared> prepared,
                                                     std::shared_ptr<Sink> sink,
                                                     Governor* governor) = 0;
  // Unit-length embeddings of each input; waits until `deadline`.
  virtual util::StatusOr<EmbeddingResult> Embed(const EmbeddingRequest& r,
                                                std::chrono::steady_clock::time_point deadline) = 0;
  // Forgets the cached prompt state `what` selects (the local engine's
  // prefix blocks, on its scheduler thread, waiting up to `timeout`); how
  // many blocks. A backend without such state answers 0.
  virtual util::StatusOr<int64_t> ForgetPrefixes(const PrefixInvalidation& what,
                                                 std::chrono::milliseconds timeout) {
    (void)what;
    (void)timeout;
    return 0;
  }
  // A warm-up (docs/api.md, "Cache warm-up"): the shared cached prefixes
  // (KvBlockPool::ForEachSharedChain),
  // at most `max`, and computing given ones into the cache. A backend
  // without such state has none and computes nothing.
  virtual util::StatusOr<std::vector<CachedPrefix>> CachedPrefixes(
      size_t max, std::chrono::milliseconds timeout) {
    (void)max;
    (void)timeout;
    return std::vector<CachedPrefix>();
  }
  // Returns the blocks published.
  virtual util::StatusOr<int64_t> WarmPrefixes(const std::vector<CachedPrefix>& prefixes,
                                               std::chrono::milliseconds timeout) {
    (void)prefixes;
    (void)timeout;
    return 0;
  }
  // Whether a run may fail before its first event in a way the client should
  // see as an HTTP error rather than an error inside a stream (a remote
  // backend: its upstream may refuse or be down); the server then holds a
  // stream's head until the first event.
  virtual bool defers_stream_head() const { return false; }
  // Whether Prepare (or Embed, or a tokenization) may wait for the model to
  // load (a local model that is not resident, backend/residency.h): such
  // calls then stay off the I/O threads.
  virtual bool may_block() const { return false; }

  // The model's vocabulary, for the token endpoints (POST /tokenize,
  // /detokenize, /v1/messages/count_tokens); the local engine has one, a
  // remote backend answers each with InvalidArgument, kUnsupportedByBackend.
  // EncodeText: the tokens of `text`; control-token text becomes those
  // tokens only with `parse_special`. DecodeTokens: the text of `ids`
  // (control tokens rendered), InvalidField "tokens" naming the first index
  // outside the vocabulary. TokenBytes: the bytes one token stands for
  // (possibly part of a UTF-8 character). PromptTokens: how many tokens the
  // prompt of `r` is, exactly as Prepare counts it, without the context check.
  virtual util::StatusOr<std::vector<int32_t>> EncodeText(std::string_view text, bool add_special,
                                                          bool parse_special) const;
  virtual util::StatusOr<std::string> DecodeTokens(std::span<const int32_t> ids) const;
  virtual util::StatusOr<std::string> TokenBytes(int32_t id) const;
  virtual util::StatusOr<int32_t> PromptTokens(const Request& r) const;

  // What an upstream answered to a request relayed to it as it is.
  struct Relayed {
    int status = 200;
    std::string body;
  };
  // Anthropic's POST /v1/messages/count_tokens sent to an Anthropic
  // upstream: `body` is the client's JSON, sent with its "model" replaced by
  // the upstream's and the backend's credential and version headers; waits
  // until `deadline`. Transport failures as for a generation (kUpstream*);
  // every other backend: InvalidArgument, kUnsupportedByBackend.
  virtual util::StatusOr<Relayed> CountTokensUpstream(
      std::string_view body, std::chrono::steady_clock::time_point deadline) const;
};

}  // namespace strata::backend
