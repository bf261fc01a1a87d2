#include "tune/simulator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <list>
#include <map>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/random.h"
#include "util/stats.h"

namespace strata::tune {
namespace {

double Interp(const std::vector<double>& xs, const std::vector<double>& ys, double x) {
  if (xs.empty() || ys.size() != xs.size()) return 0;
  if (x <= xs.front()) return ys.front();
  if (x >= xs.back()) return ys.back();
  const size_t i = static_cast<size_t>(std::upper_bound(xs.begin(), xs.end(), x) - xs.begin());
  const double f = (x - xs[i - 1]) / (xs[i] - xs[i - 1]);
  return ys[i - 1] + f * (ys[i] - ys[i - 1]);
}

// An LRU of sized entries: the L1 answers (bytes) or the L2 prefixes (tokens).
class Lru {
 public:
  struct Entry {
    int64_t size = 0;
    double expires = 1e300;
  };
  // The entry of `id` if present and not expired at `now` (touched).
  std::optional<Entry> Find(uint64_t id, double now) {
    auto it = index_.find(id);
    if (it == index_.end()) return std::nullopt;
    if (it->second->second.expires <= now) {
      Erase(it);
      return std::nullopt;
    }
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second;
  }
  void Put(uint64_t id, Entry e, int64_t capacity) {
    if (e.size > capacity) return;
    if (auto it = index_.find(id); it != index_.end()) Erase(it);
    order_.emplace_front(id, e);
    index_[id] = order_.begin();
    used_ += e.size;
    Shrink(capacity);
  }
  void Shrink(int64_t capacity) {
    while (used_ > std::max<int64_t>(capacity, 0) && !order_.empty()) {
      Erase(index_.find(order_.back().first));
    }
  }
  int64_t used() const { return used_; }
  bool empty() const { return order_.empty(); }

 private:
  using List = std::list<std::pair<uint64_t, Entry>>;
  void Erase(std::unordered_map<uint64_t, List::iterator>::iterator it) {
    used_ -= it->second->second.size;
    order_.erase(it->second);
    index_.erase(it);
  }
  List order_;
  std::unordered_map<uint64_t, List::iterator> index_;
  int64_t used_ = 0;
};

// The engine's KV block (engine/engine.h): admission keeps one spare per
// running sequence.
constexpr int64_t kBlockTokens = 16;

struct Running {
  size_t request = 0;
  int32_t prefill_left = 0;  // prompt tokens still to prefill
  int32_t context = 0;       // tokens in its KV now
  int32_t to_generate = 0;
  int32_t generated = 0;
  int32_t held =
      0;  // KV tokens of its own (its cached prefix is shared): prompt - cached + generated
  double quality = 1;
};

}  // namespace

double TierCurve::RecallAt(double t) const { return Interp(threshold, recall, t); }
double TierCurve::FalseHitAt(double t) const { return Interp(threshold, false_hit, t); }

CostModel::CostModel() {
  // GPTCache mock test split against Arena-Hard negatives (docs/benchmarks.md):
  // L3 (weighted LCS + guards) and the built-in encoder with the guards.
  l3 = {{0.5, 0.7, 0.8, 0.9, 0.93, 0.97},
        {0.413, 0.168, 0.064, 0.018, 0.008, 0.002},
        {0.006, 0.0005, 0.0002, 0.0001, 0.0001, 0.00005}};
  semantic = {{0.7, 0.75, 0.8, 0.85, 0.9, 0.95},
              {0.30, 0.247, 0.17, 0.10, 0.042, 0.01},
              {0.004, 0.002, 0.001, 0.0005, 0.0002, 0.0001}};
}

util::StatusOr<CostModel> ParseCostModel(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return util::InvalidArgumentError("cost model: not a JSON object");
  CostModel m;
  if (j.contains("source")) {
    if (!j["source"].is_string())
      return util::InvalidArgumentError("cost model: source: not a string");
    m.source = j["source"].get<std::string>();
  }
  for (const auto& [key, field, lo, hi] :
       {std::tuple{"prefill_s_per_token", &m.prefill_s_per_token, 0.0, 10.0},
        std::tuple{"step_s", &m.step_s, 0.0, 100.0},
        std::tuple{"decode_s_per_sequence", &m.decode_s_per_sequence, 0.0, 100.0},
        std::tuple{"attention_s_per_token", &m.attention_s_per_token, 0.0, 1.0},
        std::tuple{"prefill_attention_s_per_token", &m.prefill_attention_s_per_token, 0.0, 1.0},
        std::tuple{"hit_s", &m.hit_s, 0.0, 10.0},
        std::tuple{"answer_bytes_per_token", &m.answer_bytes_per_token, 0.0, 1e6},
        std::tuple{"entry_bytes", &m.entry_bytes, 0.0, 1e9}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_number() || !(j[key].get<double>() >= lo && j[key].get<double>() <= hi)) {
      return util::InvalidArgumentError(
          fmt::format("cost model: {} must be a number in [{}, {}]", key, lo, hi));
    }
    *field = j[key].get<double>();
  }
  for (const auto& [key, curve] : {std::pair{"l3", &m.l3}, std::pair{"semantic", &m.semantic}}) {
    if (!j.contains(key)) continue;
    const nlohmann::json& c = j[key];
    TierCurve t;
    for (const auto& [name, v] :
         {std::pair{"threshold", &t.threshold}, std::pair{"recall", &t.recall},
          std::pair{"false_hit", &t.false_hit}}) {
      if (!c.is_object() || !c.contains(name) || !c[name].is_array()) {
        return util::InvalidArgumentError(fmt::format("cost model: {}.{}: an array", key, name));
      }
      for (const auto& x : c[name]) {
        if (!x.is_number() || !(x.get<double>() >= 0 && x.get<double>() <= 1)) {
          return util::InvalidArgumentError(
              fmt::format("cost model: {}.{}: numbers in [0, 1]", key, name));
        }
        v->push_back(x.get<double>());
      }
    }
    if (t.threshold.empty() || t.recall.size() != t.threshold.size() ||
        t.false_hit.size() != t.threshold.size() ||
        !std::is_sorted(t.threshold.begin(), t.threshold.end())) {
      return util::InvalidArgumentError(fmt::format(
          "cost model: {}: thresholds ascending, with a recall and a false_hit each", key));
    }
    *curve = std::move(t);
  }
  return m;
}

std::string CostModelJson(const CostModel& m) {
  auto curve = [](const TierCurve& c) {
    return nlohmann::json{
        {"threshold", c.threshold}, {"recall", c.recall}, {"false_hit", c.false_hit}};
  };
  nlohmann::json j = {{"source", m.source},
                      {"prefill_s_per_token", m.prefill_s_per_token},
                      {"step_s", m.step_s},
                      {"decode_s_per_sequence", m.decode_s_per_sequence},
                      {"attention_s_per_token", m.attention_s_per_token},
                      {"prefill_attention_s_per_token", m.prefill_attention_s_per_token},
                      {"hit_s", m.hit_s},
                      {"answer_bytes_per_token", m.answer_bytes_per_token},
                      {"entry_bytes", m.entry_bytes},
                      {"l3", curve(m.l3)},
                      {"semantic", curve(m.semantic)}};
  return j.dump(2) + "\n";
}

SimResult Simulate(const Scenario& s, const std::vector<WorkloadRequest>& requests,
                   const SimConfig& c, const CostModel& cost, uint64_t seed) {
  util::Rng rng(seed);
  SimResult out;
  out.requests = static_cast<int64_t>(requests.size());
  const size_t n = requests.size();
  if (n == 0) return out;
  const int64_t kv_capacity = c.kv_tokens > 0 ? c.kv_tokens : int64_t{8} * c.ctx;
  // When each request arrives: given, or (closed loop) when its client is free.
  std::vector<double> arrival(n, -1);
  std::vector<std::deque<size_t>> by_client;
  if (s.arrival == ArrivalProcess::kClosed) {
    by_client.resize(static_cast<size_t>(std::max(1, s.concurrency)));
    for (size_t i = 0; i < n; ++i) {
      by_client[static_cast<size_t>(std::max(0, requests[i].client)) % by_client.size()].push_back(
          i);
    }
    for (auto& q : by_client) {
      if (!q.empty()) arrival[q.front()] = 0;
    }
  } else {
    for (size_t i = 0; i < n; ++i) arrival[i] = requests[i].arrival_s;
  }
  // Arrivals not yet seen, by time (a closed loop adds its next as one ends).
  std::multimap<double, size_t> pending;
  for (size_t i = 0; i < n; ++i) {
    if (arrival[i] >= 0) pending.emplace(arrival[i], i);
  }
  const double horizon = s.duration_s;
  std::vector<double> ttft(n, -1);
  std::vector<double> quality(n, -1);  // >= 0 once answered
  std::vector<bool> failed(n, false);
  double last_answer = 0;
  Lru l1, l2;
  // Answers stored for L3 and the semantic tier: meaning -> expiry.
  std::unordered_map<uint64_t, double> meanings;
  // Questions in flight (single flight): question -> the leader, and followers.
  std::unordered_map<uint64_t, size_t> leader;
  std::unordered_map<size_t, std::vector<size_t>> followers;
  std::deque<size_t> waiting;
  std::vector<Running> running;
  int64_t active_tokens = 0;
  auto done = [&](size_t i, double at, double q) {
    quality[i] = q;
    last_answer = std::max(last_answer, at);
    if (s.arrival == ArrivalProcess::kClosed) {
      auto& q2 = by_client[static_cast<size_t>(std::max(0, requests[i].client)) % by_client.size()];
      if (!q2.empty() && q2.front() == i) q2.pop_front();
      if (!q2.empty() && at < horizon) {
        arrival[q2.front()] = at;
        pending.emplace(at, q2.front());
      }
    }
  };
  auto fail = [&](size_t i, double at) {
    failed[i] = true;
    done(i, at, -1);
    quality[i] = -1;
    // Requests waiting on its answer get none either.
    if (auto it = leader.find(requests[i].question); it != leader.end() && it->second == i) {
      leader.erase(it);
    }
    if (auto it = followers.find(i); it != followers.end()) {
      for (size_t f : it->second) {
        failed[f] = true;
        done(f, at, -1);
        quality[f] = -1;
      }
      followers.erase(it);
    }
  };
  int64_t semantic_checked = 0;  // would-be semantic hits generated to verify them
  auto serve_hit = [&](size_t i, double at, double q) {
    ttft[i] = cost.hit_s;
    done(i, at + cost.hit_s, q);
  };
  // The tiers at arrival; true when the request was answered or joined.
  auto front = [&](size_t i, double now) {
    const WorkloadRequest& w = requests[i];
    if (!w.greedy) return false;
    if (c.l1_bytes > 0 && l1.Find(w.question, now)) {
      ++out.l1_hits;
      serve_hit(i, now, 1);
      return true;
    }
    if (c.coalesce) {
      if (auto it = leader.find(w.question); it != leader.end()) {
        ++out.coalesced;
        followers[it->second].push_back(i);
        // Joined after the leader's first token: the answer so far is replayed at once.
        if (ttft[it->second] >= 0) ttft[i] = cost.hit_s;
        return true;
      }
    }
    const auto stored = meanings.find(w.meaning);
    const bool has_meaning = stored != meanings.end() && stored->second > now;
    for (const auto& [on, sim, curve, hits] :
         {std::tuple{c.l3, c.l3_similarity, &cost.l3, &out.l3_hits},
          std::tuple{c.semantic, c.semantic_similarity, &cost.semantic, &out.semantic_hits}}) {
      if (!on) continue;
      const double u = rng.Uniform();
      const bool right = has_meaning && u < curve->RecallAt(sim);
      const bool wrong = !has_meaning && !meanings.empty() && u < curve->FalseHitAt(sim);
      if (!right && !wrong) continue;
      // The semantic tier generates a would-be hit anyway to verify it:
      // every one until verify_min have been, then a share.
      if (hits == &out.semantic_hits && c.semantic_verify > 0 &&
          (semantic_checked < c.semantic_verify_min || rng.Uniform() < c.semantic_verify)) {
        ++semantic_checked;
        continue;
      }
      ++*hits;
      out.false_hits += wrong;
      serve_hit(i, now, right ? 1 : 0);
      return true;
    }
    return false;
  };
  double now = 0;
  const double stop = horizon * 20 + 600;  // an overloaded run is cut here; the rest are errors
  while (now < stop) {
    // Arrivals up to now.
    while (!pending.empty() && pending.begin()->first <= now) {
      const size_t i = pending.begin()->second;
      const double at = pending.begin()->first;
      pending.erase(pending.begin());
      const WorkloadRequest& w = requests[i];
      // Refused before any tier: a prompt over the context, an answer over
      // the largest max_tokens a request may ask.
      if (w.prompt_tokens + 1 > c.ctx || w.output_tokens > c.max_tokens_cap) {
        fail(i, at);
        continue;
      }
      if (front(i, at)) continue;
      if (static_cast<int32_t>(waiting.size()) >= c.queue) {
        fail(i, at);
        continue;
      }
      if (w.greedy && c.coalesce) leader.emplace(w.question, i);
      waiting.push_back(i);
    }
    // Admission: a free slot and room in the KV cache.
    while (!waiting.empty() && static_cast<int32_t>(running.size()) < c.parallel) {
      const size_t i = waiting.front();
      const WorkloadRequest& w = requests[i];
      int32_t cached = 0;
      if (w.prefix_id != 0 && w.shared_tokens > 0) {
        if (auto e = l2.Find(w.prefix_id, now)) {
          cached = static_cast<int32_t>(std::min<int64_t>(e->size, w.shared_tokens));
        }
      }
      const int32_t capped = std::min(w.output_tokens, std::max(1, c.ctx - w.prompt_tokens));
      // As the engine admits: the prompt's own blocks must fit beside a
      // spare block per running sequence; its cached prefix is shared, and
      // the answer's blocks come as it is generated.
      const int64_t need = w.prompt_tokens - cached + 1;
      const int64_t spare =
          kv_capacity - active_tokens - static_cast<int64_t>(running.size()) * kBlockTokens;
      if (need > spare && !running.empty()) break;  // waits for a running one to end
      l2.Shrink(kv_capacity - active_tokens - need);
      waiting.pop_front();
      active_tokens += need - 1;
      out.prompt_tokens += w.prompt_tokens;
      out.cached_prompt_tokens += cached;
      running.push_back({.request = i,
                         .prefill_left = w.prompt_tokens - cached,
                         .context = cached,
                         .to_generate = capped,
                         .generated = 0,
                         .held = w.prompt_tokens - cached,
                         .quality = static_cast<double>(capped) / w.output_tokens});
    }
    if (running.empty()) {
      if (pending.empty()) break;
      now = std::max(now, pending.begin()->first);
      continue;
    }
    // One engine step: prefill chunks in admission order, one token for each decoder.
    int32_t budget = c.batch_tokens;
    int64_t prefill = 0, decoders = 0, context = 0;
    double prefill_context = 0;  // prefill tokens × the context each attends to
    for (Running& r : running) {
      if (r.prefill_left > 0) {
        const int32_t take = std::min(r.prefill_left, budget);
        budget -= take;
        prefill += take;
        prefill_context += static_cast<double>(take) * (r.context + take / 2.0);
        r.prefill_left -= take;
        r.context += take;
      } else {
        ++decoders;
        context += r.context;
      }
    }
    now += cost.step_s + cost.decode_s_per_sequence * static_cast<double>(decoders) +
           cost.prefill_s_per_token * static_cast<double>(prefill) +
           cost.attention_s_per_token * static_cast<double>(context) +
           cost.prefill_attention_s_per_token * prefill_context;
    for (size_t k = 0; k < running.size();) {
      Running& r = running[k];
      const WorkloadRequest& w = requests[r.request];
      if (r.prefill_left == 0) {
        if (r.generated == 0 && ttft[r.request] < 0) {
          ttft[r.request] = now - arrival[r.request];
          if (w.prefix_id != 0 && w.shared_tokens > 0) {
            l2.Put(w.prefix_id, {.size = w.shared_tokens}, kv_capacity - active_tokens);
          }
          if (auto it = followers.find(r.request); it != followers.end()) {
            for (size_t f : it->second) ttft[f] = now - arrival[f];
          }
        }
        ++r.generated;
        ++r.context;
        ++r.held;
        // The answer's KV displaces cached prefixes when the pool is full.
        if (++active_tokens + l2.used() > kv_capacity) l2.Shrink(kv_capacity - active_tokens);
      }
      if (r.generated < r.to_generate) {
        ++k;
        continue;
      }
      // Answered: stored, published, its followers answered with it.
      out.output_tokens += r.generated;
      active_tokens -= r.held;
      if (w.greedy) {
        if (c.l1_bytes > 0 && r.to_generate == w.output_tokens) {
          l1.Put(w.question,
                 {.size = static_cast<int64_t>(cost.entry_bytes +
                                               cost.answer_bytes_per_token * r.generated),
                  .expires = now + c.l1_ttl_s},
                 c.l1_bytes);
        }
        meanings[w.meaning] = now + c.l1_ttl_s;
        leader.erase(w.question);
      }
      if (w.publishes != 0) {
        l2.Put(w.publishes, {.size = w.prompt_tokens + r.generated}, kv_capacity - active_tokens);
      }
      done(r.request, now, r.quality);
      if (auto it = followers.find(r.request); it != followers.end()) {
        for (size_t f : it->second) done(f, now, r.quality);
        followers.erase(it);
      }
      running[k] = running.back();
      running.pop_back();
    }
  }
  // Tally: every request sent.
  std::vector<double> ttfts;
  double quality_sum = 0;
  out.requests = 0;
  for (size_t i = 0; i < n; ++i) {
    if (arrival[i] < 0) continue;  // a closed loop's, after the duration: never sent
    ++out.requests;
    if (failed[i] || quality[i] < 0) {
      ++out.errors;
      continue;
    }
    ++out.answered;
    quality_sum += quality[i];
    if (ttft[i] >= 0 && (s.measure_first_s <= 0 || arrival[i] < s.measure_first_s) &&
        arrival[i] >= s.warmup_s) {
      ttfts.push_back(ttft[i]);
    }
  }
  const double first = *std::min_element(arrival.begin(), arrival.end(), [](double a, double b) {
    return (a < 0 ? 1e300 : a) < (b < 0 ? 1e300 : b);
  });
  out.duration_s = std::max(1e-9, last_answer - std::max(0.0, first));
  out.throughput_rps = static_cast<double>(out.answered) / out.duration_s;
  out.output_tokens_per_s = static_cast<double>(out.output_tokens) / out.duration_s;
  out.error_rate = out.requests > 0 ? static_cast<double>(out.errors) / out.requests : 0;
  out.quality = out.answered > 0 ? quality_sum / static_cast<double>(out.answered) : 0;
  out.ttft_samples = static_cast<int64_t>(ttfts.size());
  if (!ttfts.empty()) {
    out.ttft_p50_s = util::NearestRankQuantile(ttfts, 0.50);
    out.ttft_p95_s = util::NearestRankQuantile(ttfts, 0.95);
    out.ttft_p99_s = util::NearestRankQuantile(ttfts, 0.99);
  }
  return out;
}

}  // namespace strata::tune
