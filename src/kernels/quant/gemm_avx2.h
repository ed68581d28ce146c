// Building blocks of the AVX2 matmul tiles (internal; include only under KVASIR_HAVE_AVX2).
// In the quantized tiles a float lane is an output column: lane c of a panel accumulates
// column c's blocks in order, as the contract in gemm.h prescribes.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/quant/avx2_util.h"
#include "kernels/quant/gemm.h"

namespace kvasir::kernels::simd {

// Lane c = sum of the 8 int32 lanes of v[c] (exact): a transpose-and-add in 21 shuffles/adds.
inline __m256i reduce8(const __m256i v[8]) {
  auto pair = [](__m256i a, __m256i b) {
    return _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
  };
  auto quad = [](__m256i a, __m256i b) {
    return _mm256_add_epi32(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b));
  };
  const __m256i q0 = quad(pair(v[0], v[1]), pair(v[2], v[3]));  // halves: columns 0..3
  const __m256i q1 = quad(pair(v[4], v[5]), pair(v[6], v[7]));  // halves: columns 4..7
  return _mm256_add_epi32(_mm256_permute2x128_si256(q0, q1, 0x20), _mm256_permute2x128_si256(q0, q1, 0x31));
}

// The fp16 at byte `offset` of 8 blocks (one per column), widened: exact, like fp16_to_f32.
inline __m256 gather_half(const uint8_t* const p[8], size_t offset) {
  uint16_t h[8];
  for (int c = 0; c < 8; ++c) std::memcpy(&h[c], p[c] + offset, 2);
  return _mm256_cvtph_ps(load128(h));
}

// Stores the first n lanes of v at y.
inline void store_lanes(float* y, __m256 v, int n) {
  if (n == 8) {
    _mm256_storeu_ps(y, v);
  } else {
    alignas(32) float tmp[8];
    _mm256_store_ps(tmp, v);
    for (int c = 0; c < n; ++c) y[c] = tmp[c];
  }
}

// Sum of the 32 signed bytes of an activation block (exact).
inline int sum_i8_32(const int8_t* q) {
  // Bias to unsigned, sum with SAD against zero, remove the bias: 32 * 128.
  const __m256i u = _mm256_xor_si256(load256(q), _mm256_set1_epi8(char(0x80)));
  const __m256i s = _mm256_sad_epu8(u, _mm256_setzero_si256());
  const __m128i t = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  return int(_mm_cvtsi128_si64(t) + _mm_extract_epi64(t, 1)) - 32 * 128;
}

// ---- Code unpacking shared by the direct and packed kernels.

// int32x8 with its low 128 bits = v, high = 0.
inline __m256i widen128(__m128i v) { return _mm256_inserti128_si256(_mm256_setzero_si256(), v, 0); }

inline __m256i unpack_nibbles(const uint8_t* qs) {
  // Both halves get the 16 bytes; the high half is shifted to its high nibbles.
  const __m256i q = _mm256_broadcastsi128_si256(load128(qs));
  return _mm256_and_si256(_mm256_srlv_epi32(q, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(0x0F));
}

inline __m256i fifth_bits(const uint8_t* qh) { return _mm256_and_si256(bits_to_bytes(load_u32(qh)), _mm256_set1_epi8(0x10)); }


// Tiles of the float types and the quantized types; each handles any n_cols / n_rows.
void gemm_float(const GemmTile& t, void* scratch);
void gemm_bf16(const GemmTile& t);  // BF16's own order (gemm.h); gemm_float calls it
void gemm_direct(const GemmTile& t);
// Weights repacked once for decode (PackedMatrix); prepacked_panel_bytes is 0 for types
// without a packed form. prepack_panel packs n_rows (<= 8; repeats pad) rows of w.
size_t prepacked_panel_bytes(DType wtype, int64_t n_in);
void prepack_panel(DType wtype, const uint8_t* w, size_t w_stride, int64_t n_rows, int64_t n_in, uint8_t* dst);
size_t prepacked_scratch_bytes(DType wtype, int64_t n_in, int64_t n_rows);
void gemm_prepacked(DType wtype, const uint8_t* panels, size_t panel_bytes, int64_t n_in, int64_t out_begin,
                    int64_t out_end, const uint8_t* act, size_t a_stride, int64_t n_rows, float* y, int64_t y_stride,
                    void* scratch);
// The k-quant half of the above (Q4_K, Q6_K; gemm_avx2_prepacked_k.cpp).
size_t prepacked_k_panel_bytes(DType wtype, int64_t n_in);
void prepack_k_panel(DType wtype, const uint8_t* w, size_t w_stride, int64_t n_rows, int64_t n_in, uint8_t* dst);
void gemm_prepacked_k(DType wtype, const uint8_t* panels, size_t panel_bytes, int64_t n_in, int64_t out_begin,
                      int64_t out_end, const uint8_t* act, size_t a_stride, int64_t n_rows, float* y,
                      int64_t y_stride);
// The float half (F32, F16, BF16; gemm_avx2_prepacked_float.cpp): a packed form where n_in % 8
// == 0 (BF16: % 32 == 0); panel bytes 0 otherwise.
size_t prepacked_float_panel_bytes(DType wtype, int64_t n_in);
void prepack_float_panel(DType wtype, const uint8_t* w, size_t w_stride, int64_t n_rows, int64_t n_in, uint8_t* dst);
size_t prepacked_float_scratch_bytes(DType wtype, int64_t n_in, int64_t n_rows);
void gemm_prepacked_float(DType wtype, const uint8_t* panels, size_t panel_bytes, int64_t n_in, int64_t out_begin,
                          int64_t out_end, const uint8_t* act, size_t a_stride, int64_t n_rows, float* y,
                          int64_t y_stride, void* scratch);
// Packed panels for the heavy types of prefill; false when the type has no packed kernel.
bool gemm_packed(const GemmTile& t, void* scratch);
size_t gemm_packed_scratch_bytes(DType wtype, int64_t n, int64_t n_rows);

}  // namespace kvasir::kernels::simd
