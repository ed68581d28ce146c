// Reference quantize / dequantize of the 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q8_1), byte-identical to ggml's quantize_row_*_ref. Each block is quantized on its own.
#include "kernels/quant/no_contract.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/ref.h"

namespace kvasir::kernels::ref {
namespace {

// The value of largest magnitude (first one on a tie) and its magnitude.
void signed_absmax(const float* x, int n, float& max, float& amax) {
  max = 0;
  amax = 0;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
}

void min_max(const float* x, int n, float& mn, float& mx) {
  mn = FLT_MAX;
  mx = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    mn = std::min(mn, x[j]);
    mx = std::max(mx, x[j]);
  }
}

void put_u32(uint8_t* dst, uint32_t v) { std::memcpy(dst, &v, 4); }
uint32_t get_u32(const uint8_t* src) { uint32_t v; std::memcpy(&v, src, 4); return v; }

}  // namespace

// Symmetric 4-bit: the signed extreme maps to -8, so the full range [-8, 7] is used.
void quantize_q4_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < n / kQ; ++i, x += kQ) {
    float max, amax;
    signed_absmax(x, kQ, max, amax);
    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    for (int j = 0; j < kQ / 2; ++j) {
      // ggml truncates after adding 8.5 (round half up), via an int8 cast.
      const int q0 = std::min(15, int(int8_t(x[j] * id + 8.5f)));
      const int q1 = std::min(15, int(int8_t(x[j + kQ / 2] * id + 8.5f)));
      y[i].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

void quantize_q4_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_1*>(dst);
  for (int64_t i = 0; i < n / kQ; ++i, x += kQ) {
    float mn, mx;
    min_max(x, kQ, mn, mx);
    const float d = (mx - mn) / 15;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    y[i].m = f32_to_fp16(mn);
    for (int j = 0; j < kQ / 2; ++j) {
      const int q0 = std::min(15, int(int8_t((x[j] - mn) * id + 0.5f)));
      const int q1 = std::min(15, int(int8_t((x[j + kQ / 2] - mn) * id + 0.5f)));
      y[i].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

void quantize_q5_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_0*>(dst);
  for (int64_t i = 0; i < n / kQ; ++i, x += kQ) {
    float max, amax;
    signed_absmax(x, kQ, max, amax);
    const float d = max / -16;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQ / 2; ++j) {
      const int q0 = std::min(31, int(int8_t(x[j] * id + 16.5f)));
      const int q1 = std::min(31, int(int8_t(x[j + kQ / 2] * id + 16.5f)));
      y[i].qs[j] = uint8_t((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= uint32_t(q0 >> 4) << j;
      qh |= uint32_t(q1 >> 4) << (j + kQ / 2);
    }
    put_u32(y[i].qh, qh);
  }
}

void quantize_q5_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_1*>(dst);
  for (int64_t i = 0; i < n / kQ; ++i, x += kQ) {
    float mn, mx;
    min_max(x, kQ, mn, mx);
    const float d = (mx - mn) / 31;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    y[i].m = f32_to_fp16(mn);
    uint32_t qh = 0;
    for (int j = 0; j < kQ / 2; ++j) {
      // No clamp here in ggml: (x - min) * id <= 31 up to rounding, and +0.5 truncates to 31.
      const int q0 = uint8_t((x[j] - mn) * id + 0.5f);
      const int q1 = uint8_t((x[j + kQ / 2] - mn) * id + 0.5f);
      y[i].qs[j] = uint8_t((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= uint32_t((q0 & 0x10) >> 4) << j;
      qh |= uint32_t((q1 & 0x10) >> 4) << (j + kQ / 2);
    }
    put_u32(y[i].qh, qh);
  }
}

void quantize_q8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQ; ++i, x += kQ) {
    float amax = 0;
    for (int j = 0; j < kQ; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    for (int j = 0; j < kQ; ++j) y[i].qs[j] = int8_t(std::round(x[j] * id));
  }
}

void quantize_q8_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQ; ++i, x += kQ) {
    float amax = 0;
    for (int j = 0; j < kQ; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < kQ; ++j) {
      y[i].qs[j] = int8_t(std::round(x[j] * id));
      sum += y[i].qs[j];
    }
    y[i].s = f32_to_fp16(float(sum) * d);
  }
}

void dequantize_q4_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kQ; ++i, y += kQ) {
    const float d = fp16_to_f32(x[i].d);
    for (int j = 0; j < kQ / 2; ++j) {
      y[j] = float((x[i].qs[j] & 0xF) - 8) * d;
      y[j + kQ / 2] = float((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q4_1(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kQ; ++i, y += kQ) {
    const float d = fp16_to_f32(x[i].d), m = fp16_to_f32(x[i].m);
    for (int j = 0; j < kQ / 2; ++j) {
      y[j] = float(x[i].qs[j] & 0xF) * d + m;
      y[j + kQ / 2] = float(x[i].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_q5_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / kQ; ++i, y += kQ) {
    const float d = fp16_to_f32(x[i].d);
    const uint32_t qh = get_u32(x[i].qh);
    for (int j = 0; j < kQ / 2; ++j) {
      const int h0 = int((qh >> j) & 1) << 4, h1 = int((qh >> (j + 16)) & 1) << 4;
      y[j] = float(((x[i].qs[j] & 0xF) | h0) - 16) * d;
      y[j + kQ / 2] = float(((x[i].qs[j] >> 4) | h1) - 16) * d;
    }
  }
}

void dequantize_q5_1(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / kQ; ++i, y += kQ) {
    const float d = fp16_to_f32(x[i].d), m = fp16_to_f32(x[i].m);
    const uint32_t qh = get_u32(x[i].qh);
    for (int j = 0; j < kQ / 2; ++j) {
      const int h0 = int((qh >> j) & 1) << 4, h1 = int((qh >> (j + 16)) & 1) << 4;
      y[j] = float((x[i].qs[j] & 0xF) | h0) * d + m;
      y[j + kQ / 2] = float((x[i].qs[j] >> 4) | h1) * d + m;
    }
  }
}

void dequantize_q8_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQ; ++i, y += kQ) {
    const float d = fp16_to_f32(x[i].d);
    for (int j = 0; j < kQ; ++j) y[j] = float(x[i].qs[j]) * d;
  }
}

void dequantize_q8_1(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_1*>(src);
  for (int64_t i = 0; i < n / kQ; ++i, y += kQ) {
    const float d = fp16_to_f32(x[i].d);
    for (int j = 0; j < kQ; ++j) y[j] = float(x[i].qs[j]) * d;
  }
}

}  // namespace kvasir::kernels::ref
