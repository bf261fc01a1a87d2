#include "tune/live.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/near_dup.h"
#include "net/sse.h"
#include "tune/internal/json_lines.h"
#include "tune/prompt_text.h"
#include "util/hash.h"
#include "util/stats.h"

namespace strata::tune {
namespace {

using Json = nlohmann::json;

// Longer answers are compared on their first bytes (as the canary does).
constexpr size_t kComparedBytes = 64 << 10;
// What a reworded question may open with when the file has no paraphrase.
constexpr std::string_view kOpenings[] = {
    "Please tell me: ", "Quick question: ", "I would like to know: ", "Can you answer this? "};
constexpr uint64_t kPadKey = 0x7061640000000000ull;  // padding's word stream, by meaning
constexpr uint64_t kAnswerKey = 0x616e730000000000ull;

int64_t CountWords(std::string_view text) {
  int64_t n = 0;
  bool in = false;
  for (char c : text) {
    const bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
    n += !space && !in;
    in = !space;
  }
  return n;
}

// `text` with one word in five replaced by another, fixed by `key`.
std::string Reword(const std::string& text, uint64_t key) {
  const auto words = PromptBuilder::Words();
  std::string out;
  size_t at = 0, index = 0;
  while (at < text.size()) {
    size_t end = text.find(' ', at);
    if (end == std::string::npos) end = text.size();
    if (!out.empty()) out += ' ';
    const uint64_t h = util::Hash64(fmt::format("{}", index), key);
    if (h % 5 == 0) {
      out += words[(h >> 8) % words.size()];
    } else {
      out.append(text, at, end - at);
    }
    at = end + 1;
    ++index;
  }
  return out;
}

}  // namespace

bool AnswersAgree(std::string_view a, std::string_view b, double similarity) {
  if (a == b) return true;
  auto pa = cache::PrepareNearDupText(a.substr(0, kComparedBytes));
  auto pb = cache::PrepareNearDupText(b.substr(0, kComparedBytes));
  if (!pa.ok() || !pb.ok()) return false;  // one is empty or unreadable, the other not
  return cache::ScorePair(*pa, *pb, {}, similarity).similarity >= similarity;
}

util::StatusOr<PromptPool> ParsePromptPool(std::string_view text) {
  PromptPool pool;
  auto add = [&](const Json& j, const std::string& where) -> util::Status {
    if (j.is_string()) {
      pool.questions.push_back(j.get<std::string>());
      pool.paraphrases.emplace_back();
    } else if (j.is_object() && j.contains("origin") && j["origin"].is_string()) {
      pool.questions.push_back(j["origin"].get<std::string>());
      pool.paraphrases.push_back(j.contains("similar") && j["similar"].is_string()
                                     ? j["similar"].get<std::string>()
                                     : std::string());
    } else if (j.is_object() && j.contains("prompt") && j["prompt"].is_string()) {
      pool.questions.push_back(j["prompt"].get<std::string>());
      pool.paraphrases.emplace_back();
    } else if (j.is_object() && j.contains("turns") && j["turns"].is_array() &&
               !j["turns"].empty() && j["turns"][0].is_string()) {
      pool.questions.push_back(j["turns"][0].get<std::string>());
      pool.paraphrases.emplace_back();
    } else {
      return util::InvalidArgumentError(
          where +
          ": expected a string or an object with a string \"origin\", \"prompt\" or "
          "\"turns\"");
    }
    if (pool.questions.back().empty()) {
      return util::InvalidArgumentError(where + ": an empty question");
    }
    return util::OkStatus();
  };
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && text[first] == '[') {
    const Json all = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (all.is_discarded() || !all.is_array()) {
      return util::InvalidArgumentError("not a JSON array (nor JSON lines)");
    }
    for (size_t i = 0; i < all.size(); ++i) {
      STRATA_RETURN_IF_ERROR(add(all[i], fmt::format("element {}", i)));
    }
  } else {
    STRATA_RETURN_IF_ERROR(internal::ForEachJsonLine(text, [&](const Json& j, int64_t line_no) {
      if (j.is_discarded()) {
        return util::InvalidArgumentError(fmt::format("line {}: not JSON", line_no));
      }
      return add(j, fmt::format("line {}", line_no));
    }));
  }
  if (pool.questions.empty()) return util::InvalidArgumentError("no questions");
  return pool;
}

ScenarioText::ScenarioText(const Scenario& s, const std::vector<WorkloadRequest>& requests,
                           const PromptPool& pool, uint64_t seed)
    : seed_(seed) {
  const PromptBuilder words({.seed = seed});
  std::map<uint64_t, size_t> meaning_index;     // meaning -> order of first appearance
  std::map<uint64_t, uint64_t> first_question;  // meaning -> the question first asked for it
  std::map<uint64_t, std::string> session_system;
  system_.reserve(requests.size());
  question_.reserve(requests.size());
  for (const WorkloadRequest& w : requests) {
    std::string sys;
    if (w.session != 0 && w.turn > 0) {
      sys = session_system[w.session];
    } else if (w.prefix_id != 0 && s.system_tokens > 0) {
      sys = words.Block(static_cast<int64_t>(w.prefix_id >> 1), s.system_tokens);
    } else if (w.prefix_id != 0 && w.shared_tokens > 0) {
      sys = words.Block(static_cast<int64_t>(w.prefix_id >> 1), w.shared_tokens);
    }
    if (w.session != 0 && w.turn == 0) session_system[w.session] = sys;
    const int32_t tokens = std::max(1, w.prompt_tokens - w.shared_tokens);
    const auto [mi, fresh] = meaning_index.emplace(w.meaning, meaning_index.size());
    const auto [fq, first] = first_question.emplace(w.meaning, w.question);
    const bool reworded = fq->second != w.question;
    const uint64_t vary = util::Hash64(fmt::format("{}", w.question), seed);
    std::string q;
    if (!pool.questions.empty()) {
      const size_t item = mi->second % pool.questions.size();
      const std::string& origin = pool.questions[item];
      const std::string& similar = pool.paraphrases[item];
      if (!reworded) {
        q = origin;
      } else if (!similar.empty() && vary % 4 < 2) {
        q = similar;
      } else {
        q = std::string(kOpenings[(vary >> 4) % std::size(kOpenings)]) +
            (similar.empty() || vary % 4 == 3 ? origin : similar);
      }
      // Pad to the request's length with words of its meaning (rewordings
      // share them); a file used more than once over gets a few anyway.
      const int64_t have = CountWords(q);
      const int64_t want = std::max<int64_t>(words.WordsFor(tokens) - have,
                                             mi->second >= pool.questions.size() ? 6 : 0);
      if (want > 0) {
        q += "\n" + words.Unique(static_cast<int64_t>((w.meaning ^ kPadKey) >> 1), want);
      }
    } else {
      q = words.Unique(static_cast<int64_t>(w.meaning >> 1), tokens);
      if (reworded) q = Reword(q, vary);
    }
    system_.push_back(std::move(sys));
    question_.push_back(std::move(q));
  }
}

std::string ScenarioText::FillerAnswer(size_t i, int32_t tokens) const {
  return PromptBuilder({.seed = seed_}).Unique(static_cast<int64_t>((kAnswerKey ^ i) >> 1), tokens);
}

namespace {

// One request in flight: its stream's state. Its callbacks run on one I/O
// thread, in order; `done` hands the record over under the run's lock.
struct Call {
  LiveRecord record;
  net::SseParser sse;
  std::string error_body;
  bool stream_error = false;
  std::chrono::steady_clock::time_point sent;
  std::shared_ptr<net::ClientCall> call;
};

// Reads one SSE event of a chat completion stream into `c`.
void ReadChunk(Call& c, const std::string& data, const util::Clock& clock) {
  if (data == "[DONE]") return;
  const Json j = Json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    c.stream_error = true;
    c.record.error = "an event that is not a JSON object";
    return;
  }
  if (j.contains("error")) {
    c.stream_error = true;
    c.record.error =
        j["error"].is_object() ? j["error"].value("message", j["error"].dump()) : j["error"].dump();
    return;
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    c.record.completion_tokens = j["usage"].value("completion_tokens", c.record.completion_tokens);
  }
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
  const Json& choice = j["choices"][0];
  if (choice.contains("delta") && choice["delta"].is_object()) {
    const Json& delta = choice["delta"];
    if (delta.contains("content") && delta["content"].is_string()) {
      const std::string& piece = delta["content"].get_ref<const std::string&>();
      if (!piece.empty() && c.record.ttft_s < 0) {
        c.record.ttft_s = util::SecondsBetween(c.sent, clock.Now());
      }
      c.record.text += piece;
    }
  }
  if (choice.contains("logprobs") && choice["logprobs"].is_object() &&
      choice["logprobs"].contains("content") && choice["logprobs"]["content"].is_array()) {
    for (const Json& t : choice["logprobs"]["content"]) {
      if (t.is_object() && t.contains("logprob") && t["logprob"].is_number()) {
        c.record.logprob_sum += t["logprob"].get<double>();
        ++c.record.logprob_tokens;
      }
    }
  }
}

std::string Body(const LiveOptions& o, const std::string& messages, int32_t max_tokens,
                 double temperature, bool fresh) {
  Json body = {{"messages", Json::parse(messages)},
               {"max_tokens", max_tokens},
               {"temperature", temperature},
               {"ignore_eos", true}};
  if (!o.model.empty()) body["model"] = o.model;
  if (fresh) {
    body["cache"] = {{"l1", false}, {"l3", false}, {"semantic", false}};
  } else {
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    if (temperature <= 0) body["logprobs"] = true;
  }
  return body.dump();
}

net::ClientRequest Post(const LiveOptions& o, std::string body) {
  net::ClientRequest r;
  r.method = "POST";
  r.url = o.url + "/v1/chat/completions";
  r.headers.Add("Content-Type", "application/json");
  if (!o.api_key.empty()) r.headers.Add("Authorization", "Bearer " + o.api_key);
  r.body = std::move(body);
  r.total_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.request_s * 1000));
  r.first_byte_timeout = r.total_timeout;
  return r;
}

}  // namespace

util::StatusOr<std::vector<LiveRecord>> RunLive(const Scenario& s,
                                                const std::vector<WorkloadRequest>& requests,
                                                const ScenarioText& text,
                                                const LiveOptions& options, net::HttpClient& client,
                                                const util::Clock& clock) {
  if (options.url.empty()) return util::InvalidArgumentError("no server URL");
  const size_t n = requests.size();
  // What each request waits for besides its arrival: its session's previous
  // turn, or its closed-loop client's previous request (-1: nothing).
  std::vector<int64_t> after(n, -1);
  {
    std::map<uint64_t, int64_t> last_of_session;
    std::map<int32_t, int64_t> last_of_client;
    for (size_t i = 0; i < n; ++i) {
      const WorkloadRequest& w = requests[i];
      if (w.session != 0) {
        auto [it, fresh] = last_of_session.emplace(w.session, static_cast<int64_t>(i));
        if (!fresh) {
          after[i] = it->second;
          it->second = static_cast<int64_t>(i);
        }
      } else if (w.client >= 0) {
        auto [it, fresh] = last_of_client.emplace(w.client, static_cast<int64_t>(i));
        if (!fresh) {
          after[i] = it->second;
          it->second = static_cast<int64_t>(i);
        }
      }
    }
  }
  // What the dispatcher and the callbacks share; held by every callback, so
  // a callback that ends late still finds it.
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    // Guarded by mu: the records of finished requests, which ones finished,
    // the calls in flight (to cancel at the deadline) and the counts.
    std::vector<LiveRecord> records;
    std::vector<char> finished;
    std::map<size_t, std::shared_ptr<Call>> in_flight;
    size_t sent = 0, ended = 0;
  };
  auto sh = std::make_shared<Shared>();
  sh->records.resize(n);
  sh->finished.assign(n, 0);

  const auto start = clock.Now();
  // Builds request i's messages (its history included) and its call, with
  // sh->mu held (it reads an earlier record); the caller starts it after
  // letting go of the lock (a call may end at once, in its Start).
  struct Ready {
    std::shared_ptr<Call> call;
    net::ClientRequest request;
    net::ClientCallbacks callbacks;
  };
  auto prepare = [&](size_t i) {
    const WorkloadRequest& w = requests[i];
    Json messages = Json::array();
    if (after[i] >= 0 && w.session != 0) {
      const auto prev = static_cast<size_t>(after[i]);
      const LiveRecord& p = sh->records[prev];
      messages = Json::parse(p.messages, nullptr, false);
      if (!messages.is_array()) messages = Json::array();  // it was never sent
      messages.push_back(
          {{"role", "assistant"},
           {"content", p.ok && !p.text.empty()
                           ? p.text
                           : text.FillerAnswer(prev, requests[prev].output_tokens)}});
    } else if (!text.System(i).empty()) {
      messages.push_back({{"role", "system"}, {"content", text.System(i)}});
    }
    messages.push_back({{"role", "user"}, {"content", text.Question(i)}});
    auto c = std::make_shared<Call>();
    c->record.messages = messages.dump();
    c->record.max_tokens = std::max(1, w.output_tokens);
    c->record.prompt_key =
        util::Hash64(c->record.messages, static_cast<uint64_t>(c->record.max_tokens));
    c->sent = clock.Now();
    c->record.sent_s = util::SecondsBetween(start, c->sent);
    sh->in_flight[i] = c;
    ++sh->sent;
    const double temperature = w.greedy ? 0.0 : std::max(s.temperature, 1e-3);
    Ready ready{c,
                Post(options, Body(options, c->record.messages, c->record.max_tokens, temperature,
                                   /*fresh=*/false)),
                {}};
    net::ClientCallbacks& cb = ready.callbacks;
    cb.on_head = [c](const net::ClientResponseHead& head) {
      c->record.http_status = head.status;
      c->record.cache = std::string(head.headers.GetOr("x-strata-cache"));
    };
    cb.on_body = [c, &clock](std::string_view bytes) {
      if (c->record.http_status != 200) {
        if (c->error_body.size() < 4096) c->error_body.append(bytes.substr(0, 4096));
        return;
      }
      std::vector<net::SseEvent> events;
      if (util::Status st = c->sse.Feed(bytes, &events); !st.ok()) {
        c->stream_error = true;
        c->record.error = st.message();
        return;
      }
      for (const net::SseEvent& e : events) ReadChunk(*c, e.data, clock);
    };
    cb.on_done = [c, i, sh, &clock, start](const util::Status& st) {
      LiveRecord& r = c->record;
      r.done_s = util::SecondsBetween(start, clock.Now());
      r.ok = st.ok() && r.http_status == 200 && !c->stream_error;
      if (!st.ok() && r.error.empty()) r.error = st.message();
      if (r.http_status != 200 && r.http_status != 0 && r.error.empty()) {
        const Json j = Json::parse(c->error_body, nullptr, false);
        r.error = fmt::format("HTTP {}: {}", r.http_status,
                              j.is_object() && j.contains("error") && j["error"].is_object()
                                  ? j["error"].value("message", c->error_body)
                                  : c->error_body.substr(0, 200));
      }
      std::lock_guard lock(sh->mu);
      sh->records[i] = std::move(r);
      sh->finished[i] = 1;
      sh->in_flight.erase(i);
      ++sh->ended;
      sh->cv.notify_all();
    };
    return ready;
  };

  // The dispatcher: sends each request when it is due (see the header).
  std::vector<size_t> pending(n);
  for (size_t i = 0; i < n; ++i) pending[i] = i;
  auto last_progress = start;
  std::unique_lock lock(sh->mu);
  auto report = [&](bool force) {
    const auto now = clock.Now();
    if (!options.progress || (!force && now - last_progress < std::chrono::milliseconds(500))) {
      return;
    }
    last_progress = now;
    const size_t e = sh->ended;
    lock.unlock();
    options.progress(e, n);
    lock.lock();
  };
  while (!pending.empty()) {
    const double t = util::SecondsBetween(start, clock.Now());
    double next_due = t + 0.5;
    std::vector<size_t> waiting;
    std::vector<Ready> due;
    for (size_t i : pending) {
      const WorkloadRequest& w = requests[i];
      if (w.arrival_s < 0 && t >= s.duration_s) continue;  // a closed loop's, too late: never sent
      const bool ready = after[i] < 0 || sh->finished[static_cast<size_t>(after[i])];
      if (ready && w.arrival_s <= t) {
        due.push_back(prepare(i));
      } else {
        if (ready) next_due = std::min(next_due, w.arrival_s);
        waiting.push_back(i);
      }
    }
    pending.swap(waiting);
    if (!due.empty()) {
      lock.unlock();
      for (Ready& r : due) {
        r.call->call = client.Start(std::move(r.request), std::move(r.callbacks));
      }
      lock.lock();
    }
    report(false);
    if (pending.empty()) break;
    const double wait = next_due - util::SecondsBetween(start, clock.Now());
    if (wait > 0) sh->cv.wait_for(lock, std::chrono::duration<double>(wait));
  }
  // Then the answers still coming, up to the drain deadline.
  const auto drain_until =
      clock.Now() + std::chrono::milliseconds(static_cast<int64_t>(options.drain_s * 1000));
  while (sh->ended < sh->sent && clock.Now() < drain_until) {
    sh->cv.wait_for(lock, std::chrono::milliseconds(500));
    report(false);
  }
  std::vector<std::shared_ptr<Call>> left;
  for (auto& [i, c] : sh->in_flight) left.push_back(c);
  lock.unlock();
  for (auto& c : left) {
    if (c->call) c->call->Cancel();
  }
  // Cancel ends each with on_done at once; wait for them to have recorded.
  lock.lock();
  sh->cv.wait_for(lock, std::chrono::seconds(10), [&] { return sh->ended == sh->sent; });
  report(true);
  if (sh->ended != sh->sent) {
    return util::DeadlineExceededError(
        fmt::format("{} requests did not end after being cancelled", sh->sent - sh->ended));
  }
  return std::move(sh->records);
}

util::StatusOr<LiveRecord> FetchReference(const LiveOptions& options, net::HttpClient& client,
                                          const std::string& messages, int32_t max_tokens) {
  STRATA_ASSIGN_OR_RETURN(
      net::ClientResponse resp,
      client.Fetch(Post(options, Body(options, messages, max_tokens, 0, /*fresh=*/true))));
  LiveRecord r;
  r.messages = messages;
  r.max_tokens = max_tokens;
  r.http_status = resp.status;
  r.cache = std::string(resp.headers.GetOr("x-strata-cache"));
  const Json j = Json::parse(resp.body, nullptr, false);
  if (resp.status != 200 || !j.is_object() || !j.contains("choices") || !j["choices"].is_array() ||
      j["choices"].empty()) {
    r.error = fmt::format("HTTP {}: {}", resp.status, resp.body.substr(0, 200));
    return r;
  }
  const Json& m = j["choices"][0].value("message", Json::object());
  r.text = m.is_object() ? m.value("content", std::string()) : std::string();
  if (j.contains("usage") && j["usage"].is_object()) {
    r.completion_tokens = j["usage"].value("completion_tokens", 0);
  }
  r.ok = true;
  return r;
}

LiveSummary Summarise(
    const Scenario& s, const std::vector<WorkloadRequest>& requests,
    const std::vector<LiveRecord>& records, References& references,
    const std::function<std::optional<std::string>(const LiveRecord&)>& fetch_reference) {
  LiveSummary out;
  const size_t n = std::min(requests.size(), records.size());
  // Complete fresh greedy generations become references first, so a hit
  // later in the same run is judged against its own trial's generation.
  for (size_t i = 0; i < n; ++i) {
    const LiveRecord& r = records[i];
    if (r.ok && requests[i].greedy && r.cache == "miss" && r.completion_tokens >= r.max_tokens) {
      references.emplace(r.prompt_key, r.text);
    }
  }
  std::vector<double> ttfts;
  double quality_sum = 0, loglik_sum = 0, first = -1, last = 0;
  int64_t loglik_tokens = 0;
  for (size_t i = 0; i < n; ++i) {
    const LiveRecord& r = records[i];
    if (r.sent_s < 0) continue;  // never sent
    ++out.requests;
    const double arrival = requests[i].arrival_s >= 0 ? requests[i].arrival_s : r.sent_s;
    first = first < 0 ? arrival : std::min(first, arrival);
    if (!r.ok) {
      ++out.errors;
      if (out.first_errors.size() < 3) out.first_errors.push_back(r.error);
      continue;
    }
    ++out.answered;
    last = std::max(last, r.done_s);
    ++out.served[r.cache.empty() ? "unmarked" : r.cache];
    const int32_t delivered_tokens =
        r.completion_tokens > 0 ? r.completion_tokens : (r.text.empty() ? 0 : r.max_tokens);
    double q = std::min(1.0, static_cast<double>(delivered_tokens) / std::max(1, r.max_tokens));
    const bool approximate = r.cache == "l3" || r.cache == "semantic";
    out.approximate_hits += approximate;
    if (requests[i].greedy) {
      auto ref = references.find(r.prompt_key);
      if (ref == references.end() && approximate && fetch_reference) {
        if (auto fetched = fetch_reference(r)) {
          ref = references.emplace(r.prompt_key, std::move(*fetched)).first;
        }
      }
      if (ref != references.end()) {
        ++out.compared;
        // A cut answer agrees when it is the start of the reference.
        const bool agreed =
            ref->second.starts_with(r.text) || AnswersAgree(r.text, ref->second, 0.8);
        out.agreed += agreed;
        if (!agreed) {
          q = 0;
          out.false_hits += approximate;
        }
      }
      if (r.cache == "miss") {
        loglik_sum += r.logprob_sum;
        loglik_tokens += r.logprob_tokens;
      }
    }
    quality_sum += q;
    if (r.ttft_s >= 0 && arrival >= s.warmup_s &&
        (s.measure_first_s <= 0 || arrival < s.measure_first_s)) {
      ttfts.push_back(r.ttft_s);
    }
  }
  out.duration_s = std::max(1e-9, last - std::max(0.0, first));
  Measured& m = out.measured;
  m.throughput = static_cast<double>(out.answered) / out.duration_s;
  m.error_rate = out.requests > 0 ? static_cast<double>(out.errors) / out.requests : 0;
  m.quality = out.answered > 0 ? quality_sum / static_cast<double>(out.answered) : 0;
  if (!ttfts.empty()) {
    out.ttft_p50_s = util::NearestRankQuantile(ttfts, 0.50);
    m.ttft_p95_s = util::NearestRankQuantile(ttfts, 0.95);
    m.ttft_p99_s = util::NearestRankQuantile(ttfts, 0.99);
  }
  out.log_likelihood = loglik_tokens > 0 ? loglik_sum / static_cast<double>(loglik_tokens) : 0;
  return out;
}

}  // namespace strata::tune
