// Paged attention, FlashAttention-style: for each query row, walk the sequence's KV blocks
// through its block table keeping a running max and sum per head (online softmax); the score
// matrix is never materialized. GQA-aware and tiled: each KV block is converted to f32 once and
// serves every query head of its group and every row of a tile (consecutive positions of one
// sequence, e.g. a prefill chunk). A row's result never depends on the tile it is in.
// Q8_0 K/V is integer arithmetic instead of widening, on pages laid out for it (lanes over keys,
// attention_q8.h): queries as 15-bit codes per 32 dims against the key codes in place (exact
// int32 dots, vpdpwssd where VNNI is compiled in), and each 64-key step's attention weights, times
// V's scales, rounded to 8 bits against the step's largest and multiplied with V's codes in place.
// The roundings are the kernel's numerics: the tests' twin rounds alike.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace kvasir::kernels {

// One layer's K and V, F16, F32, Q8_0 or Q4_0 (rows of head_dim, whole blocks; a Q8_0 block's rows
// interleaved by key, kv_load reads one back), head-major inside a block: head g's rows of block b start at
// element (b * n_kv_heads + g) * head_stride of k (keys) and of v (values), block_size rows of
// head_dim each. head_stride = block_size * head_dim for separate K and V pools
// ([num_blocks][n_kv_heads][block_size][head_dim] each); KvCache interleaves them instead
// ([num_blocks][n_kv_heads][K rows, V rows], v = k + block_size * head_dim, head_stride twice
// that), so what one head reads of a block is one contiguous run.
struct KvLayerView {
  void* k = nullptr;
  void* v = nullptr;
  DType type = DType::F16;
  int64_t block_size = 16;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t head_stride = 0;  // elements; 0 = block_size * head_dim (separate pools)
  // K rows are stored Hadamard-rotated (spreading outlier channels before 4-bit rounding); the
  // queries are rotated alike, so scores are unchanged up to rounding. Needs a power-of-two
  // head_dim of at most kMaxHeadDim.
  bool rotate_k = false;
  // KV calibration (model/kv_transform.h): an exact change of basis per KV head that quantized
  // storage rounds better. Keys are stored as (k - k_shift) / k_scale and queries multiplied by
  // k_scale: every score of a query moves by the same q·k_shift, which softmax ignores (so
  // k_shift needs softcap 0). Values are stored as (v - v_shift) / v_scale, Hadamard-rotated when
  // rotate_v, and every output row is turned back. Each [n_kv_heads][head_dim]; null: none.
  const float* k_shift = nullptr;
  const float* k_scale = nullptr;
  const float* v_shift = nullptr;
  const float* v_scale = nullptr;
  bool rotate_v = false;
};

inline constexpr int64_t kMaxHeadDim = 512;

// Stores one token's K and V (each n_kv_heads * head_dim floats) at logical position pos.
// Q8_0 needs a block_size that is a multiple of 8 (its pages interleave keys: attention_q8.h).
void kv_store(const KvLayerView& kv, const int32_t* block_table, int64_t pos, const float* k, const float* v);

// KV head g's K and V rows of position pos as kv_store left them (in the stored basis), each in
// its type's row encoding (row_bytes(type, head_dim) bytes, e.g. Q8_0 blocks): for tests and tools
// that look inside the cache without knowing how a page is arranged.
void kv_load(const KvLayerView& kv, const int32_t* block_table, int64_t pos, int64_t g, uint8_t* k_row, uint8_t* v_row);

// Most rows attention_rows() takes at once (the scratch is sized for it).
inline constexpr int64_t kAttentionTileRows = 16;

// Keys are taken in spans of kAttentionSpan positions (span j: positions [j * S, (j + 1) * S)):
// each span is an online softmax of its own, and a row's spans are merged in order. Fixing the
// arithmetic by absolute span, not by who computes it, lets threads share one long sequence's
// keys (attention_span + attention_merge) while every row keeps one result: attention_rows
// computes exactly the same bits alone.
inline constexpr int64_t kAttentionSpan = 1024;

// Spans [first, last] that rows at positions [pos0, pos0 + n_rows) reach with a window.
struct SpanRange {
  int64_t first = 0, last = 0;
  int64_t count() const { return last - first + 1; }
};
SpanRange attention_spans(int64_t pos0, int64_t n_rows, int64_t window);

struct AttentionParams {
  int64_t n_heads = 0;   // query heads; a multiple of n_kv_heads
  int64_t window = 0;    // sliding window: keys in [pos - window + 1, pos]; 0 = unlimited
  float scale = 1.f;     // applied to q·k
  float softcap = 0.f;   // 0 = none, else scores = softcap * tanh(scores / softcap)
};

// Floats of scratch attention() / attention_rows() need (per thread).
int64_t attention_scratch_floats(const KvLayerView& kv, const AttentionParams& p);

// q: [n_heads][head_dim] at position pos; attends causally to positions [lo, pos] of the
// sequence whose blocks are listed in block_table. out: [n_heads][head_dim].
void attention(const float* q, const KvLayerView& kv, const int32_t* block_table, int64_t pos,
               const AttentionParams& p, float* out, float* scratch);

// A tile: rows m = 0..n_rows-1 (n_rows <= kAttentionTileRows) of one sequence at positions
// pos0 + m, q row m at q + m * row_stride, out row m at out + m * row_stride, only the query
// heads of KV heads [kv_begin, kv_end) (threads may split the KV heads). Each output is
// bitwise what attention() computes for that row alone.
void attention_rows(const float* q, int64_t n_rows, int64_t row_stride, const KvLayerView& kv,
                    const int32_t* block_table, int64_t pos0, const AttentionParams& p, int64_t kv_begin,
                    int64_t kv_end, float* out, float* scratch);

// One span's partial result for the rows of a tile: per (row m, query head h) the unnormalized
// output at acc + (m * n_heads + h) * head_dim and the running max and sum at
// state + 2 * (m * n_heads + h). Only the heads of KV heads [kv_begin, kv_end) are written.
int64_t attention_partial_floats(int64_t n_rows, int64_t n_heads, int64_t head_dim);
struct AttentionPartial {
  float* acc = nullptr;    // [n_rows][n_heads][head_dim]
  float* state = nullptr;  // [n_rows][n_heads][max, sum]
};
inline AttentionPartial attention_partial_at(float* base, int64_t n_rows, int64_t n_heads, int64_t head_dim) {
  return {base, base + n_rows * n_heads * head_dim};
}

// attention_rows' arguments, but only the keys of span `span`, left unnormalized in `part`.
void attention_span(const float* q, int64_t n_rows, int64_t row_stride, const KvLayerView& kv,
                    const int32_t* block_table, int64_t pos0, const AttentionParams& p, int64_t kv_begin,
                    int64_t kv_end, int64_t span, AttentionPartial part, float* scratch);

// out rows (as attention_rows writes them) from the partials of spans first..first + n_spans - 1
// (parts[i] holds span first + i), merged in span order and normalized.
void attention_merge(const AttentionPartial* parts, int64_t n_spans, int64_t n_rows, int64_t row_stride,
                     const KvLayerView& kv, const AttentionParams& p, int64_t kv_begin, int64_t kv_end, float* out);

// Scalar reference over contiguous K/V ([n_tokens][n_kv_heads * head_dim] floats) with an
// explicit full softmax: the twin that tests compare the paged kernel against.
void attention_ref(const float* q, const float* k, const float* v, int64_t n_kv_heads, int64_t head_dim,
                   int64_t pos, const AttentionParams& p, float* out);

}  // namespace kvasir::kernels
