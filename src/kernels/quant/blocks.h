// Block layouts of the quantized types, byte for byte as ggml stores them in GGUF files.
// Scales are raw IEEE half bits (uint16_t) so a block can be memcpy'd from a mapped file.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace kvasir::kernels {

inline constexpr int kQ = 32;     // elements per simple block
inline constexpr int kQK = 256;   // elements per k-quant super-block

struct BlockQ4_0 {
  uint16_t d;            // scale
  uint8_t qs[kQ / 2];    // nibbles: element j in low half of qs[j], j+16 in the high half
};
struct BlockQ4_1 {
  uint16_t d, m;         // scale, minimum
  uint8_t qs[kQ / 2];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];         // fifth bit of element j at bit j (little-endian u32)
  uint8_t qs[kQ / 2];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[kQ / 2];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQ];
};
struct BlockQ8_1 {
  uint16_t d;            // scale
  uint16_t s;            // d * sum(qs), so a Q4_1/Q5_1 dot can fold in the weight minimum
  int8_t qs[kQ];
};

// k-quants: 256 elements in sub-blocks of 16 (Q2_K, Q3_K, Q6_K) or 32 (Q4_K, Q5_K).
struct BlockQ2_K {
  uint8_t scales[kQK / 16];  // low nibble: scale, high nibble: min, per 16 elements
  uint8_t qs[kQK / 4];       // 2-bit quants
  uint16_t d, dmin;
};
struct BlockQ3_K {
  uint8_t hmask[kQK / 8];    // high (third) bit
  uint8_t qs[kQK / 4];       // low two bits
  uint8_t scales[12];        // 16 six-bit scales, packed
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];        // 8 six-bit scales and 8 six-bit mins, packed
  uint8_t qs[kQK / 2];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[kQK / 8];
  uint8_t qs[kQK / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQK / 2];       // low four bits
  uint8_t qh[kQK / 4];       // high two bits
  int8_t scales[kQK / 16];
  uint16_t d;
};
struct BlockQ8_K {
  float d;
  int8_t qs[kQK];
  int16_t bsums[kQK / 16];   // sum of each 16 quants, for the k-quant minimum terms
};

template <typename B>
constexpr bool same_size(DType t) { return sizeof(B) == dtype_info(t).block_bytes; }
static_assert(same_size<BlockQ4_0>(DType::Q4_0) && same_size<BlockQ4_1>(DType::Q4_1));
static_assert(same_size<BlockQ5_0>(DType::Q5_0) && same_size<BlockQ5_1>(DType::Q5_1));
static_assert(same_size<BlockQ8_0>(DType::Q8_0) && same_size<BlockQ8_1>(DType::Q8_1));
static_assert(same_size<BlockQ2_K>(DType::Q2_K) && same_size<BlockQ3_K>(DType::Q3_K));
static_assert(same_size<BlockQ4_K>(DType::Q4_K) && same_size<BlockQ5_K>(DType::Q5_K));
static_assert(same_size<BlockQ6_K>(DType::Q6_K) && same_size<BlockQ8_K>(DType::Q8_K));
static_assert(kQ == kvasir::kQK && kQK == kvasir::kQKK);

// Q4_K / Q5_K: six-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
inline void unpack_scale_min_k4(int j, const uint8_t* q, uint8_t& sc, uint8_t& mn) {
  if (j < 4) {
    sc = q[j] & 63;
    mn = q[j + 4] & 63;
  } else {
    sc = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    mn = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Inverse of unpack_scale_min_k4: eight 6-bit scales and mins into 12 bytes (as ggml packs them,
// a code above 63 losing its high bits).
inline void pack_scale_min_k4(const uint8_t ls[8], const uint8_t lm[8], uint8_t* s) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      s[j] = ls[j];
      s[j + 4] = lm[j];
    } else {
      s[j + 4] = uint8_t((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      s[j - 4] |= uint8_t((ls[j] >> 4) << 6);
      s[j] |= uint8_t((lm[j] >> 4) << 6);
    }
  }
}

// Q2_K / Q3_K: four 2-bit quants per byte; byte l of each 32-byte group holds elements l, l+32,
// l+64, l+96 of its 128.
inline void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQK; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = uint8_t(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

// Q3_K: the 16 six-bit scales (still offset by 32) from the 12 packed bytes.
inline void unpack_scales_q3_k(const uint8_t* packed, int8_t out[16]) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? packed[j] & 0xF : packed[j - 8] >> 4;
    const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = int8_t((low | (high << 4)) - 32);
  }
}

}  // namespace kvasir::kernels
