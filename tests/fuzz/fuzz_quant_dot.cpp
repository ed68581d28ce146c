// Fuzzes the quantized kernels with arbitrary weight bytes: dequantize and both vec_dots must
// not crash or trip the sanitizers, the SIMD dot must agree with its scalar twin whenever the
// result is finite, and the fast activation quantizers must write the reference's bytes.
// Input: [type selector][length selector][activation seed][weight bytes...].
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/quant/quant.h"

using namespace kvasir;

namespace {

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                        DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};

void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const DType t = kTypes[data[0] % std::size(kTypes)];
  const auto* tr = kernels::quant_traits(t);
  const int64_t bs = dtype_info(t).block_size;
  const int64_t n = bs == 1 ? 1 + data[1] % 300 : (1 + data[1] % 4) * bs;
  std::vector<uint8_t> w(row_bytes(t, n), 0);
  std::memcpy(w.data(), data + 3, std::min(w.size(), size - 3));

  std::mt19937 rng(data[2]);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = g(rng);
  const DType at = tr->vec_dot_type;
  const auto* atr = kernels::quant_traits(at);
  std::vector<uint8_t> act(row_bytes(at, n)), act_ref(row_bytes(at, n));
  atr->quantize_row_fast(x.data(), act.data(), n);
  atr->quantize_row(x.data(), act_ref.data(), n);
  check(act == act_ref);

  std::vector<float> wd(static_cast<size_t>(n)), ad(static_cast<size_t>(n));
  tr->dequantize_row(w.data(), wd.data(), n);
  atr->dequantize_row(act.data(), ad.data(), n);
  double scale = 0;
  for (int64_t i = 0; i < n; ++i) scale += std::fabs(double(wd[size_t(i)]) * ad[size_t(i)]);
  const float fast = tr->vec_dot(n, w.data(), act.data());
  const float ref = tr->vec_dot_ref(n, w.data(), act.data());
  // Compare only well-scaled cases: huge fp16 scales overflow float sums differently.
  if (std::isfinite(ref) && std::isfinite(scale) && scale < 1e30) {
    // Both compute the same exact integer block dots; only float summation differs.
    check(std::isfinite(fast));
    check(std::fabs(double(fast) - ref) <= 1e-4 * (scale + std::fabs(double(ref))) + 1e-30);
  }
  return 0;
}
