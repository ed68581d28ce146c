// Scalar reference kernels, one set per type (internal to kernels/quant; use quant_traits()).
// quantize_*_ref produce the same bytes as ggml's quantize_row_*_ref.
#pragma once
#include <cstdint>

#include "kernels/quant/blocks.h"

namespace kvasir::kernels::ref {

// Float types.
void dequantize_f32(const void* src, float* dst, int64_t n);
void quantize_f32(const float* src, void* dst, int64_t n);
void dequantize_f16(const void* src, float* dst, int64_t n);
void quantize_f16(const float* src, void* dst, int64_t n);
void dequantize_bf16(const void* src, float* dst, int64_t n);
void quantize_bf16(const float* src, void* dst, int64_t n);

// 32-element block types.
void dequantize_q4_0(const void* src, float* dst, int64_t n);
void dequantize_q4_1(const void* src, float* dst, int64_t n);
void dequantize_q5_0(const void* src, float* dst, int64_t n);
void dequantize_q5_1(const void* src, float* dst, int64_t n);
void dequantize_q8_0(const void* src, float* dst, int64_t n);
void dequantize_q8_1(const void* src, float* dst, int64_t n);
void quantize_q4_0(const float* src, void* dst, int64_t n);
void quantize_q4_1(const float* src, void* dst, int64_t n);
void quantize_q5_0(const float* src, void* dst, int64_t n);
void quantize_q5_1(const float* src, void* dst, int64_t n);
void quantize_q8_0(const float* src, void* dst, int64_t n);
void quantize_q8_1(const float* src, void* dst, int64_t n);
// With an importance matrix row `imp` (n weights): ggml's quantize_row_*_impl with quant_weights.
void quantize_q4_0_weighted(const float* src, void* dst, int64_t n, const float* imp);
void quantize_q4_1_weighted(const float* src, void* dst, int64_t n, const float* imp);
void quantize_q5_0_weighted(const float* src, void* dst, int64_t n, const float* imp);
void quantize_q5_1_weighted(const float* src, void* dst, int64_t n, const float* imp);
void quantize_q2_k_weighted(const float* src, void* dst, int64_t n, const float* imp);
void quantize_q3_k_weighted(const float* src, void* dst, int64_t n, const float* imp);
void quantize_q4_k_weighted(const float* src, void* dst, int64_t n, const float* imp);
void quantize_q5_k_weighted(const float* src, void* dst, int64_t n, const float* imp);
void quantize_q6_k_weighted(const float* src, void* dst, int64_t n, const float* imp);
// Q4_K / Q5_K's last step, shared by both quantizers: every element rounded (to 0..nmax) against
// its sub-block's decoded scale and min (L kept where a scale is 0).
void requantize_scale_min_k4(const float* x, int nmax, uint16_t d_out, uint16_t dmin_out, const uint8_t* scales,
                             uint8_t* L);
// Q5_K's packing, shared by both quantizers: the 256 codes L (0..31) into qs and qh.
void pack_q5_k(const uint8_t* L, BlockQ5_K& y);
// Q3_K's last step, shared by both quantizers: with the block's scales and d set, every element
// rounded to its sub-block's scale (L: the search's codes + 4, kept where a scale is 0), packed.
void quantize_q3_k_with_scales(const float* x, int8_t* L, BlockQ3_K& y);
// Q6_K's quantizer with its sub-block scale search weighted by imp (null: ggml's unweighted search).
void quantize_q6_k_searched(const float* src, void* dst, int64_t n, const float* imp);

// k-quants.
void dequantize_q2_k(const void* src, float* dst, int64_t n);
void dequantize_q3_k(const void* src, float* dst, int64_t n);
void dequantize_q4_k(const void* src, float* dst, int64_t n);
void dequantize_q5_k(const void* src, float* dst, int64_t n);
void dequantize_q6_k(const void* src, float* dst, int64_t n);
void dequantize_q8_k(const void* src, float* dst, int64_t n);
void quantize_q2_k(const float* src, void* dst, int64_t n);
void quantize_q3_k(const float* src, void* dst, int64_t n);
void quantize_q4_k(const float* src, void* dst, int64_t n);
void quantize_q5_k(const float* src, void* dst, int64_t n);
void quantize_q6_k(const float* src, void* dst, int64_t n);
void quantize_q8_k(const float* src, void* dst, int64_t n);

// Dot products: weight row (first type) with activation row (second type).
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

}  // namespace kvasir::kernels::ref
