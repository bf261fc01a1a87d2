#include "model/internal/architecture.h"

#include <algorithm>

namespace strata::model {

// A friend of Forward: the entries name its stage functions.
std::span<const Architecture> Architectures() {
  // The llama family: pre-norm decoders (RMSNorm), rotary positions, causal
  // attention, SwiGLU feed-forward, an output head that may be tied to the
  // token embedding.
  static constexpr Forward::Stages kDecoder = {
      .plan_attention = &Forward::PlanCausalAttention,
      .embed = &Forward::EmbedTokens,
      .attention = &Forward::AttentionBlock,
      .feed_forward = &Forward::SwiGluBlock,
      .head = &Forward::OutputHead,
  };
  static constexpr OptionalTensors kDecoderOptional = {
      .qkv_bias = true, .rope_freqs = true, .output = true};
  static constexpr Architecture kTable[] = {
      // GGUF llama weights are permuted for adjacent-pair rotation.
      {.name = "llama",
       .rope_style = RopeStyle::kNormal,
       .optional = kDecoderOptional,
       .read_config = &ReadLlamaConfig,
       .load_tensors = &LoadLlamaTensors,
       .stages = kDecoder},
      // qwen2 keeps the original layout and rotates halves; its Q, K and V
      // have biases.
      {.name = "qwen2",
       .rope_style = RopeStyle::kNeox,
       .optional = kDecoderOptional,
       .read_config = &ReadLlamaConfig,
       .load_tensors = &LoadLlamaTensors,
       .stages = kDecoder},
  };
  return kTable;
}

const Architecture* FindArchitecture(std::string_view name) {
  const std::span<const Architecture> table = Architectures();
  auto it = std::find_if(table.begin(), table.end(),
                         [&](const Architecture& a) { return a.name == name; });
  return it == table.end() ? nullptr : &*it;
}

std::string SupportedArchitectureNames() {
  std::string s;
  for (const Architecture& a : Architectures()) {
    if (!s.empty()) s += ", ";
    s += a.name;
  }
  return s;
}

}  // namespace strata::model
