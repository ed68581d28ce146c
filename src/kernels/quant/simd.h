// SIMD kernels (internal to kernels/quant; use quant_traits()). Compiled in when the target has
// AVX2, FMA and F16C; each has a scalar twin in ref.h with the same signature, and the
// quantizers write the same bytes as their twins.
#pragma once
#include <cstdint>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define KVASIR_HAVE_AVX2 1
#else
#define KVASIR_HAVE_AVX2 0
#endif

// The float matmul tiles also come in 512-bit registers where the target has AVX-512 F + DQ
// (same operations per output; the other kernels stay AVX2).
#if KVASIR_HAVE_AVX2 && defined(__AVX512F__) && defined(__AVX512DQ__)
#define KVASIR_HAVE_AVX512_FLOAT 1
#else
#define KVASIR_HAVE_AVX512_FLOAT 0
#endif

// The integer dot steps use vpdpbusd (u8 x s8 -> int32, four products a lane, no saturation)
// where the target has AVX-512 VNNI + VL: the same exact int32 sums in fewer instructions.
#if KVASIR_HAVE_AVX2 && defined(__AVX512VNNI__) && defined(__AVX512VL__) && defined(__AVX512BW__)
#define KVASIR_HAVE_VNNI 1
#else
#define KVASIR_HAVE_VNNI 0
#endif

#if KVASIR_HAVE_AVX2
namespace kvasir::kernels::simd {

void quantize_f16(const float* src, void* dst, int64_t n);
void quantize_bf16(const float* src, void* dst, int64_t n);
void quantize_q8_0(const float* src, void* dst, int64_t n);
void quantize_q8_1(const float* src, void* dst, int64_t n);
void quantize_q8_k(const float* src, void* dst, int64_t n);

float dot_f32(int64_t n, const void* w, const void* a);
float dot_f16(int64_t n, const void* w, const void* a);
float dot_bf16(int64_t n, const void* w, const void* a);
float dot_q4_0_q8_0(int64_t n, const void* w, const void* a);
float dot_q4_1_q8_1(int64_t n, const void* w, const void* a);
float dot_q5_0_q8_0(int64_t n, const void* w, const void* a);
float dot_q5_1_q8_1(int64_t n, const void* w, const void* a);
float dot_q8_0_q8_0(int64_t n, const void* w, const void* a);
float dot_q2_k_q8_k(int64_t n, const void* w, const void* a);
float dot_q3_k_q8_k(int64_t n, const void* w, const void* a);
float dot_q4_k_q8_k(int64_t n, const void* w, const void* a);
float dot_q5_k_q8_k(int64_t n, const void* w, const void* a);
float dot_q6_k_q8_k(int64_t n, const void* w, const void* a);

}  // namespace kvasir::kernels::simd
#endif
