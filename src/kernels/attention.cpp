// The scalar attention kernel (the reference the SIMD ones are tested
// against) and the scratch size every kernel shares.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/internal/kernels_impl.h"

namespace strata::kernels {

size_t AttendScratchFloats(int n_q, int32_t max_pos, int64_t head_dim) {
  // Scores of every query, each row rounded up to 16 positions and then to an
  // odd multiple of 16, two transposed 16-position key tiles (the scalar
  // kernel's converted row), and room to align them to 64 bytes.
  const size_t row = (static_cast<size_t>(max_pos) + 15) / 16 * 16 + 16;
  return static_cast<size_t>(n_q) * row + 32 * static_cast<size_t>(head_dim) + 16;
}

namespace internal {
namespace {

// Dot product with 16 independent partial sums in a fixed order, which the
// compiler turns into vector code (a left-to-right sum is one long chain of
// dependent adds).
inline float Dot16(const float* a, const float* b, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int k = 0; k < 16; ++k) acc[k] += a[i + k] * b[i + k];
  }
  for (; i < n; ++i) acc[i % 16] += a[i] * b[i];
  for (int w = 8; w >= 1; w /= 2) {
    for (int k = 0; k < w; ++k) acc[k] += acc[k + w];
  }
  return acc[0];
}

// The head_dim elements of the row `off` elements from `base`, as floats:
// in place for F32, else converted into `tmp`.
inline const float* KvRow(const AttendArgs& a, const void* base, size_t off, float* tmp) {
  const uint8_t* row = static_cast<const uint8_t*>(base) + KvRowBytes(a.kv_type, off);
  switch (a.kv_type) {
    case TensorType::kF16: {
      for (int64_t i = 0; i < a.head_dim; ++i) {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, sizeof(h));
        tmp[i] = HalfToFloat(h);
      }
      return tmp;
    }
    case TensorType::kQ8_0: {
      // Blocks of 32: the F16 scale, then 32 int8 values.
      for (int64_t b = 0; b < a.head_dim / 32; ++b) {
        const uint8_t* block = row + 34 * b;
        uint16_t h;
        std::memcpy(&h, block, sizeof(h));
        const float d = HalfToFloat(h);
        for (int i = 0; i < 32; ++i) {
          tmp[32 * b + i] = d * static_cast<float>(static_cast<int8_t>(block[2 + i]));
        }
      }
      return tmp;
    }
    default:
      return reinterpret_cast<const float*>(row);
  }
}

}  // namespace

// One query at a time: scores, the max, exponentials summed in double, then
// the probability-weighted sum of the value rows in position order. Rows of
// other types than F32 are converted to floats one at a time.
void AttendScalar(const AttendArgs& a) {
  const int64_t hd = a.head_dim;
  float* scores = a.scratch;
  int32_t n_max = 0;
  for (int m = 0; m < a.n_q; ++m) n_max = a.n_pos[m] > n_max ? a.n_pos[m] : n_max;
  // Past the first score row (AttendScratchFloats leaves room for one more row).
  float* tmp = a.scratch + (static_cast<size_t>(n_max) + 15) / 16 * 16 + 16;
  for (int m = 0; m < a.n_q; ++m) {
    const int32_t n = a.n_pos[m];
    const float* q = a.q[m];
    float mx = -std::numeric_limits<float>::infinity();
    for (int32_t p = 0; p < n; ++p) {
      const float s = Dot16(q, KvRow(a, a.k_base, a.row_off[m][p], tmp), hd) * a.scale;
      scores[p] = s;
      mx = s > mx ? s : mx;
    }
    double sum = 0.0;
    for (int32_t p = 0; p < n; ++p) {
      scores[p] = std::exp(scores[p] - mx);
      sum += scores[p];
    }
    const float inv = static_cast<float>(1.0 / sum);
    float* out = a.out[m];
    for (int64_t i = 0; i < hd; ++i) out[i] = 0.0f;
    for (int32_t p = 0; p < n; ++p) {
      const float* v = KvRow(a, a.v_base, a.row_off[m][p], tmp);
      const float w = scores[p] * inv;
      for (int64_t i = 0; i < hd; ++i) out[i] += w * v[i];
    }
  }
}

}  // namespace internal
}  // namespace strata::kernels
