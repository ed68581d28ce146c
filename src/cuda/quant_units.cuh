// The unit of work of the quantized matrix products: a slice of one weight row that one lane
// decodes to small integers once and dots with the activation rows of its tile. Integer sums are
// exact (dp4a), and each unit's scaling is the CPU reference's formula (kernels/quant/dot_ref.cpp)
// in float, so a product differs from the CPU's only in the order its units are added.
//
// Activations come pre-quantized to the weight's vec_dot_type, laid out for aligned loads rather
// than in ggml blocks: int8 codes [rows][n_in], one float scale per 32 (Q8_0) or 256 (Q8_K)
// codes, and (Q8_K) the sum of every 16 codes. Float weights read float activations already
// rounded to the weight's precision, as the CPU converts them.
#pragma once
#include "cuda/device.cuh"

namespace kvasir::cuda {

struct ActRow {
  const int8_t* q;   // [n_in]
  const float* d;    // [n_in / 32] or [n_in / 256]
  const int* s;      // [n_in / 16] (Q8_K)
  const float* f;    // [n_in] (float weights)
};

__device__ __forceinline__ int dp4a(int a, int b, int c) { return __dp4a(a, b, c); }

// The integer dot of 32 decoded weights (8 words of 4) with 32 activation codes.
__device__ __forceinline__ int dot32(const int w[8], const int8_t* codes) {
  const int4* q = reinterpret_cast<const int4*>(codes);
  const int4 a0 = q[0], a1 = q[1];
  int s = 0;
  s = dp4a(w[0], a0.x, s); s = dp4a(w[1], a0.y, s); s = dp4a(w[2], a0.z, s); s = dp4a(w[3], a0.w, s);
  s = dp4a(w[4], a1.x, s); s = dp4a(w[5], a1.y, s); s = dp4a(w[6], a1.z, s); s = dp4a(w[7], a1.w, s);
  return s;
}

// Spreads 4 bits into bit 4 of each byte (Q5_0's fifth bits).
__device__ __forceinline__ int spread_bit4(uint32_t b4) {
  return int(((b4 & 1u) << 4) | ((b4 & 2u) << 11) | ((b4 & 4u) << 18) | ((b4 & 8u) << 25));
}

// Six-bit scale and min of sub-block j of a Q4_K/Q5_K block (kernels/quant/blocks.h).
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t* q, int& sc, int& mn) {
  if (j < 4) {
    sc = q[j] & 63;
    mn = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Each unit type: load() issues the unit's loads, so that a thread can have several units' loads
// in flight before it waits on any (matmul.cu loads its next few units first); decode(u) turns
// the raw words into int8 lanes and scales (Q8_0 and Q6_K decode as they load: see Q6_K); dot()
// is one activation row's contribution. Positions within a block are recomputed from u.

// Q4_0: a unit is one 32-element block of 18 bytes.
struct UnitQ4_0 {
  static constexpr int kElems = 32, kBlockBytes = 18;
  uint32_t raw[4];
  uint16_t raw_d;
  int w[8];
  float d;
  __device__ void load(const uint8_t* row, int u) {
    const uint8_t* b = row + size_t(u) * kBlockBytes;
    raw_d = *reinterpret_cast<const uint16_t*>(b);
#pragma unroll
    for (int k = 0; k < 4; ++k) raw[k] = ld32_a2(b + 2 + 4 * k);
  }
  __device__ void decode(int) {
    d = __half2float(__ushort_as_half(raw_d));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      w[k] = __vsubss4(int(raw[k] & 0x0F0F0F0Fu), 0x08080808);
      w[4 + k] = __vsubss4(int((raw[k] >> 4) & 0x0F0F0F0Fu), 0x08080808);
    }
  }
  __device__ float dot(const ActRow& a, int u) const { return d * a.d[u] * float(dot32(w, a.q + size_t(u) * 32)); }
};

// Q5_0: one 32-element block of 22 bytes (fifth bits in a 32-bit mask).
struct UnitQ5_0 {
  static constexpr int kElems = 32, kBlockBytes = 22;
  uint32_t raw[4], raw_h;
  uint16_t raw_d;
  int w[8];
  float d;
  __device__ void load(const uint8_t* row, int u) {
    const uint8_t* b = row + size_t(u) * kBlockBytes;
    raw_d = *reinterpret_cast<const uint16_t*>(b);
    raw_h = ld32_a2(b + 2);
#pragma unroll
    for (int k = 0; k < 4; ++k) raw[k] = ld32_a2(b + 6 + 4 * k);
  }
  __device__ void decode(int) {
    d = __half2float(__ushort_as_half(raw_d));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      w[k] = __vsubss4(int(raw[k] & 0x0F0F0F0Fu) | spread_bit4((raw_h >> (4 * k)) & 0xF), 0x10101010);
      w[4 + k] = __vsubss4(int((raw[k] >> 4) & 0x0F0F0F0Fu) | spread_bit4((raw_h >> (16 + 4 * k)) & 0xF), 0x10101010);
    }
  }
  __device__ float dot(const ActRow& a, int u) const { return d * a.d[u] * float(dot32(w, a.q + size_t(u) * 32)); }
};

// Q8_0: one 32-element block of 34 bytes.
struct UnitQ8_0 {
  static constexpr int kElems = 32, kBlockBytes = 34;
  uint16_t raw_d;
  int w[8];
  float d;
  __device__ void load(const uint8_t* row, int u) {
    const uint8_t* b = row + size_t(u) * kBlockBytes;
    raw_d = *reinterpret_cast<const uint16_t*>(b);
#pragma unroll
    for (int k = 0; k < 8; ++k) w[k] = int(ld32_a2(b + 2 + 4 * k));
  }
  __device__ void decode(int) { d = __half2float(__ushort_as_half(raw_d)); }
  __device__ float dot(const ActRow& a, int u) const { return d * a.d[u] * float(dot32(w, a.q + size_t(u) * 32)); }
};

// Q4_K / Q5_K: a unit is 32 elements of a 256-element super-block, eight units a block: 16 bytes
// of nibbles whose low halves are 16 elements of sub-block 2p and whose high halves are the same
// 16 positions of sub-block 2p + 1. Blocks of 144 and 176 bytes (multiples of 16) sit at 16-byte
// alignment, so every load here is a whole 16-byte word.
template <bool kFifthBit>
struct UnitQx_K {
  static constexpr int kElems = 32, kBlockBytes = kFifthBit ? 176 : 144;
  int4 raw_q, raw_h;
  uint32_t raw_dm, raw_s[3];
  int lo[4], hi[4];
  int sc0, sc1, m0, m1;
  float d, dmin;
  __device__ void load(const uint8_t* row, int u) {
    const int i = u >> 3, p = (u >> 1) & 3, hh = u & 1;
    const uint8_t* b = row + size_t(i) * kBlockBytes;
    const int4 head = *reinterpret_cast<const int4*>(b);  // d, dmin, the 12 scale bytes: one 16-byte load
    raw_dm = uint32_t(head.x);
    raw_s[0] = uint32_t(head.y), raw_s[1] = uint32_t(head.z), raw_s[2] = uint32_t(head.w);
    raw_q = *reinterpret_cast<const int4*>(b + (kFifthBit ? 48 : 16) + 32 * p + 16 * hh);
    if constexpr (kFifthBit) raw_h = *reinterpret_cast<const int4*>(b + 16 + 16 * hh);
  }
  __device__ void decode(int u) {
    const int p = (u >> 1) & 3;
    const __half2 dm = *reinterpret_cast<const __half2*>(&raw_dm);
    d = __low2float(dm);
    dmin = __high2float(dm);
    // Sub-blocks 2p and 2p+1 picked from the scale words by selects, not by indexing (a runtime
    // index would put the bytes in local memory).
    auto byte = [&](int k) { return int(((k < 4 ? raw_s[0] : k < 8 ? raw_s[1] : raw_s[2]) >> (8 * (k & 3))) & 0xFF); };
    auto unpack = [&](int j, int& sc, int& mn) {
      if (j < 4) {
        sc = byte(j) & 63;
        mn = byte(j + 4) & 63;
      } else {
        sc = (byte(j + 4) & 0xF) | ((byte(j - 4) >> 6) << 4);
        mn = (byte(j + 4) >> 4) | ((byte(j) >> 6) << 4);
      }
    };
    unpack(2 * p, sc0, m0);
    unpack(2 * p + 1, sc1, m1);
    const int xs[4] = {raw_q.x, raw_q.y, raw_q.z, raw_q.w};
    int hs[4] = {};
    if constexpr (kFifthBit) hs[0] = raw_h.x, hs[1] = raw_h.y, hs[2] = raw_h.z, hs[3] = raw_h.w;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      lo[k] = xs[k] & 0x0F0F0F0F;
      hi[k] = (xs[k] >> 4) & 0x0F0F0F0F;
      if constexpr (kFifthBit) {
        lo[k] |= int(((uint32_t(hs[k]) >> (2 * p)) & 0x01010101u) << 4);
        hi[k] |= int(((uint32_t(hs[k]) >> (2 * p + 1)) & 0x01010101u) << 4);
      }
    }
  }
  __device__ float dot(const ActRow& a, int u) const {
    const int i = u >> 3, p = (u >> 1) & 3, hh = u & 1;
    const int8_t* q = a.q + size_t(i) * 256 + 64 * p + 16 * hh;
    const int4 a0 = *reinterpret_cast<const int4*>(q), a1 = *reinterpret_cast<const int4*>(q + 32);
    int s0 = 0, s1 = 0;
    s0 = dp4a(lo[0], a0.x, s0); s0 = dp4a(lo[1], a0.y, s0); s0 = dp4a(lo[2], a0.z, s0); s0 = dp4a(lo[3], a0.w, s0);
    s1 = dp4a(hi[0], a1.x, s1); s1 = dp4a(hi[1], a1.y, s1); s1 = dp4a(hi[2], a1.z, s1); s1 = dp4a(hi[3], a1.w, s1);
    const int* bs = a.s + size_t(i) * 16 + 4 * p + hh;
    const int sum_q = sc0 * s0 + sc1 * s1;
    const int sum_m = m0 * bs[0] + m1 * bs[2];
    return a.d[i] * (d * float(sum_q) - dmin * float(sum_m));
  }
};
using UnitQ4_K = UnitQx_K<false>;
using UnitQ5_K = UnitQx_K<true>;

// Q6_K: a unit is 32 elements of a 210-byte super-block, eight units a block: in half h, 16 bytes
// of low nibbles (quarters c and c + 2 at 16 positions) and the 16 bytes of their high bits.
struct UnitQ6_K {
  static constexpr int kElems = 32, kBlockBytes = 210;
  int w0[4], w1[4];  // quarter c, quarter c + 2
  int sc0, sc1;
  float d;
  // Decoded as it is loaded (kept as raw words it needs more registers, and the compiler hoists
  // the loads of the units a thread has in flight either way).
  __device__ void load(const uint8_t* row, int u) {
    const int i = u >> 3, h = (u >> 2) & 1, c = (u >> 1) & 1, lh = u & 1;
    const uint8_t* b = row + size_t(i) * kBlockBytes;
    const uint8_t* ql = b + 64 * h + 32 * c + 16 * lh;
    const uint8_t* qh = b + 128 + 32 * h + 16 * lh;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t W = ld32_a2(ql + 4 * k), H = ld32_a2(qh + 4 * k);
      w0[k] = __vsubss4(int((W & 0x0F0F0F0Fu) | (((H >> (2 * c)) & 0x03030303u) << 4)), 0x20202020);
      w1[k] = __vsubss4(int(((W >> 4) & 0x0F0F0F0Fu) | (((H >> (2 * c + 4)) & 0x03030303u) << 4)), 0x20202020);
    }
    const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
    sc0 = scales[8 * h + 2 * c + lh];
    sc1 = scales[8 * h + 2 * (c + 2) + lh];
    d = ld_half(b + 208);
  }
  __device__ void decode(int) {}
  __device__ float dot(const ActRow& a, int u) const {
    const int i = u >> 3, h = (u >> 2) & 1, c = (u >> 1) & 1, lh = u & 1;
    const int8_t* q = a.q + size_t(i) * 256 + 128 * h + 32 * c + 16 * lh;
    const int4 a0 = *reinterpret_cast<const int4*>(q), a1 = *reinterpret_cast<const int4*>(q + 64);
    int s0 = 0, s1 = 0;
    s0 = dp4a(w0[0], a0.x, s0); s0 = dp4a(w0[1], a0.y, s0); s0 = dp4a(w0[2], a0.z, s0); s0 = dp4a(w0[3], a0.w, s0);
    s1 = dp4a(w1[0], a1.x, s1); s1 = dp4a(w1[1], a1.y, s1); s1 = dp4a(w1[2], a1.z, s1); s1 = dp4a(w1[3], a1.w, s1);
    return a.d[i] * d * float(sc0 * s0 + sc1 * s1);
  }
};

// Float weights (F32, F16, BF16): a unit is 4 elements against float activations.
template <DType kType>
struct UnitFloat {
  static constexpr int kElems = 4;
  float4 raw32;
  uint2 raw16;
  float w[4];
  __device__ void load(const uint8_t* row, int u) {
    if constexpr (kType == DType::F32) raw32 = reinterpret_cast<const float4*>(row)[u];
    else raw16 = reinterpret_cast<const uint2*>(row)[u];
  }
  __device__ void decode(int) {
    if constexpr (kType == DType::F32) {
      w[0] = raw32.x, w[1] = raw32.y, w[2] = raw32.z, w[3] = raw32.w;
    } else if constexpr (kType == DType::F16) {
      const __half2 a = *reinterpret_cast<const __half2*>(&raw16.x), b = *reinterpret_cast<const __half2*>(&raw16.y);
      w[0] = __low2float(a), w[1] = __high2float(a), w[2] = __low2float(b), w[3] = __high2float(b);
    } else {
      w[0] = __uint_as_float(raw16.x << 16), w[1] = __uint_as_float(raw16.x & 0xFFFF0000u);
      w[2] = __uint_as_float(raw16.y << 16), w[3] = __uint_as_float(raw16.y & 0xFFFF0000u);
    }
  }
  __device__ float dot(const ActRow& a, int u) const {
    const float4 x = reinterpret_cast<const float4*>(a.f)[u];
    return fmaf(w[3], x.w, fmaf(w[2], x.z, fmaf(w[1], x.y, w[0] * x.x)));
  }
};

// One element of a row (the embedding gather; tests), dequantized as the CPU reference does.
__device__ inline float dequant_element(DType t, const uint8_t* row, int64_t e) {
  switch (t) {
    case DType::F32: return reinterpret_cast<const float*>(row)[e];
    case DType::F16: return __half2float(reinterpret_cast<const __half*>(row)[e]);
    case DType::BF16: return __uint_as_float(uint32_t(reinterpret_cast<const uint16_t*>(row)[e]) << 16);
    case DType::Q8_0: {
      const uint8_t* b = row + (e / 32) * 34;
      return float(int8_t(b[2 + e % 32])) * ld_half(b);
    }
    case DType::Q4_0: {
      const uint8_t* b = row + (e / 32) * 18;
      const int j = int(e % 32);
      const int q = j < 16 ? (b[2 + j] & 0xF) : (b[2 + j - 16] >> 4);
      return float(q - 8) * ld_half(b);
    }
    case DType::Q5_0: {
      const uint8_t* b = row + (e / 32) * 22;
      const int j = int(e % 32);
      const uint32_t qh = ld32_a2(b + 2);
      const int q = (j < 16 ? (b[6 + j] & 0xF) : (b[6 + j - 16] >> 4)) | int(((qh >> j) & 1u) << 4);
      return float(q - 16) * ld_half(b);
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      const bool five = t == DType::Q5_K;
      const uint8_t* b = row + (e / 256) * (five ? 176 : 144);
      const int r = int(e % 256), sub = r / 32, l = r % 32;
      int sc, mn;
      scale_min_k4(sub, b + 4, sc, mn);
      int q = (b[(five ? 48 : 16) + (sub / 2) * 32 + l] >> (4 * (sub & 1))) & 0xF;
      if (five) q |= ((b[16 + l] >> sub) & 1) << 4;
      return ld_half(b) * float(sc) * float(q) - ld_half(b + 2) * float(mn);
    }
    case DType::Q6_K: {
      const uint8_t* b = row + (e / 256) * 210;
      const int r = int(e % 256), half = r / 128, rr = r % 128, quarter = rr / 32, l = rr % 32;
      const int low = (b[half * 64 + l + 32 * (quarter & 1)] >> (4 * (quarter >> 1))) & 0xF;
      const int high = (b[128 + half * 32 + l] >> (2 * quarter)) & 3;
      const int8_t sc = int8_t(b[192 + r / 16]);
      return ld_half(b + 208) * float(sc) * float((low | (high << 4)) - 32);
    }
    default: return 0.f;
  }
}

}  // namespace kvasir::cuda
