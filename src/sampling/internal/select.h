// sampling/internal/select.h — partial selection without sorting everything.
// Private to sampling/.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <utility>

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
// (kept) and repeat inside the crossing bin until few candidates remain,
// which are sorted. Two passes over c for smooth key distributions.
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
    // [before the crossing bin | in it | after]. std::partition swaps only
    // misplaced pairs, so the usual case (a small front, a huge tail) costs
    // one bin computation per candidate and few moves.
    auto in_or_before = std::partition(region.begin(), region.end(), [&](const Candidate& x) {
      return static_cast<size_t>(bin(x)) <= cross;
    });
    auto before = std::partition(region.begin(), in_or_before, [&](const Candidate& x) {
      return static_cast<size_t>(bin(x)) < cross;
    });
    const size_t lt = static_cast<size_t>(before - region.begin());
    const size_t gt = static_cast<size_t>(in_or_before - region.begin());
    kept += lt;
    need -= cum;
    region = region.subspan(lt, gt - lt);
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
