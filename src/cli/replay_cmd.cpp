// `strata replay ID`: runs a recorded request (a request snapshot, `strata
// serve --snapshots`) again and says whether the answer is the same.
//
// The local engine: the model is the one given with -m or else the file the
// snapshot names, and must be the one that answered (its fingerprint, and
// its SHA-256 when the snapshot has it); the request is rendered again with
// the recorded chat format and settings (a prompt that now renders to other
// tokens is a difference), each choice samples with its recorded seed and
// under the RT-Switcher terms it ran on, in this process, on the same code
// the server runs. Deterministic requests must give the same tokens; an
// answer that came from a cache tier is compared with what the engine
// generates (an l3 answer was a near-duplicate's, so a difference there is
// expected). A remote backend's request is sent again to --upstream and
// compared, with the warning that a remote model need not be deterministic.
//
// Exit status: 0 identical, 1 different, 2 error or bad arguments.
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <mutex>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include "backend/local.h"
#include "backend/remote.h"
#include "cli/commands.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "model/transformer.h"
#include "net/http_client.h"
#include "obs/digest.h"
#include "obs/metrics.h"
#include "obs/snapshot_store.h"
#include "sampling/tiers.h"
#include "server/snapshot_record.h"
#include "util/clock.h"
#include "util/utf8.h"

namespace strata::cli {
namespace {

constexpr int kExitDifferent = 1;  // kExitFailure's value: the answer differs
constexpr int kExitError = 2;      // anything that stops the replay

struct ReplayFlags {
  std::string id;
  std::string dir;
  std::string key_file;
  std::string tenant = "default";
  std::string model;
  int32_t threads = 2;
  double timeout_s = 600;
  std::string upstream;           // a remote backend's base URL to send the request to
  std::string upstream_key_file;  // its API key
  std::string upstream_model;     // the upstream's model name; "" = the snapshot's model id
  std::string log_level = "warn";
};

// An error that stops the replay: exit 2 with the message.
int Fail(const std::string& message) {
  std::fprintf(stderr, "strata replay: error: %s\n", message.c_str());
  return kExitError;
}

bool ValidRequestId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
}

// `s` quoted and escaped (as JSON), at most `max` bytes of it.
std::string Quote(std::string_view s, size_t max = 48) {
  std::string out;
  const bool cut = s.size() > max;
  util::AppendJsonString(out, util::SanitizeUtf8(s.substr(0, max)));
  return cut ? out + "..." : out;
}

// One choice as the replay produced it.
struct Replayed {
  std::string text;
  std::vector<gateway::ToolCall> tool_calls;
  std::vector<int32_t> tokens;
  gateway::FinishReason finish = gateway::FinishReason::kCancelled;
  std::string stop_sequence;
  util::Status status = util::UnavailableError("the choice did not finish");
  bool finished = false;
};

// Collects a run's events per choice. Thread-safe (events come on the
// scheduler thread or an HTTP client thread; Wait on the main thread).
class CollectSink final : public backend::Sink {
 public:
  explicit CollectSink(size_t n) : choices_(n) {}
  void Push(backend::Event&& e) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (e.index < 0 || static_cast<size_t>(e.index) >= choices_.size()) return;
    Replayed& c = choices_[static_cast<size_t>(e.index)];
    if (e.kind == backend::Event::Kind::kDelta) {
      c.text += e.text;
      for (const auto& t : e.tool_calls) {
        if (!t.id.empty() || static_cast<size_t>(t.index) >= c.tool_calls.size()) {
          c.tool_calls.push_back({t.id, t.name, ""});
        }
        c.tool_calls.back().arguments += t.arguments;
      }
      return;
    }
    c.finish = e.finish;
    c.stop_sequence = e.stop_sequence;
    c.tokens = e.token_ids;
    c.status = e.status;
    c.finished = true;
    ++finished_;
    cv_.notify_all();
  }
  void OnFirstToken(std::chrono::nanoseconds) override {}
  void DoNotStore() override {}
  // Waits until every choice finished or `deadline`; the choices.
  std::optional<std::vector<Replayed>> Wait(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_until(lock, deadline, [this] { return finished_ == choices_.size(); })) {
      return std::nullopt;
    }
    return choices_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;     // a choice finished
  std::vector<Replayed> choices_;  // guarded by mu_
  size_t finished_ = 0;            // guarded by mu_
};

// The RT-Switcher's terms each choice ran on, handed out in admission order
// (the scheduler admits a run's choices in order).
class RecordedTerms final : public backend::Governor {
 public:
  explicit RecordedTerms(std::vector<Terms> terms) : terms_(std::move(terms)) {}
  Terms Admit() override {
    std::lock_guard<std::mutex> lock(mu_);
    return terms_[std::min(next_++, terms_.size() - 1)];
  }
  void ObserveTtft(std::chrono::nanoseconds) override {}
  void ObserveTpot(std::chrono::nanoseconds) override {}

 private:
  std::mutex mu_;
  const std::vector<Terms> terms_;  // at least one
  size_t next_ = 0;                 // guarded by mu_
};

// " rt_level=1 sampling=topk max_tokens_cap=64" (the gateway's RtGovernor
// writes it) back into terms; "" = the request's own terms.
util::StatusOr<backend::Governor::Terms> ParseTerms(const std::string& text) {
  backend::Governor::Terms t;
  t.describe = text;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = std::min(text.find(' ', pos), text.size());
    const std::string_view part = std::string_view(text).substr(pos, end - pos);
    pos = end + 1;
    const size_t eq = part.find('=');
    if (part.empty() || eq == std::string_view::npos) continue;
    const std::string_view key = part.substr(0, eq);
    const std::string_view value = part.substr(eq + 1);
    if (key == "sampling") {
      bool found = false;
      for (auto tier : {sampling::SamplingTier::kEntropyTargeted, sampling::SamplingTier::kTopK}) {
        if (sampling::SamplingTierName(tier) == value) {
          t.sampling_tier = tier;
          found = true;
        }
      }
      if (!found) {
        return util::InvalidArgumentError(
            fmt::format("the recorded RT-Switcher terms name sampling '{}'", value));
      }
    } else if (key == "max_tokens_cap") {
      t.max_tokens_cap = std::atoi(std::string(value).c_str());
    }
  }
  return t;
}

// How one choice compares; empty `difference` = identical.
struct Comparison {
  std::string difference;
  size_t tokens = 0;
};

Comparison Compare(const server::SnapshotChoice& rec, const Replayed& got,
                   const text::Tokenizer* tok) {
  Comparison c;
  c.tokens = got.tokens.size();
  auto piece = [&](int32_t id) {
    return tok != nullptr && tok->IsValid(id) ? Quote(tok->Piece(id, true)) : std::string("?");
  };
  if (!got.status.ok()) {
    c.difference = "the replay failed: " + got.status.message();
    return c;
  }
  if (!rec.tokens.empty() && tok != nullptr) {
    const size_t n = std::min(rec.tokens.size(), got.tokens.size());
    for (size_t i = 0; i < n; ++i) {
      if (rec.tokens[i] != got.tokens[i]) {
        c.difference =
            fmt::format("token {} differs: recorded {} {}, replayed {} {}", i, rec.tokens[i],
                        piece(rec.tokens[i]), got.tokens[i], piece(got.tokens[i]));
        return c;
      }
    }
    if (rec.tokens.size() != got.tokens.size()) {
      const bool longer = got.tokens.size() > rec.tokens.size();
      const auto& more = longer ? got.tokens : rec.tokens;
      c.difference = fmt::format(
          "the {} goes on after token {}: recorded {} tokens, replayed {}; the next is {} {}",
          longer ? "replay" : "recording", n, rec.tokens.size(), got.tokens.size(), more[n],
          piece(more[n]));
      return c;
    }
  }
  if (rec.text != got.text) {
    size_t i = 0;
    while (i < rec.text.size() && i < got.text.size() && rec.text[i] == got.text[i]) ++i;
    c.difference = fmt::format("the text differs at byte {}: recorded {}, replayed {}", i,
                               Quote(std::string_view(rec.text).substr(i)),
                               Quote(std::string_view(got.text).substr(i)));
    return c;
  }
  if (rec.tool_calls.size() != got.tool_calls.size()) {
    c.difference = fmt::format("recorded {} tool call(s), replayed {}", rec.tool_calls.size(),
                               got.tool_calls.size());
    return c;
  }
  for (size_t i = 0; i < rec.tool_calls.size(); ++i) {
    const auto& a = rec.tool_calls[i];
    const auto& b = got.tool_calls[i];
    if (a.id != b.id || a.name != b.name || a.arguments != b.arguments) {
      c.difference = fmt::format("tool call {} differs: recorded {} {}, replayed {} {}", i, a.name,
                                 Quote(a.arguments), b.name, Quote(b.arguments));
      return c;
    }
  }
  if (rec.finish != got.finish || rec.stop_sequence != got.stop_sequence) {
    c.difference = fmt::format("it ended differently: recorded {}{}, replayed {}{}",
                               backend::FinishReasonLabel(rec.finish),
                               rec.stop_sequence.empty() ? "" : " " + Quote(rec.stop_sequence),
                               backend::FinishReasonLabel(got.finish),
                               got.stop_sequence.empty() ? "" : " " + Quote(got.stop_sequence));
  }
  return c;
}

// The request of prompt `part` (a prompt array's later prompts replace the
// first), sampling with the recorded seed of its first choice.
gateway::CompletionRequest PartRequest(const server::SnapshotRecord& r, size_t part) {
  gateway::CompletionRequest q = r.request;
  const server::SnapshotPrompt& p = r.prompts[part];
  if (part > 0) {
    q.prompt = p.prompt;
    q.prompt_ids = p.prompt_ids;
  }
  // What the server fixed for a request without max_tokens (what was left
  // of its context, under its cap) is what it ran with.
  if (!q.max_tokens && p.max_tokens > 0) q.max_tokens = p.max_tokens;
  const auto& first = r.choices[part * static_cast<size_t>(r.request.n)];
  if (first.seed) {
    q.sampling.seed = *first.seed;  // choice j samples with seed + j, as in the server
    q.fixed_seed = true;
  }
  return q;
}

// The note an answer's cache outcome needs.
std::string CacheNote(const server::SnapshotRecord& r) {
  if (r.cache == "l3") {
    return fmt::format(
        " (an l3 answer is a near-duplicate request's answer, similarity {:.3f}: approximate by "
        "design, so the engine's answer to this request may differ)",
        r.similarity.value_or(0));
  }
  if (r.cache == "l1" || r.cache == "coalesced") {
    return " (served from the cache; replayed as the engine generates it)";
  }
  return "";
}

// Prints each choice's comparison; the exit status.
int Report(const server::SnapshotRecord& r, const std::vector<std::vector<Replayed>>& parts,
           const text::Tokenizer* tok, bool remote) {
  size_t different = 0;
  size_t tokens = 0;
  for (size_t part = 0; part < parts.size(); ++part) {
    for (size_t j = 0; j < parts[part].size(); ++j) {
      const size_t index = part * static_cast<size_t>(r.request.n) + j;
      const server::SnapshotChoice& rec = r.choices[index];
      const Comparison c = Compare(rec, parts[part][j], tok);
      tokens += c.tokens;
      const std::string seed = rec.seed ? fmt::format(" (seed {})", *rec.seed) : "";
      if (c.difference.empty()) {
        std::printf("choice %zu%s: identical, %s\n", index, seed.c_str(),
                    tok != nullptr ? fmt::format("{} tokens", c.tokens).c_str()
                                   : fmt::format("{} bytes", rec.text.size()).c_str());
      } else {
        ++different;
        std::printf("choice %zu%s: DIFFERENT: %s\n", index, seed.c_str(), c.difference.c_str());
      }
    }
  }
  if (different == 0) {
    std::printf("identical: %zu choice(s)%s\n", r.choices.size(),
                tok != nullptr ? fmt::format(", {} tokens", tokens).c_str() : "");
    return kExitOk;
  }
  std::printf("different: %zu of %zu choice(s)%s%s\n", different, r.choices.size(),
              CacheNote(r).c_str(),
              remote ? " (a remote model's answers need not be deterministic)" : "");
  return kExitDifferent;
}

// Loads the model and checks it is the one that answered.
util::StatusOr<std::unique_ptr<model::Model>> OpenRecordedModel(const Env& env,
                                                                const ReplayFlags& f,
                                                                const server::SnapshotRecord& r,
                                                                util::Logger& log) {
  const std::string path = f.model.empty() ? r.backend.model_path : f.model;
  if (path.empty()) {
    return util::InvalidArgumentError(
        "the snapshot names no model file: give the model that answered with -m");
  }
  // The weight layout it served with (a snapshot without one predates
  // packing: off); auto resolves on this machine, as the kernels do.
  model::PackMode pack = model::PackMode::kOff;
  if (!r.backend.repack.empty()) {
    STRATA_ASSIGN_OR_RETURN(pack, model::ParsePackMode(r.backend.repack));
  }
  auto m = model::Model::Load(
      *env.fs, path, {.prefetch = true, .pack = {.mode = pack, .threads = f.threads}}, log);
  if (!m.ok())
    return util::FailedPreconditionError(fmt::format("model {}: {}", path, m.status().message()));
  if ((*m)->fingerprint() != r.backend.fingerprint) {
    return util::FailedPreconditionError(fmt::format(
        "{} is not the model that answered: its fingerprint is {:016x}, the snapshot's {:016x} "
        "(recorded file {})",
        path, (*m)->fingerprint(), r.backend.fingerprint,
        r.backend.model_path.empty() ? "unknown" : r.backend.model_path));
  }
  std::string sha = "not recorded (the server's digest had not finished)";
  if (!r.backend.model_sha256.empty()) {
    const util::MappedFile* file = (*m)->gguf().file();
    const std::string got =
        file != nullptr
            ? obs::Hex(obs::Sha256(std::string_view(
                  reinterpret_cast<const char*>(file->bytes().data()), file->bytes().size())))
            : std::string("unavailable");
    if (got != r.backend.model_sha256) {
      return util::FailedPreconditionError(
          fmt::format("{} is not the model that answered: its SHA-256 is {}, the snapshot's {}",
                      path, got, r.backend.model_sha256));
    }
    sha = got + " verified";
  }
  std::printf("model %s: fingerprint %016llx verified, SHA-256 %s\n", path.c_str(),
              static_cast<unsigned long long>(r.backend.fingerprint), sha.c_str());
  return m;
}

// Runs prompt `part` of `r` on `b` and collects its choices; notes in
// `prompt_difference` (when still empty) a prompt that renders to other
// tokens than the recorded ones.
util::StatusOr<std::vector<Replayed>> RunPart(const server::SnapshotRecord& r, size_t part,
                                              backend::Backend& b, backend::Governor* governor,
                                              const ReplayFlags& f,
                                              std::string* prompt_difference) {
  const gateway::CompletionRequest q = PartRequest(r, part);
  STRATA_RETURN_IF_ERROR(sampling::Validate(q.sampling));
  STRATA_ASSIGN_OR_RETURN(auto prepared, b.Prepare(q));
  const std::vector<int32_t>& want = r.prompts[part].tokens;
  if (!want.empty() && prepared->tokens != want && prompt_difference->empty()) {
    size_t i = 0;
    while (i < want.size() && i < prepared->tokens.size() && want[i] == prepared->tokens[i]) ++i;
    *prompt_difference = fmt::format(
        "prompt {} renders to other tokens now: they differ from token {} on (recorded {} "
        "tokens, now {}): the chat template or the tokenizer changed",
        part, i, want.size(), prepared->tokens.size());
  }
  auto sink = std::make_shared<CollectSink>(static_cast<size_t>(q.n));
  STRATA_ASSIGN_OR_RETURN(auto run, b.Start(q, prepared, sink, governor));
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1000));
  auto choices = sink->Wait(deadline);
  if (!choices) {
    run->Cancel();
    return util::DeadlineExceededError(
        fmt::format("the replay did not finish within {} s (--timeout)", f.timeout_s));
  }
  return std::move(*choices);
}

int ReplayLocal(const Env& env, const ReplayFlags& f, const server::SnapshotRecord& r,
                util::Logger& log) {
  auto m = OpenRecordedModel(env, f, r, log);
  if (!m.ok()) return Fail(m.status().message());
  const model::Model& model = **m;
  engine::EngineOptions eo;
  eo.n_threads = f.threads;
  eo.n_ctx = r.backend.n_ctx > 0 ? r.backend.n_ctx : model.config().n_ctx_train;
  if (eo.n_ctx > model.config().n_ctx_train) {
    return Fail(fmt::format("the snapshot ran with a context of {} tokens; the model has {}",
                            eo.n_ctx, model.config().n_ctx_train));
  }
  eo.n_seq_max = std::clamp(r.request.n, 1, 8);
  // The KV type it served with (a snapshot without one predates the choice: F32).
  if (r.backend.kv_type.empty()) {
    eo.kv_type = kernels::TensorType::kF32;
  } else {
    auto kv_type = engine::ParseKvType(r.backend.kv_type);
    if (!kv_type.ok()) return Fail(fmt::format("the snapshot's {}", kv_type.status().message()));
    eo.kv_type = *kv_type;
  }
  auto engine = engine::Engine::Create(model, eo, log);
  if (!engine.ok()) return Fail(engine.status().message());
  auto sched = engine::Scheduler::Start(**engine, {.max_running = std::max(r.request.n, 1)}, log);
  if (!sched.ok()) return Fail(sched.status().message());
  backend::LocalOptions lo;
  lo.name = r.backend.name;
  lo.max_tokens_cap =
      r.backend.max_tokens_cap > 0 ? std::min(r.backend.max_tokens_cap, eo.n_ctx) : eo.n_ctx;
  lo.prompt_special_tokens = r.backend.prompt_special_tokens;
  if (!r.backend.chat_format.empty()) {
    lo.chat_format = text::ParseChatFormat(r.backend.chat_format);
    if (!lo.chat_format) {
      return Fail(fmt::format("the snapshot's chat format '{}' is unknown to this strata",
                              r.backend.chat_format));
    }
  }
  // No seed stream: each choice samples with the seed its request now carries.
  lo.unseeded_seed_base = std::nullopt;
  obs::MetricsRegistry metrics;
  const util::Clock& clock = util::RealClock();
  auto b = backend::LocalBackend::Create(model, **sched, lo, metrics, clock, log);
  if (!b.ok()) return Fail(b.status().message());
  std::vector<backend::Governor::Terms> terms;
  bool governed = false;
  for (const auto& c : r.choices) {
    auto t = ParseTerms(c.terms);
    if (!t.ok()) return Fail(t.status().message());
    governed |= !c.terms.empty();
    terms.push_back(std::move(t).value());
  }
  // Each part's choices take their terms in order; parts run one after the other.
  std::string prompt_difference;
  std::vector<std::vector<Replayed>> parts;
  const size_t n = static_cast<size_t>(r.request.n);
  for (size_t part = 0; part < r.prompts.size(); ++part) {
    const auto first = terms.begin() + static_cast<std::ptrdiff_t>(part * n);
    RecordedTerms governor({first, first + static_cast<std::ptrdiff_t>(n)});
    auto got = RunPart(r, part, **b, governed ? &governor : nullptr, f, &prompt_difference);
    if (!got.ok()) return Fail(got.status().message());
    parts.push_back(std::move(got).value());
  }
  if (!prompt_difference.empty()) {
    std::printf("DIFFERENT: %s\n", prompt_difference.c_str());
    Report(r, parts, &model.tokenizer(), false);
    return kExitDifferent;
  }
  return Report(r, parts, &model.tokenizer(), false);
}

int ReplayRemote(const Env& env, const ReplayFlags& f, const server::SnapshotRecord& r,
                 util::Logger& log) {
  if (f.upstream.empty()) {
    return Fail(fmt::format(
        "the answer came from the remote backend '{}' ({}); give its URL with --upstream to send "
        "the request there again (a remote model's answers need not be deterministic)",
        r.backend.name, r.backend.kind));
  }
  const auto api = backend::upstream::ParseApi(r.backend.kind);
  if (!api) return Fail(fmt::format("the snapshot's backend kind '{}' is unknown", r.backend.kind));
  backend::RemoteOptions o;
  o.name = r.backend.name;
  o.api = *api;
  o.upstream_model = f.upstream_model;
  o.routing.replicas = {f.upstream};
  o.health_path = "";
  o.max_attempts = 1;
  if (!f.upstream_key_file.empty()) {
    auto key = env.fs->ReadFile(f.upstream_key_file);
    if (!key.ok()) return Fail("--upstream-key-file: " + key.status().message());
    std::string k = *key;
    while (!k.empty() && (k.back() == '\n' || k.back() == '\r' || k.back() == ' ')) k.pop_back();
    o.credential = std::move(k);
  }
  auto client = net::HttpClient::Create({}, log);
  if (!client.ok()) return Fail(client.status().message());
  obs::MetricsRegistry registry;
  auto metrics = backend::RemoteMetrics::Register(registry);
  auto b = backend::RemoteBackend::Create(o, **client, *metrics, util::RealClock(), log);
  if (!b.ok()) return Fail("--upstream: " + b.status().message());
  std::printf("upstream %s (%s): a remote model's answers need not be deterministic\n",
              f.upstream.c_str(), r.backend.kind.c_str());
  std::string prompt_difference;  // a remote backend prepares no tokens
  std::vector<std::vector<Replayed>> parts;
  for (size_t part = 0; part < r.prompts.size(); ++part) {
    auto got = RunPart(r, part, **b, nullptr, f, &prompt_difference);
    if (!got.ok()) return Fail(got.status().message());
    parts.push_back(std::move(got).value());
  }
  return Report(r, parts, nullptr, true);
}

int RunReplay(const Env& env, const ReplayFlags& f) {
  auto log = MakeLogger(f.log_level);
  if (!ValidRequestId(f.id)) {
    return UsageError(
        fmt::format("request id '{}' is not 1 to 128 characters of [A-Za-z0-9._-]", f.id));
  }
  if (f.dir.empty()) return UsageError("--snapshots DIR is required");
  if (f.key_file.empty()) return UsageError("--snapshot-key-file FILE is required");
  if (f.threads < 1 || f.threads > 256) {
    return UsageError(fmt::format("-t {} is outside [1, 256]", f.threads));
  }
  if (!(f.timeout_s > 0 && f.timeout_s <= 86400)) {
    return UsageError(fmt::format("--timeout {} is outside (0, 86400] seconds", f.timeout_s));
  }
  auto key = obs::SnapshotKey::Load(*env.fs, f.key_file);
  if (!key.ok()) return UsageError("--snapshot-key-file: " + key.status().message());
  auto opened = obs::SnapshotStore::Read(*env.fs, f.dir, *key, f.tenant, f.id);
  if (!opened.ok()) {
    if (opened.status().code() == util::StatusCode::kNotFound) {
      return Fail(fmt::format(
          "no snapshot of request '{}' for tenant '{}' in {} (a snapshot belongs to the tenant "
          "of the API key that sent the request: --tenant; or it has expired)",
          f.id, f.tenant, f.dir));
    }
    return Fail(fmt::format("the snapshot of request '{}': {}", f.id, opened.status().message()));
  }
  auto record = server::DecodeSnapshotRecord(opened->plaintext);
  if (!record.ok()) return Fail(record.status().message());
  const server::SnapshotRecord& r = *record;
  const std::time_t t = static_cast<std::time_t>(r.created_ms / 1000);
  std::printf("request %s: tenant %s, %s %s, %s, backend '%s' (%s), cache %s, %zu choice(s)%s\n",
              r.request_id.c_str(), r.tenant.c_str(), r.api.c_str(), r.endpoint.c_str(),
              fmt::format("{:%Y-%m-%d %H:%M:%S} UTC", fmt::gmtime(t)).c_str(),
              r.backend.name.c_str(), r.backend.kind.c_str(), r.cache.c_str(), r.choices.size(),
              CacheNote(r).c_str());
  if (r.backend.kind == "local") return ReplayLocal(env, f, r, *log);
  return ReplayRemote(env, f, r, *log);
}

}  // namespace

Command RegisterReplay(CLI::App& app) {
  auto f = std::make_shared<ReplayFlags>();
  CLI::App* cmd = app.add_subcommand(
      "replay",
      "Run a recorded request (strata serve --snapshots) again and say whether the answer is "
      "identical (exit 0), different (1), or the replay failed (2)");
  cmd->add_option("id", f->id, "The request id (X-Request-ID) of the snapshot")->required();
  cmd->add_option("--snapshots", f->dir, "The snapshot directory (strata serve --snapshots)");
  cmd->add_option("--snapshot-key-file", f->key_file,
                  "The snapshots' key file (32 raw bytes or 64 hex digits)");
  cmd->add_option("--tenant", f->tenant,
                  "The tenant of the API key that sent the request (the API key file's name)")
      ->capture_default_str();
  cmd->add_option("-m,--model", f->model,
                  "The GGUF model that answered (default: the file the snapshot names); it must "
                  "match the recorded fingerprint and SHA-256");
  cmd->add_option("-t,--threads", f->threads, "Threads of the forward pass, 1 to 256")
      ->capture_default_str();
  cmd->add_option("--timeout", f->timeout_s, "Seconds the replay may run, (0, 86400]")
      ->capture_default_str();
  cmd->add_option("--upstream", f->upstream,
                  "A remote backend's snapshot: the upstream's base URL to send the request to");
  cmd->add_option("--upstream-key-file", f->upstream_key_file,
                  "A file holding the upstream's API key (never logged)");
  cmd->add_option("--upstream-model", f->upstream_model,
                  "The model name the upstream expects (default: the snapshot's model id)");
  cmd->add_option("--log-level", f->log_level, "debug, info, warn, error or off")
      ->capture_default_str();
  return {cmd, [f](const Env& env) { return RunReplay(env, *f); }};
}

}  // namespace strata::cli
