// Paged attention, FlashAttention-style: for one query row, walk the sequence's KV blocks
// through its block table keeping a running max and sum per head (online softmax); the score
// matrix is never materialized. GQA-aware: each KV block is converted once and serves the whole
// group of query heads that share its KV head.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace kvasir::kernels {

// One layer's K and V pools: [num_blocks][block_size][n_kv_heads * head_dim], F16 or F32.
struct KvLayerView {
  void* k = nullptr;
  void* v = nullptr;
  DType type = DType::F16;
  int64_t block_size = 16;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
};

// Stores one token's K and V (each n_kv_heads * head_dim floats) at logical position pos.
void kv_store(const KvLayerView& kv, const int32_t* block_table, int64_t pos, const float* k, const float* v);

struct AttentionParams {
  int64_t n_heads = 0;   // query heads; a multiple of n_kv_heads
  int64_t window = 0;    // sliding window: keys in [pos - window + 1, pos]; 0 = unlimited
  float scale = 1.f;     // applied to q·k
  float softcap = 0.f;   // 0 = none, else scores = softcap * tanh(scores / softcap)
};

// Floats of scratch attention() needs.
int64_t attention_scratch_floats(const KvLayerView& kv, const AttentionParams& p);

// q: [n_heads][head_dim] at position pos; attends causally to positions [lo, pos] of the
// sequence whose blocks are listed in block_table. out: [n_heads][head_dim].
void attention(const float* q, const KvLayerView& kv, const int32_t* block_table, int64_t pos,
               const AttentionParams& p, float* out, float* scratch);

// Scalar reference over contiguous K/V ([n_tokens][n_kv_heads * head_dim] floats) with an
// explicit full softmax: the twin that tests compare the paged kernel against.
void attention_ref(const float* q, const float* k, const float* v, int64_t n_kv_heads, int64_t head_dim,
                   int64_t pos, const AttentionParams& p, float* out);

}  // namespace kvasir::kernels
