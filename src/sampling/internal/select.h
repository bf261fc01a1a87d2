// sampling/internal/select.h — partial selection without sorting everything.
// Private to sampling/.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "sampling/internal/fast_exp.h"
#include "sampling/internal/vector_math.h"
#include "sampling/processors.h"

namespace strata::sampling::internal {

// Moves the m best candidates (by Before) to the front of c, sorted; the
// others follow in unspecified order (none is lost). One pass with a running
// threshold: a candidate enters the front buffer only if it beats the current
// m-th best, and the buffer is cut back to m with nth_element when it reaches
// `cap`. For inputs in random order few candidates enter after the first cut,
// and blocks of 8 whose logits are all below the threshold are skipped with
// one vectorisable test, so the cost is well under one comparison each.
inline void PartialSelectBest(std::span<Candidate> c, size_t m) {
  const size_t n = c.size();
  if (m == 0) return;
  const auto before = [](const Candidate& a, const Candidate& b) { return Before(a, b); };
  if (m >= n) {
    std::sort(c.begin(), c.end(), before);
    return;
  }
  const size_t cap = std::max<size_t>(2 * m, m + 512);
  if (cap >= n) {
    std::partial_sort(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(m), c.end(), before);
    return;
  }
  // The first `cap` candidates fill the buffer; cut it to the best m.
  std::nth_element(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(m - 1),
                   c.begin() + static_cast<std::ptrdiff_t>(cap), before);
  Candidate threshold = c[m - 1];
  size_t w = m;
  size_t i = cap;
  while (i < n) {
    if (i + 8 <= n) {
      bool any = false;
      for (size_t j = 0; j < 8; ++j) any |= c[i + j].logit >= threshold.logit;
      if (!any) {
        i += 8;
        continue;
      }
    }
    const size_t end = std::min(n, i + 8);
    for (; i < end; ++i) {
      if (!Before(c[i], threshold)) continue;
      std::swap(c[w], c[i]);
      if (++w == cap) {
        std::nth_element(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(m - 1),
                         c.begin() + static_cast<std::ptrdiff_t>(w), before);
        threshold = c[m - 1];
        w = m;
      }
    }
  }
  std::partial_sort(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(m),
                    c.begin() + static_cast<std::ptrdiff_t>(w), before);
}

// Keeps, at the front of c, the smallest set of candidates taken in
// ascending order of key(x) (a finite float >= 0; ties by Before) whose weights
// w = FastExp(logit - mx) sum to at least `target`, and returns its size
// (c.size() when the total falls short). The front is in no particular order.
//
// Histogram selection instead of sorting: bin the keys in [0, key_hi) (1024
// bins; larger keys share an overflow bin), find the bin where the
// cumulative weight crosses the target, move the bins before it to the front
// (kept, in their input order) and repeat inside the crossing bin until few
// candidates remain, which are sorted. Two passes over c for smooth key
// distributions. The move is a branch-free compaction (every candidate is
// written, the write position advances only for kept ones): with a nucleus of
// tens of thousands of tokens, whether a token is kept is a coin flip to the
// branch predictor, and a partition that branches on it mispredicts about
// every other token. The few candidates of the crossing bin go to a side
// buffer on a rarely taken branch.
template <class Key>
size_t KeepByKeyUntilMass(std::span<Candidate> c, Key key, float mx, double target, float key_hi) {
  constexpr size_t kBins = 1024;
  constexpr size_t kSortBelow = 512;
  constexpr size_t kBlock = 256;
  auto weight = [mx](const Candidate& x) { return FastExp(Gap(x.logit, mx)); };
  size_t kept = 0;
  std::span<Candidate> region = c;
  double need = target;
  float lo = 0, hi = key_hi;
  bool overflow = true;  // keys >= hi go to bin kBins (first round only)
  std::array<double, kBins + 1> mass;
  float w[kBlock];
  int32_t bins[kBlock];
  std::vector<Candidate> crossing;  // the crossing bin's candidates, each round
  while (true) {
    if (region.size() <= kSortBelow || !(hi > lo)) {
      std::sort(region.begin(), region.end(), [&](const Candidate& a, const Candidate& b) {
        const float ka = key(a), kb = key(b);
        return ka < kb || (ka == kb && Before(a, b));
      });
      double cum = 0;
      for (size_t i = 0; i < region.size(); ++i) {
        cum += weight(region[i]);
        if (cum >= need) return kept + i + 1;
      }
      return kept + region.size();
    }
    const float scale = static_cast<float>(kBins) / (hi - lo);
    const float top = overflow ? static_cast<float>(kBins) : static_cast<float>(kBins - 1);
    // Float arithmetic and value selects (vectorisable), the same expression
    // for the histogram and the partition so that they agree.
    auto bin = [&](const Candidate& x) -> int32_t {
      const float k = key(x);
      float b = (k - lo) * scale;
      b = b < 0.0f ? 0.0f : b;
      b = b > static_cast<float>(kBins - 1) ? static_cast<float>(kBins - 1) : b;
      b = k >= hi ? top : b;
      return static_cast<int32_t>(b);
    };
    mass.fill(0);
    for (size_t i = 0; i < region.size(); i += kBlock) {
      const auto block = region.subspan(i, std::min(kBlock, region.size() - i));
      ExpWeights(block, mx, w);
      for (size_t j = 0; j < block.size(); ++j) bins[j] = bin(block[j]);
      for (size_t j = 0; j < block.size(); ++j) mass[static_cast<size_t>(bins[j])] += w[j];
    }
    double cum = 0;
    size_t cross = kBins + 1;
    for (size_t b = 0; b <= kBins; ++b) {
      if (cum + mass[b] >= need) {
        cross = b;
        break;
      }
      cum += mass[b];
    }
    if (cross > kBins) return kept + region.size();  // rounding: the target is the total
    // [before the crossing bin | in it], the rest dropped: candidates before
    // it are compacted to the front in order (each write lands at or behind
    // the one being read, so nothing unread is overwritten), those in it are
    // set aside and appended.
    const int32_t cross_bin = static_cast<int32_t>(cross);
    crossing.clear();
    size_t lt = 0;
    for (size_t i = 0; i < region.size(); i += kBlock) {
      const size_t len = std::min(kBlock, region.size() - i);
      for (size_t j = 0; j < len; ++j) bins[j] = bin(region[i + j]);
      for (size_t j = 0; j < len; ++j) {
        const Candidate x = region[i + j];
        region[lt] = x;
        lt += static_cast<size_t>(bins[j] < cross_bin);
        if (bins[j] == cross_bin) [[unlikely]]
          crossing.push_back(x);
      }
    }
    std::copy(crossing.begin(), crossing.end(), region.begin() + static_cast<std::ptrdiff_t>(lt));
    kept += lt;
    need -= cum;
    region = region.subspan(lt, crossing.size());
    // The crossing bin's actual key range, for the next round.
    lo = hi = key(region[0]);
    for (const Candidate& x : region) {
      const float k = key(x);
      lo = k < lo ? k : lo;
      hi = k > hi ? k : hi;
    }
    overflow = false;
  }
}

}  // namespace strata::sampling::internal
