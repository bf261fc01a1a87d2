// The traits table walked row by row: every fact a row states holds for the
// code it names. A type added to the table is checked here without editing
// this file, once tests/kernels/kernel_bounds.h states its error bounds.
#include "kernels/type_traits.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernel_bounds.h"
#include "testing/kernel_tables.h"
#include "util/random.h"

namespace strata::kernels {
namespace {

constexpr size_t kScalar = static_cast<size_t>(Isa::kScalar);

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

TEST(TypeTraits, EveryIdHasAtMostOneRowAndEveryNameParsesBack) {
  uint32_t last_id = 0;
  for (const TypeTraits& t : AllTypeTraits()) {
    const uint32_t id = static_cast<uint32_t>(t.type);
    if (&t != AllTypeTraits().data()) {
      EXPECT_GT(id, last_id) << t.name << ": rows in id order";
    }
    last_id = id;
    EXPECT_EQ(FindTypeTraits(id), &t) << t.name;
    const std::optional<TypeInfo> info = GetTypeInfo(id);
    ASSERT_TRUE(info.has_value()) << t.name;
    EXPECT_EQ(info->name, t.name);
    EXPECT_EQ(info->block_size, t.block_size) << t.name;
    EXPECT_EQ(info->block_bytes, t.block_bytes) << t.name;
    EXPECT_EQ(ParseTensorType(t.name), t.type) << t.name;
    EXPECT_EQ(ParseTensorType(Lower(t.name)), t.type) << t.name;
  }
  // Ids without a row are unknown everywhere.
  for (uint32_t id = 0; id < 256; ++id) {
    const TypeTraits* t = FindTypeTraits(id);
    EXPECT_EQ(t != nullptr, GetTypeInfo(id).has_value()) << "id " << id;
  }
}

TEST(TypeTraits, ComputableExactlyWhenTheRowHasAScalarEntry) {
  std::string names;
  for (const TypeTraits& t : AllTypeTraits()) {
    const bool has_scalar = t.matmul[kScalar] != nullptr;
    EXPECT_EQ(IsComputeSupported(t.type), has_scalar) << t.name;
    EXPECT_EQ(t.compute, has_scalar) << t.name;
    // Every computable type has a codec and an entry for every ISA (its own
    // kernel or the scalar one); the others have neither.
    EXPECT_EQ(HasCodec(t.type), has_scalar) << t.name;
    EXPECT_EQ(t.dequantize != nullptr && t.quantize != nullptr, has_scalar) << t.name;
    for (MatMulFn f : t.matmul) {
      EXPECT_EQ(f != nullptr, has_scalar) << t.name;
    }
    EXPECT_EQ(ActFormatFor(t.type), t.act) << t.name;
    if (!has_scalar) continue;
    EXPECT_EQ(t.block_size % ActBlockSize(t.act), 0) << t.name;
    if (!names.empty()) names += ", ";
    names += t.name;
  }
  EXPECT_EQ(ComputeSupportedTypeNames(), names);
}

TEST(TypeTraits, EveryCodecRoundTripsWithinItsBound) {
  util::Rng rng(3);
  const int64_t n = 1024;  // a multiple of every block size in the table
  for (const TypeTraits& t : AllTypeTraits()) {
    if (!t.compute) continue;
    ASSERT_EQ(n % t.block_size, 0) << t.name;
    std::vector<float> x(static_cast<size_t>(n)), y(x.size());
    for (auto& v : x) v = static_cast<float>(rng.Normal());
    std::vector<uint8_t> enc(RowBytes(t.type, n)), via_api(enc.size());
    ASSERT_EQ(enc.size(), static_cast<size_t>(n / t.block_size * t.block_bytes)) << t.name;
    t.quantize(x.data(), n, enc.data());
    QuantizeRow(t.type, x.data(), n, via_api.data());
    EXPECT_EQ(0, std::memcmp(enc.data(), via_api.data(), enc.size())) << t.name;
    t.dequantize(enc.data(), n, y.data());
    for (size_t i = 0; i < x.size(); ++i) {
      const double tol = testing::RoundTripTolerance(t.type, x, i);
      ASSERT_GE(tol, 0) << t.name << ": no round-trip bound in kernels/kernel_bounds.h";
      EXPECT_LE(std::fabs(static_cast<double>(x[i]) - y[i]), tol)
          << t.name << " element " << i << ": " << x[i] << " -> " << y[i];
    }
  }
}

// Each ISA's entry against the float64 reference within the type's bound
// (kernels/kernel_bounds.h), as the scalar entry is, so the two agree within
// twice it; and the ISA's kernel table reaches exactly that entry.
TEST(TypeTraits, EveryIsaEntryAgreesWithTheScalarReference) {
  util::Rng rng(77);
  const KernelTable* scalar = GetKernels(Isa::kScalar);
  for (const TypeTraits& t : AllTypeTraits()) {
    if (!t.compute) continue;
    for (int64_t n : {256, 2048}) {
      for (float scale : {1e-3f, 1.0f, 300.0f}) {
        testing::Case c = testing::MakeCase(t.type, n, rng, scale);
        std::vector<uint8_t> act(ActRowBytes(t.act, n));
        scalar->quantize_act(t.act, c.x.data(), n, act.data());
        double ref = 0;
        for (int64_t i = 0; i < n; ++i)
          ref += c.w_exact[static_cast<size_t>(i)] * c.x[static_cast<size_t>(i)];
        const double bound = testing::Bound(t.type, c, act, n);
        auto run = [&](MatMulFn f) {
          float out = 0;
          MatMulArgs a;
          a.w_type = t.type;
          a.w = c.w.data();
          a.w_row_bytes = c.w.size();
          a.row_end = 1;
          a.act = act.data();
          a.act_row_bytes = act.size();
          a.n_tokens = 1;
          a.n = n;
          a.out = &out;
          a.out_stride = 1;
          f(a);
          return out;
        };
        const float want = run(t.matmul[kScalar]);
        EXPECT_LE(std::fabs(want - ref), bound) << t.name << " scalar n=" << n;
        for (const KernelTable* k : testing::AvailableKernelTables()) {
          const float got = run(t.matmul[static_cast<size_t>(k->isa)]);
          EXPECT_LE(std::fabs(got - ref), bound) << t.name << " " << IsaName(k->isa) << " n=" << n;
          EXPECT_LE(std::fabs(got - want), 2 * bound)
              << t.name << " " << IsaName(k->isa) << " n=" << n << " scale=" << scale;
          const float via_table = run(k->matmul);
          EXPECT_EQ(0, std::memcmp(&got, &via_table, sizeof(got)))
              << t.name << " " << IsaName(k->isa) << ": the kernel table runs the row's entry";
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata::kernels
