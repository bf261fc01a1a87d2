// model/internal/blocks.h — byte layouts of quantized blocks (private to model/).
// The authoritative description is docs/formats/gguf.md; these structs match it.
#pragma once

#include <cstdint>

namespace strata::model::internal {

inline constexpr int kQK8_0 = 32;
inline constexpr int kQK4_0 = 32;

#pragma pack(push, 1)
struct BlockQ8_0 {
  uint16_t d;       // f16 scale
  int8_t qs[kQK8_0];  // x = d * qs[i]
};
struct BlockQ4_0 {
  uint16_t d;             // f16 scale
  uint8_t qs[kQK4_0 / 2];  // x[i] = d*((qs[i]&15)-8), x[i+16] = d*((qs[i]>>4)-8), i < 16
};
// Activation block (ActFormat::kQ8): x[i] ≈ d * q[i]; sum = Σ q[i].
struct ActBlockQ8 {
  float d;
  int32_t sum;
  int8_t q[32];
};
#pragma pack(pop)

static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(ActBlockQ8) == 40);

}  // namespace strata::model::internal
