#include "cache/admission.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace strata::cache {

util::Status ValidateAdmission(const AdmissionOptions& o) {
  auto bad = [](std::string what) { return util::InvalidArgumentError("admission: " + what); };
  if (!(o.gain > 0 && o.gain <= 100))
    return bad(fmt::format("gain {} is outside (0, 100]", o.gain));
  if (!(o.min_probability > 0 && o.min_probability <= 1)) {
    return bad(fmt::format("min_probability {} is outside (0, 1]", o.min_probability));
  }
  if (!(o.watch_factor >= 0.25 && o.watch_factor <= 16)) {
    return bad(fmt::format("watch_factor {} is outside [0.25, 16]", o.watch_factor));
  }
  if (o.window < 16 || o.window > (1u << 20)) {
    return bad(fmt::format("window {} is outside [16, 2^20]", o.window));
  }
  return util::OkStatus();
}

AdmissionGate::AdmissionGate(const AdmissionOptions& options)
    : options_(options), outcomes_((std::max<uint32_t>(options.window, 1) + 63) / 64, 0) {}

void AdmissionGate::RecordLookup(uint64_t key, bool /*hit*/) {
  if (!options_.enabled) return;
  auto it = watched_.find(key);
  if (it == watched_.end() || it->second.came_back) return;
  // A watched first-time key is asked for again: had it been admitted it
  // hits now (and if it was, it does).
  it->second.came_back = true;
  Outcome(true);
}

bool AdmissionGate::Admit(uint64_t key, size_t entries, double u) {
  if (!options_.enabled) return true;
  ++stats_.offered;
  auto it = watched_.find(key);
  if (it != watched_.end() && it->second.came_back) {
    // Came back: it shows reuse. It leaves the watch list (it is no longer new).
    watched_.erase(it);
    ++stats_.admitted;
    ++stats_.returned;
    return true;
  }
  if (it == watched_.end()) {
    const uint64_t seq = next_seq_++;
    watch_order_.emplace_back(key, seq);
    watched_.emplace(key, Watched{false, seq});
    const size_t limit = std::max<size_t>(
        16, static_cast<size_t>(options_.watch_factor * static_cast<double>(entries)));
    while (watched_.size() > limit && !watch_order_.empty()) {
      const auto [old, old_seq] = watch_order_.front();
      watch_order_.pop_front();
      auto o = watched_.find(old);
      if (o == watched_.end() || o->second.seq != old_seq) continue;  // stale
      if (!o->second.came_back) Outcome(false);  // never asked for again while watched
      watched_.erase(o);
    }
    // Stale pairs would otherwise pile up behind live ones.
    while (!watch_order_.empty()) {
      auto f = watched_.find(watch_order_.front().first);
      if (f != watched_.end() && f->second.seq == watch_order_.front().second) break;
      watch_order_.pop_front();
    }
  }
  const bool admit = u < probability();
  if (admit) ++stats_.admitted;
  return admit;
}

double AdmissionGate::reuse_ratio() const {
  const uint64_t n = std::min<uint64_t>(n_outcomes_, std::max<uint32_t>(options_.window, 1));
  return n == 0 ? 1.0 : static_cast<double>(came_back_) / static_cast<double>(n);
}

double AdmissionGate::probability() const {
  if (!options_.enabled) return 1.0;
  return std::clamp(options_.gain * reuse_ratio(), options_.min_probability, 1.0);
}

void AdmissionGate::Outcome(bool came_back) {
  const uint64_t window = std::max<uint32_t>(options_.window, 1);
  const uint64_t pos = n_outcomes_ % window;
  uint64_t& word = outcomes_[pos / 64];
  const uint64_t mask = uint64_t{1} << (pos % 64);
  if (n_outcomes_ >= window && (word & mask)) --came_back_;  // the outcome leaving the window
  if (came_back) {
    word |= mask;
    ++came_back_;
  } else {
    word &= ~mask;
  }
  ++n_outcomes_;
}

}  // namespace strata::cache
