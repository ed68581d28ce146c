// Paged attention over Q8_0 K/V in integers (internal to kernels/attention.cpp): the queries as
// 15-bit codes against the key codes in place, and each step's attention weights as 8-bit codes
// against the value codes in place. A Q8_0 KV page is laid out for that (kv_store writes it, and
// nothing else reads it): lanes run over keys, so neither side reduces across a vector. Every
// function has its scalar twin inside (builds without AVX2), bitwise equal: the int32 sums are
// exact and the float operations the same.
#pragma once
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/attention_paging.h"
#include "kernels/quant/blocks.h"

namespace kvasir::kernels::q8 {

// One KV head's K (or V) in a page of bs keys (bs a multiple of kPageKeys) takes the bytes of bs
// Q8_0 rows of hd / 32 blocks, arranged per block b of 32 dims as a tile at b * bs * 34: the keys'
// fp16 scales [bs], then their codes:
//   K: [16 dim pairs][bs keys][2 dims]: eight keys' codes of a pair are 16 bytes, which widen
//      into the eight int32 lanes of vpmaddwd / vpdpwssd against the query pair broadcast;
//   V: [bs / 4 key quads][32 dims in v8_lane order][4 keys]: vpdpbusd sums a quad's four
//      products into the lane of each dim.
inline constexpr int64_t kPageKeys = 8;
constexpr int64_t v8_lane(int64_t d) { return (d % 16 / 4) * 8 + (d / 16) * 4 + d % 4; }
inline constexpr int64_t kTileBytesPerKey = int64_t(sizeof(BlockQ8_0));
inline const uint16_t* tile_scales(const uint8_t* run, int64_t bs, int64_t b) {
  return reinterpret_cast<const uint16_t*>(run + b * bs * kTileBytesPerKey);
}
inline const int8_t* tile_codes(const uint8_t* run, int64_t bs, int64_t b) {
  return reinterpret_cast<const int8_t*>(run + b * bs * kTileBytesPerKey + 2 * bs);
}
// Where code d (of 32) of key t sits among a tile's codes.
constexpr int64_t k_code_at(int64_t bs, int64_t t, int64_t d) { return d / 2 * bs * 2 + t * 2 + d % 2; }
constexpr int64_t v_code_at(int64_t t, int64_t d) { return t / 4 * 4 * kQ + v8_lane(d) * 4 + t % 4; }

// Key (or value, when `value`) t of a page's head run from / to its Q8_0 row of hd / 32 blocks.
void store_row(const BlockQ8_0* row, uint8_t* run, int64_t bs, int64_t t, int64_t hd, bool value);
void load_row(const uint8_t* run, int64_t bs, int64_t t, int64_t hd, bool value, BlockQ8_0* row);

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
};
void quantize_query(const float* x, int64_t hd, int16_t* qs, float* d);

// s[i] = scale * q.k[t0 + i] for i < n, keys of a page's K run k (bs keys): per block the exact
// int32 dot of the codes, then in float sv = fma(float(dot), dq * dk, sv) block by block (a
// product for the first), times scale. The scalar twin of scores_q8_heads' lanes, bitwise.
void scores_q8(const QueriesQ8& q, const uint8_t* k, int64_t bs, int64_t t0, int64_t n, float scale, float* s);

// scores_q8 for H query heads (H in 1, 2, 4, 8; AVX2 builds only: heads h of q.head(h)) into
// s[h * ss + i], eight keys a pass in the lanes: each pair of key codes is widened once for all H
// heads. Writes up to 7 floats past s[h * ss + n - 1].
template <int H>
void scores_q8_heads(const QueriesQ8& q, const uint8_t* k, int64_t bs, int64_t t0, int64_t n, float scale, float* s,
                     int64_t ss, Prefetch& pf);

// A step's Q8_0 values, read in place: the V runs of the step's pages (those that hold its keys
// [first, end]; the step starts a page), and the keys' scales as floats, dv[b * n4 + t] for key t
// from the step's start (zero outside [first, end]), converted when values_q8 first needs them:
// after the step's scores, whose prefetches have fetched the step's V by then.
inline constexpr int kMaxStepPages = 8;  // a step is 64 keys of pages of 8 or more, or one page
struct StepV8 {
  const uint8_t* pages[kMaxStepPages];
  int64_t bs;
  float* dv;
  int64_t n4;          // keys of the step (a multiple of 4)
  int64_t first, end;  // its keys from its start
  bool dv_ready;
};
void begin_step_v8(const KvLayerView& kv, const int32_t* block_table, int64_t g, int64_t start, int64_t first,
                   int64_t end, StepV8& v);

// acc_h += the weighted values of the step's keys [off, off + n) for H heads (acc_h = acc + h *
// hd, weights w_h = w + h * ws, relative to off): per head and block the weights times V's
// scales rounded to 8 bits against their largest, then integer products with V's codes; wq:
// room for n4 bytes.
void values_q8(float* acc, StepV8& v, const float* w, int64_t ws, int64_t off, int64_t n, int64_t hd, int64_t H,
               uint8_t* wq);

}  // namespace kvasir::kernels::q8
