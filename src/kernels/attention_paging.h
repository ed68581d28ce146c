// What the paged attention kernels share (internal to kernels/): where a head's K or V row sits
// in the pool, and software prefetching of later head-blocks.
#pragma once
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/quant/quant.h"
#include "kernels/quant/simd.h"
#if KVASIR_HAVE_AVX2
#include <immintrin.h>
#endif

namespace kvasir::kernels {

// Pointer to head g's K or V row of logical position pos (pool = kv.k or kv.v): head-major inside
// a block, so one head's rows of a block are one contiguous run.
inline uint8_t* kv_row(void* pool, const KvLayerView& kv, const int32_t* block_table, int64_t pos, int64_t g) {
  const int64_t stride = kv.head_stride > 0 ? kv.head_stride : kv.block_size * kv.head_dim;
  const int64_t elem = (int64_t(block_table[pos / kv.block_size]) * kv.n_kv_heads + g) * stride +
                       pos % kv.block_size * kv.head_dim;
  return static_cast<uint8_t*>(pool) + row_bytes(kv.type, elem);  // elem starts a row: whole blocks
}

// Lines of a later head-block's K and V, fetched a few at a time while the current one is
// computed. Blocks sit anywhere in the pool, so the hardware prefetchers restart at each one; a
// burst of prefetches per block stalls the core on its miss buffers instead, while spread over
// the block's arithmetic they keep DRAM busy behind it (64 decode rows: 1.7x).
struct Prefetch {
  const char *k = nullptr, *k_end = nullptr, *v = nullptr, *v_end = nullptr;
};

inline void prefetch_next(const char*& p, const char* end, int lines) {
#if KVASIR_HAVE_AVX2
  for (int l = 0; l < lines && p < end; ++l, p += 64) _mm_prefetch(p, _MM_HINT_T0);
#else
  (void)p, (void)end, (void)lines;
#endif
}

// Head-blocks between the one computed and the one prefetched (1-3 measured alike).
constexpr int64_t kPrefetchAhead = 2;

}  // namespace kvasir::kernels
