// Paged attention over Q8_0 K/V in integers (internal to kernels/attention.cpp): the queries as
// 15-bit codes against the key codes in place, and each step's attention weights as 8-bit codes
// against the value codes, laid out once per step. Every function has its scalar twin inside
// (builds without AVX2), bitwise equal: the int32 sums are exact and the float operations the same.
#pragma once
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/attention_paging.h"
#include "kernels/quant/blocks.h"

namespace kvasir::kernels::q8 {

// Queries as integers for exact integer scores against Q8_0 keys, per 32 dims: codes
// C = round(x * 127 * 128 / absmax) (15 bits: 8-bit queries alone cost Gemma 3 270M 0.0005 of
// mean KLD, five times what rounding the attention weights costs), held as int16 that 16-bit
// pair products (vpmaddwd, vpdpwssd) take against the key codes widened to 16 bits. A head's
// codes are at qs and its per-block scales (absmax / (127 * 128)) at d; head(h) is the h-th head
// after it.
struct QueriesQ8 {
  const int16_t* qs = nullptr;
  const float* d = nullptr;
  int64_t hd = 0;
  QueriesQ8 head(int64_t h) const { return {qs + h * hd, d + h * (hd / kQ), hd}; }
  int32_t code(int64_t i) const { return qs[i]; }
};
void quantize_query(const float* x, int64_t hd, int16_t* qs, float* d);

// s[t] = scale * q.k[t] against Q8_0 key rows of hd / 32 blocks: per block the exact int32 dot of
// the codes, then in float sv = fma(float(dot), dq * dk, sv) block by block (a product for the
// first), times scale. The scalar twin of scores_q8_heads' lanes, bitwise.
void scores_q8(const QueriesQ8& q, const BlockQ8_0* k, int64_t n, float scale, float* s);

// scores_q8 for H query heads (H in 1, 2, 4, 8; AVX2 builds only: heads h of q.head(h)) and
// t < n into s[h * ss + t]: each key's codes are loaded once for all H heads, 8 / H keys a pass,
// lane h * K + j = (head h, key t + j). The int32 dots are exact (16-bit pair products of the
// query codes and the key codes widened), so every lane is scores_q8 bitwise. dk: the keys'
// scales as floats, key t's of block b at dk[b * dk_stride + t] (readable up to 7 keys past n).
template <int H>
void scores_q8_heads(const QueriesQ8& q, const BlockQ8_0* k, const float* dk, int64_t dk_stride, int64_t n, float scale,
                     float* s, int64_t ss, Prefetch& pf);

// A step's Q8_0 values laid out for integer products with 8-bit attention weights: the codes of
// its keys t = 0..n4-1 from the step's start (n4 a multiple of 4; keys the step does not use are
// zero) as vt[b][quad][32 dims][4 keys] (block b of 32 dims, keys 4 * quad.. 4 * quad + 3: what
// vpdpbusd sums into one int32 lane), and their scales dv[b * n4 + t]; and the step's key scales
// as floats (the score lanes broadcast them).
struct StepV8 {
  int8_t* vt;
  float* dv;
  int64_t n4;
  float* dk;  // the step's key scales, dk[b * (n4 + 8) + t] (zero where unused; 8 spare for the score lanes)
  int64_t dk_stride() const { return n4 + 8; }
};

// Where dim d of a block sits among the 32 int32 lanes that the layout sums into (four vectors of
// eight): vector d % 16 / 4, lane 4 * (d / 16) + d % 4 (what two rounds of unpacks give).
constexpr int64_t v8_lane(int64_t d) { return (d % 16 / 4) * 8 + (d / 16) * 4 + d % 4; }

inline int8_t* step_v8_at(const StepV8& v, int64_t b, int64_t quad) { return v.vt + (b * (v.n4 / 4) + quad) * 4 * kQ; }

// The step's keys [first, end] (positions; the step starts at `start`) of KV head g into v, keys
// of their quads outside that range zeroed (never read: they may sit in freed blocks).
void prepare_step_v8(const KvLayerView& kv, const int32_t* block_table, int64_t g, int64_t start, int64_t first,
                     int64_t end, const StepV8& v);

// acc_h += the weighted values of the step's keys [off, off + n) for H heads (acc_h = acc + h *
// hd, weights w_h = w + h * ws, relative to off), from V laid out by prepare_step_v8; wq: room for
// n4 bytes.
void values_q8(float* acc, const StepV8& v, const float* w, int64_t ws, int64_t off, int64_t n, int64_t hd, int64_t H,
               uint8_t* wq);

}  // namespace kvasir::kernels::q8
