// Small AVX2 building blocks shared by the SIMD kernels (internal; include only under
// KVASIR_HAVE_AVX2).
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace kvasir::kernels::simd {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// hsum of four vectors at once, [hsum(v0), hsum(v1), hsum(v2), hsum(v3)], the same additions in
// the same order: lanes l + (l + 4), then (0 + 2) and (1 + 3), then those two.
inline __m128 hsum4(__m256 v0, __m256 v1, __m256 v2, __m256 v3) {
  const __m256 x01 = _mm256_add_ps(_mm256_permute2f128_ps(v0, v1, 0x20), _mm256_permute2f128_ps(v0, v1, 0x31));
  const __m256 x23 = _mm256_add_ps(_mm256_permute2f128_ps(v2, v3, 0x20), _mm256_permute2f128_ps(v2, v3, 0x31));
  // [v0: 0+2, 1+3, v2: 0+2, 1+3 | v1: ..., v3: ...]
  const __m256 s = _mm256_add_ps(_mm256_shuffle_ps(x01, x23, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm256_shuffle_ps(x01, x23, _MM_SHUFFLE(3, 2, 3, 2)));
  // [v0, v2, v0, v2 | v1, v3, v1, v3]
  const __m256 t = _mm256_add_ps(_mm256_shuffle_ps(s, s, _MM_SHUFFLE(2, 0, 2, 0)), _mm256_shuffle_ps(s, s, _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm_unpacklo_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

inline int hsum_i32(__m128i s) {
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// prefetcht0 of the line at p, as an asm GCC cannot look into. _mm_prefetch in a kernel's loop
// made GCC 12 keep a stack copy of every accumulator, stored each step (a store per FMA or two).
// A hint: it never faults, also past the end of a buffer.
inline void prefetch_line(const void* p) { asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p))); }

inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// Unsigned bytes u times signed bytes v, adjacent pairs summed to int16 (callers keep
// 2 * u * |v| < 32768), then adjacent int16 pairs times the int16 weights w16 summed to int32.
inline __m256i dot_u8_i8(__m256i u, __m256i v, __m256i w16) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, v), w16);
}

// Signed x signed byte dot in 8 int32 lanes: maddubs wants one unsigned operand, so move a's
// sign onto b. |a| <= 128 and |b| <= 127 keep each pair sum within int16.
inline __m256i dot_i8_i8(__m256i a, __m256i b) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a)),
                           _mm256_set1_epi16(1));
}

// 16 packed bytes of nibbles -> 32 bytes: low nibbles (elements 0..15) then high (16..31).
inline __m256i unpack_nibbles_32(const uint8_t* qs) {
  const __m128i q = load128(qs);
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}

// 32 bits -> 32 bytes, 0xFF where bit j is set.
inline __m256i bits_to_bytes(uint32_t bits) {
  const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(int(bits)), pick);
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

inline uint32_t load_u32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }

// int16 weights for 32-element chunk c of a super-block with 16 int8 sub-block scales `sc8`:
// scale 2c across the low 128-bit lane, scale 2c+1 across the high one.
inline __m256i chunk_scales(__m128i sc8, int c) {
  const __m128i pick = _mm_add_epi8(_mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                    _mm_set1_epi8(char(2 * c)));
  return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, pick));
}

// Codes of 2-bit plane k (0..3) of a 32-byte group: elements 32k..32k+31 of that 128.
inline __m256i two_bit_plane(__m256i q, int k) {
  return _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * k)), _mm256_set1_epi8(3));
}

// 0x00 / `value` bytes from bit `bit` of each byte of `bits`.
inline __m256i bit_as(__m256i bits, int bit, char value) {
  const __m256i m = _mm256_set1_epi8(char(1 << bit));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bits, m), m), _mm256_set1_epi8(value));
}

// The 16 Q3_K scales (offset 32 removed) from their 12 packed bytes: low nibbles in bytes
// 0..7 (two per byte), high bit pairs in bytes 8..11 (four per byte, 2 bits per j/4 group).
inline __m128i q3_k_scales(const uint8_t* packed) {
  int64_t lo;
  uint32_t hi;
  std::memcpy(&lo, packed, 8);
  std::memcpy(&hi, packed + 8, 4);
  const __m128i m4 = _mm_set1_epi8(0x0F), l = _mm_cvtsi64_si128(lo);
  const __m128i low = _mm_unpacklo_epi64(_mm_and_si128(l, m4), _mm_and_si128(_mm_srli_epi16(l, 4), m4));
  const __m128i high = _mm_and_si128(_mm_setr_epi32(int(hi), int(hi >> 2), int(hi >> 4), int(hi >> 6)), _mm_set1_epi8(3));
  return _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32));
}

// The eight 6-bit scales and mins of a Q4_K/Q5_K block, four at a time through 32-bit words
// (same unpacking as unpack_scale_min_k4).
inline void k4_scales_mins(const uint8_t* packed, uint8_t sc[8], uint8_t mn[8]) {
  uint32_t w[3];
  std::memcpy(w, packed, 12);
  const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, top2 = 0x03030303;
  const uint32_t s_lo = w[0] & low6, m_lo = w[1] & low6;
  const uint32_t s_hi = (w[2] & low4) | (((w[0] >> 6) & top2) << 4);
  const uint32_t m_hi = ((w[2] >> 4) & low4) | (((w[1] >> 6) & top2) << 4);
  std::memcpy(sc, &s_lo, 4);
  std::memcpy(sc + 4, &s_hi, 4);
  std::memcpy(mn, &m_lo, 4);
  std::memcpy(mn + 4, &m_hi, 4);
}

}  // namespace kvasir::kernels::simd
