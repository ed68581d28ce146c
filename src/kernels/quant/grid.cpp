#include "kernels/quant/grid.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "kernels/quant/blocks.h"

namespace kvasir::kernels {
namespace {

// Where element j's bits live, per layout; get/put share them so that set(get(b)) == b.
struct Bits {
  uint8_t* byte;
  int shift, width;
  int get() const { return (*byte >> shift) & ((1 << width) - 1); }
  void put(int v) const {
    const int mask = ((1 << width) - 1) << shift;
    *byte = uint8_t((*byte & ~mask) | ((v << shift) & mask));
  }
};

// Simple blocks: element j's nibble (j < 16: low half of qs[j], else high half of qs[j - 16]).
Bits nibble(uint8_t* qs, int j) { return {qs + j % (kQ / 2), 4 * (j / (kQ / 2)), 4}; }
Bits fifth_bit(uint8_t* qh, int j) { return {qh + j / 8, j % 8, 1}; }  // bit j of the LE u32
// k-quants with 2-bit low parts (Q2_K, Q3_K): byte (e/128)*32 + e%32, bits 2*((e%128)/32).
Bits two_bit(uint8_t* qs, int e) { return {qs + (e / 128) * 32 + e % 32, 2 * ((e % 128) / 32), 2}; }
// Q4_K / Q5_K: sub-blocks of 32 pair up on one 32-byte run, low then high nibbles.
Bits k4_nibble(uint8_t* qs, int e) { return {qs + (e / 64) * 32 + e % 32, 4 * ((e / 32) & 1), 4}; }
Bits q6_low(uint8_t* ql, int e) {
  const int half = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
  return {ql + half * 64 + l + 32 * (quarter & 1), 4 * (quarter >> 1), 4};
}
Bits q6_high(uint8_t* qh, int e) {
  const int half = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
  return {qh + half * 32 + l, 2 * quarter, 2};
}

// Stored code of element j <-> its q (the signed types store q + bias).
template <typename Fn>
void for_codes(DType t, uint8_t* b, Fn&& fn) {  // fn(j, low Bits, optional high Bits, bias, low width)
  switch (t) {
    case DType::Q4_0: { auto* x = reinterpret_cast<BlockQ4_0*>(b); for (int j = 0; j < kQ; ++j) fn(j, nibble(x->qs, j), nullptr, 8); break; }
    case DType::Q4_1: { auto* x = reinterpret_cast<BlockQ4_1*>(b); for (int j = 0; j < kQ; ++j) fn(j, nibble(x->qs, j), nullptr, 0); break; }
    case DType::Q5_0: {
      auto* x = reinterpret_cast<BlockQ5_0*>(b);
      for (int j = 0; j < kQ; ++j) { Bits h = fifth_bit(x->qh, j); fn(j, nibble(x->qs, j), &h, 16); }
      break;
    }
    case DType::Q5_1: {
      auto* x = reinterpret_cast<BlockQ5_1*>(b);
      for (int j = 0; j < kQ; ++j) { Bits h = fifth_bit(x->qh, j); fn(j, nibble(x->qs, j), &h, 0); }
      break;
    }
    case DType::Q8_0: {
      auto* x = reinterpret_cast<BlockQ8_0*>(b);
      for (int j = 0; j < kQ; ++j) fn(j, Bits{reinterpret_cast<uint8_t*>(x->qs + j), 0, 8}, nullptr, 256);  // two's complement
      break;
    }
    case DType::Q2_K: { auto* x = reinterpret_cast<BlockQ2_K*>(b); for (int e = 0; e < kQK; ++e) fn(e, two_bit(x->qs, e), nullptr, 0); break; }
    case DType::Q3_K: {
      auto* x = reinterpret_cast<BlockQ3_K*>(b);
      for (int e = 0; e < kQK; ++e) { Bits h{x->hmask + e % 32, e / 32, 1}; fn(e, two_bit(x->qs, e), &h, 4); }
      break;
    }
    case DType::Q4_K: { auto* x = reinterpret_cast<BlockQ4_K*>(b); for (int e = 0; e < kQK; ++e) fn(e, k4_nibble(x->qs, e), nullptr, 0); break; }
    case DType::Q5_K: {
      auto* x = reinterpret_cast<BlockQ5_K*>(b);
      for (int e = 0; e < kQK; ++e) { Bits h{x->qh + e % 32, e / 32, 1}; fn(e, k4_nibble(x->qs, e), &h, 0); }
      break;
    }
    case DType::Q6_K: {
      auto* x = reinterpret_cast<BlockQ6_K*>(b);
      for (int e = 0; e < kQK; ++e) { Bits h = q6_high(x->qh, e); fn(e, q6_low(x->ql, e), &h, 32); }
      break;
    }
    default: break;
  }
}

}  // namespace

bool has_block_grid(DType t) {
  switch (t) {
    case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1: case DType::Q8_0:
    case DType::Q2_K: case DType::Q3_K: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: return true;
    default: return false;
  }
}

void block_grid(DType t, const void* block, BlockGrid& g) {
  auto fill = [&g](int from, int to, float scale, float offset) {
    std::fill(g.scale + from, g.scale + to, scale);
    std::fill(g.offset + from, g.offset + to, offset);
  };
  switch (t) {
    case DType::Q4_0: { auto* x = static_cast<const BlockQ4_0*>(block); g.qmin = -8, g.qmax = 7; fill(0, kQ, fp16_to_f32(x->d), 0.f); break; }
    case DType::Q4_1: { auto* x = static_cast<const BlockQ4_1*>(block); g.qmin = 0, g.qmax = 15; fill(0, kQ, fp16_to_f32(x->d), fp16_to_f32(x->m)); break; }
    case DType::Q5_0: { auto* x = static_cast<const BlockQ5_0*>(block); g.qmin = -16, g.qmax = 15; fill(0, kQ, fp16_to_f32(x->d), 0.f); break; }
    case DType::Q5_1: { auto* x = static_cast<const BlockQ5_1*>(block); g.qmin = 0, g.qmax = 31; fill(0, kQ, fp16_to_f32(x->d), fp16_to_f32(x->m)); break; }
    case DType::Q8_0: { auto* x = static_cast<const BlockQ8_0*>(block); g.qmin = -128, g.qmax = 127; fill(0, kQ, fp16_to_f32(x->d), 0.f); break; }
    case DType::Q2_K: {
      auto* x = static_cast<const BlockQ2_K*>(block);
      const float d = fp16_to_f32(x->d), dmin = fp16_to_f32(x->dmin);
      g.qmin = 0, g.qmax = 3;
      for (int s = 0; s < 16; ++s) fill(16 * s, 16 * s + 16, d * float(x->scales[s] & 0xF), -(dmin * float(x->scales[s] >> 4)));
      break;
    }
    case DType::Q3_K: {
      auto* x = static_cast<const BlockQ3_K*>(block);
      const float d = fp16_to_f32(x->d);
      int8_t sc[16];
      unpack_scales_q3_k(x->scales, sc);
      g.qmin = -4, g.qmax = 3;
      for (int s = 0; s < 16; ++s) fill(16 * s, 16 * s + 16, d * float(sc[s]), 0.f);
      break;
    }
    case DType::Q4_K: case DType::Q5_K: {
      const uint16_t* dd = static_cast<const uint16_t*>(block);  // d, dmin, scales[12] lead both layouts
      const uint8_t* scales = static_cast<const uint8_t*>(block) + 4;
      const float d = fp16_to_f32(dd[0]), dmin = fp16_to_f32(dd[1]);
      g.qmin = 0, g.qmax = t == DType::Q4_K ? 15 : 31;
      for (int s = 0; s < 8; ++s) {
        uint8_t sc, m;
        unpack_scale_min_k4(s, scales, sc, m);
        fill(32 * s, 32 * s + 32, d * float(sc), -(dmin * float(m)));
      }
      break;
    }
    case DType::Q6_K: {
      auto* x = static_cast<const BlockQ6_K*>(block);
      const float d = fp16_to_f32(x->d);
      g.qmin = -32, g.qmax = 31;
      for (int s = 0; s < 16; ++s) fill(16 * s, 16 * s + 16, d * float(x->scales[s]), 0.f);
      break;
    }
    default: g.qmin = g.qmax = 0; break;
  }
}

void block_quants(DType t, const void* block, int* q) {
  // Reading goes through the same bit map; the cast drops const only to share it.
  for_codes(t, const_cast<uint8_t*>(static_cast<const uint8_t*>(block)), [q](int j, Bits low, const Bits* high, int bias) {
    int code = low.get() | (high ? high->get() << low.width : 0);
    if (bias == 256) code = int8_t(uint8_t(code));  // Q8_0: the byte is the signed q
    else code -= bias;
    q[j] = code;
  });
}

void set_block_quants(DType t, void* block, const int* q) {
  for_codes(t, static_cast<uint8_t*>(block), [q](int j, Bits low, const Bits* high, int bias) {
    const int code = bias == 256 ? int(uint8_t(int8_t(q[j]))) : q[j] + bias;
    low.put(code);
    if (high) high->put(code >> low.width);
  });
}

}  // namespace kvasir::kernels
