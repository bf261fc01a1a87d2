// kernels/kernels.h — quantized dot products, matrix products and attention, per CPU ISA.
//
// Promise: for each weight type the kernels can compute (IsComputeSupported),
// `matmul` computes out[t][r] = dot(W row r, activation row t). The scalar
// table is the reference: every SIMD table is tested against it with per-type
// error bounds (tests/kernels/kernels_test.cpp), and the scalar table itself
// against a float64 reference. Within one table, the arithmetic that produces
// each output element depends only on that element's weight row and activation
// row, never on how many tokens or rows are computed together or on which
// thread: results are bitwise identical whatever the batch (batch invariance).
//
// Activations are quantized once per row into the format the weight type
// intends (ActFormatFor): F32 for float weights, Q8_0-style blocks of 32 with a
// float scale and the block's sum for Q8_0/Q4_0/Q4_1/Q5_0/Q5_1, blocks of 256 with a float scale
// and sums of 16-element groups for the k-quants Q4_K/Q5_K/Q6_K (docs/formats/gguf.md, "activation
// formats").
//
// Threading: pure functions; callers split rows across threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kernels/tensor_type.h"

namespace strata::kernels {

enum class Isa { kScalar, kAvx2, kAvx512 };
inline constexpr int kIsaCount = 3;  // Isa values are 0 .. kIsaCount − 1
std::string_view IsaName(Isa isa);

enum class ActFormat {
  kF32,  // float[n]
  kQ8,   // blocks of 32: {float d; int32 sum; int8 q[32]} (40 bytes), x ≈ d·q
  kQ8K,  // blocks of 256: {float d; int8 q[256]; int16 bsums[16]} (292 bytes), x ≈ d·q,
         // d = max|x|/127, bsums[g] = Σ q[16g .. 16g+15]
};

ActFormat ActFormatFor(TensorType weight_type);
// Elements per block of the format (1 for F32).
int64_t ActBlockSize(ActFormat fmt);
size_t ActRowBytes(ActFormat fmt, int64_t n);

struct MatMulArgs {
  TensorType w_type = TensorType::kF32;
  const uint8_t* w = nullptr;  // [n_rows][w_row_bytes], row r = output feature r
  size_t w_row_bytes = 0;
  int64_t row_begin = 0, row_end = 0;  // rows of W to compute
  const uint8_t* act = nullptr;        // [n_tokens][act_row_bytes], in ActFormatFor(w_type)
  size_t act_row_bytes = 0;
  int64_t n_tokens = 0;
  int64_t n = 0;         // row length (elements), a multiple of the block size
  float* out = nullptr;  // out[t * out_stride + r] for r in [row_begin, row_end)
  int64_t out_stride = 0;
  // `w` is in the row-interleaved layout PackRows writes (w_type IsPackable,
  // w_row_bytes then PackedRowBytes(w_type, n)); row_begin and row_end are
  // then multiples of kPackRows.
  bool packed = false;
};

// Row-interleaved ("packed") weights. PackRows stores each group of
// kPackRows consecutive rows together, block by block: a kernel then reads
// one stream for the whole group and keeps the group's outputs and scales in
// the lanes of one vector (no horizontal sums). Every table computes both
// layouts (the scalar one by unpacking); the layouts' results differ only in
// float rounding, within the type's error bound. The packable types and
// their group blocks (docs/kernels.md, "Row-interleaved weights"):
//   Q8_0 (272 bytes per 32 elements, as plain): the 8 rows' f16 scales,
//        then 8 chunks of 32 bytes, chunk c holding elements 4c..4c+3 of
//        rows 0..7 in row order;
//   Q4_K (1,184 bytes per 256 elements, plain 1,152): the 8 rows' f16 d,
//        their f16 dmin, the 6-bit sub-block scales unpacked to bytes
//        (sub-block major), the mins as byte pairs of sub-blocks (2p, 2p+1)
//        per row, then per sub-block pair p and chunk c the 8 rows' 4 code
//        bytes qs[32p + 4c ..] (low nibbles sub-block 2p, high 2p+1);
//   Q5_K (1,440 bytes per 256 elements, plain 1,408): as Q4_K, with the 8
//        rows' qh[4c ..] chunks (c < 8) between the mins and the codes;
//   Q4_0, Q4_1, Q5_0, Q5_1 (as plain): the 8 rows' f16 d, their f16 m
//        (types with a min), the 5-bit types' high bits, then 4 chunks of
//        32 bytes, chunk c holding 4 bytes of rows 0..7: byte e the codes
//        of elements 4c + e and 16 + 4c + e (4-bit: qs[4c + e] as it is;
//        5-bit: the first's 5 bits, the second's low 3 above them, its
//        top 2 at bits 2c, 2c + 1 of the high bits' byte e);
//   Q6_K (1,680 bytes per 256 elements, as plain): the 8 rows' f16 d, the
//        int8 scales as pairs (sub-blocks 2p, 2p+1) per row, then per half
//        the chunks of ql[64h + 4c ..], qh[32h + 4c ..], ql[64h + 32 + 4c ..].
inline constexpr int64_t kPackRows = 8;
bool IsPackable(TensorType t);
// Bytes per row of a packed matrix of rows of n elements (a group of
// kPackRows rows takes kPackRows times as many).
size_t PackedRowBytes(TensorType t, int64_t n);
// w: n_rows plain rows row_bytes apart (RowBytes(t, n)); n_rows a multiple of
// kPackRows; `out` receives n_rows · PackedRowBytes(t, n) bytes. UnpackRows
// is the inverse (`out`: plain rows row_bytes apart).
void PackRows(TensorType t, const uint8_t* w, size_t row_bytes, int64_t n_rows, int64_t n,
              uint8_t* out);
void UnpackRows(TensorType t, const uint8_t* packed, size_t row_bytes, int64_t n_rows, int64_t n,
                uint8_t* out);
// Row `row` (< kPackRows) of the packed group at `group` (n elements per
// row), dequantized as DequantizeRow would the plain row: a lookup into a
// packed table (a token embedding that is also the output head).
void DequantizePackedRow(TensorType t, const uint8_t* group, int64_t n, int64_t row, float* dst);

// Causal softmax attention of query vectors that share one KV head (the
// query heads of a GQA group, for one or more tokens of one or more
// sequences):
//   out[m] = Σ_{p < n_pos[m]} softmax_p(scale · q[m]·k_p) · v_p
// Key and value rows are stored as `kv_type` (IsKvType: F32, F16 or Q8_0
// blocks of 32). Query m's key row of position p starts row_off[m][p]
// elements from k_base (KvRowBytes(kv_type, row_off) bytes; for Q8_0 a
// multiple of 32, so a row is whole blocks), its value row as far from
// v_base; each row is head_dim elements (a multiple of 32 for Q8_0).
// Consecutive queries with the same row_off pointer form a run (the tokens
// of one sequence); row_off[m] must cover positions below the largest n_pos
// of m's run. Below shared_pos every query's offsets are the same (KV blocks
// the sequences share), so a kernel may read those rows once for all runs;
// shared_pos <= every n_pos. Each output depends only on its own query,
// n_pos and rows: computing a query alone or in any group gives bitwise the
// same result.
inline constexpr int kMaxAttendQueries = 64;
struct AttendArgs {
  int64_t head_dim = 0;
  int n_q = 0;                      // 1 .. kMaxAttendQueries
  const float* const* q = nullptr;  // q[m]: head_dim floats
  const int32_t* n_pos = nullptr;   // n_pos[m] >= 1
  float scale = 1.0f;
  TensorType kv_type = TensorType::kF32;
  const void* k_base = nullptr;
  const void* v_base = nullptr;
  const size_t* const* row_off = nullptr;  // row_off[m][p]: elements from the base to the row
  int32_t shared_pos = 0;                  // positions whose rows every query shares
  float* const* out = nullptr;             // out[m]: head_dim floats, apart from every input
  float* scratch = nullptr;                // AttendScratchFloats(n_q, max n_pos, head_dim) floats
};
size_t AttendScratchFloats(int n_q, int32_t max_pos, int64_t head_dim);

// The element types a KV cache can hold (AttendArgs::kv_type): F32, F16 and
// Q8_0 (GGUF's blocks of 32: an F16 scale and 32 int8 values, 34 bytes).
bool IsKvType(TensorType t);
// Bytes of `elements` KV elements of type `t` (IsKvType; for Q8_0 a multiple of 32).
constexpr size_t KvRowBytes(TensorType t, size_t elements) {
  return t == TensorType::kF16    ? elements * 2
         : t == TensorType::kQ8_0 ? elements / 32 * 34
                                  : elements * 4;
}

struct KernelTable {
  Isa isa = Isa::kScalar;
  // Quantizes n floats (n a multiple of ActBlockSize(fmt)) into `out`.
  void (*quantize_act)(ActFormat fmt, const float* x, int64_t n, void* out) = nullptr;
  void (*matmul)(const MatMulArgs& args) = nullptr;
  void (*attend)(const AttendArgs& args) = nullptr;
  // True when this table's packed kernel for `t` was measured faster than its
  // plain one (docs/benchmarks.md): the layout a loader should choose.
  bool (*prefers_packed)(TensorType t) = nullptr;
  // SwiGLU's gate, elementwise: gate[i] <- silu(gate[i]) · up[i] for i < n,
  // silu(g) = g / (1 + e^-g). Each result depends only on its two inputs,
  // wherever it lies in the range (a tail takes the same path as the rest),
  // so a batch's split of the rows never changes a bit of it.
  void (*swiglu)(float* gate, const float* up, int64_t n) = nullptr;
};

// The table for `isa`, or nullptr when this build or this CPU lacks it.
const KernelTable* GetKernels(Isa isa);
// The fastest table this CPU supports.
const KernelTable& BestKernels();

// Reference codecs (scalar, exact layouts of the GGUF types) for the types
// where HasCodec is true; other types CHECK-fail.
// DequantizeRow: n elements starting at a block boundary (n a multiple of the
// block size). QuantizeRow: the same, the other way; for Q4_0/Q5_0/Q8_0 this is
// the round-to-nearest scheme GGUF converters use (scale from the largest
// magnitude), for Q4_1/Q5_1 round to nearest over each block's [min, max];
// for Q4_K/Q5_K/Q6_K a deterministic least-squares search of each sub-block's
// scale (and min), described in docs/formats/gguf.md. QuantizeRow's input must
// be finite; k-quant magnitudes beyond what the f16 super-block scales hold
// (about 6e7 for Q4_K) saturate.
bool HasCodec(TensorType type);
void DequantizeRow(TensorType type, const void* src, int64_t n, float* dst);
void QuantizeRow(TensorType type, const float* src, int64_t n, void* dst);

// One dot product with the scalar reference: weight row (type) · activation row
// (already quantized into ActFormatFor(type)).
float ReferenceDot(TensorType type, const void* w_row, const void* act_row, int64_t n);

}  // namespace strata::kernels
