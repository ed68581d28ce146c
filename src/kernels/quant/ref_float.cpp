// F32, F16 and BF16 rows: conversions and reference dot products.
#include "kernels/quant/no_contract.h"

#include <cstring>

#include "core/fp16.h"
#include "kernels/quant/ref.h"

namespace kvasir::kernels::ref {

void dequantize_f32(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, size_t(n) * 4); }
void quantize_f32(const float* src, void* dst, int64_t n) { std::memcpy(dst, src, size_t(n) * 4); }

void dequantize_f16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(h[i]);
}
void quantize_f16(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = f32_to_fp16(src[i]);
}

void dequantize_bf16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
}
void quantize_bf16(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
}

// Float dots accumulate in double, as ggml's scalar path does (ggml_float), so the reference is
// more accurate than any SIMD version it is compared against.
float dot_f32(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(x[i]) * double(y[i]);
  return float(s);
}

float dot_f16(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(fp16_to_f32(x[i])) * double(fp16_to_f32(y[i]));
  return float(s);
}

float dot_bf16(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(bf16_to_f32(x[i])) * double(bf16_to_f32(y[i]));
  return float(s);
}

}  // namespace kvasir::kernels::ref
