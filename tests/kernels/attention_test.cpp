// Paged attention equals the contiguous full-softmax reference (F32 KV: relative error <= 1e-5),
// across block sizes, GQA groups, sliding windows and scattered block tables, and is bitwise the
// same whether K and V sit in separate pools or alternate in one (KvCache's layout).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "kernels/attention.h"

using namespace kvasir;
using namespace kvasir::kernels;

namespace {

struct Case {
  int64_t n_heads, n_kv_heads, head_dim, block_size, n_tokens, window;
  DType type;
};

// Max |a-b| / max|b| over the outputs.
double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, double(std::fabs(a[i] - b[i])));
    den = std::max(den, double(std::fabs(b[i])));
  }
  return num / std::max(den, 1e-30);
}

void run_case(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t kv_dim = c.n_kv_heads * c.head_dim;
  const int64_t n_blocks_used = (c.n_tokens + c.block_size - 1) / c.block_size;
  const int64_t pool_blocks = n_blocks_used * 2 + 3;
  // Scatter the sequence over a pool in a shuffled order to exercise the block table.
  std::vector<int32_t> ids(static_cast<size_t>(pool_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> table(ids.begin(), ids.begin() + n_blocks_used);

  const size_t elem = c.type == DType::F32 ? 4 : 2;
  std::vector<uint8_t> kpool(size_t(pool_blocks * c.block_size * kv_dim) * elem);
  std::vector<uint8_t> vpool(kpool.size());
  KvLayerView view{kpool.data(), vpool.data(), c.type, c.block_size, c.n_kv_heads, c.head_dim};
  // KvCache's layout: K and V alternate per (block, head) in one pool.
  std::vector<uint8_t> kvpool(2 * kpool.size());
  const int64_t run = c.block_size * c.head_dim;
  KvLayerView mixed{kvpool.data(), kvpool.data() + size_t(run) * elem, c.type, c.block_size, c.n_kv_heads, c.head_dim,
                    2 * run};

  std::vector<float> k(static_cast<size_t>(c.n_tokens * kv_dim)), v(k.size());
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  for (int64_t t = 0; t < c.n_tokens; ++t) {
    kv_store(view, table.data(), t, &k[size_t(t * kv_dim)], &v[size_t(t * kv_dim)]);
    kv_store(mixed, table.data(), t, &k[size_t(t * kv_dim)], &v[size_t(t * kv_dim)]);
  }
  if (c.type == DType::F16) {  // the reference sees what the cache holds
    for (auto& x : k) x = fp16_to_f32(f32_to_fp16(x));
    for (auto& x : v) x = fp16_to_f32(f32_to_fp16(x));
  }
  const AttentionParams p{c.n_heads, c.window, 1.f / std::sqrt(float(c.head_dim)), 0.f};
  std::vector<float> scratch(size_t(attention_scratch_floats(view, p)));
  std::vector<float> q(static_cast<size_t>(c.n_heads * c.head_dim)), out(q.size()), ref(q.size());
  for (int64_t pos : {int64_t(0), c.n_tokens / 2, c.n_tokens - 1}) {
    for (auto& x : q) x = nd(rng);
    attention(q.data(), view, table.data(), pos, p, out.data(), scratch.data());
    attention_ref(q.data(), k.data(), v.data(), c.n_kv_heads, c.head_dim, pos, p, ref.data());
    std::vector<float> out_mixed(out.size());
    attention(q.data(), mixed, table.data(), pos, p, out_mixed.data(), scratch.data());
    EXPECT_EQ(0, std::memcmp(out.data(), out_mixed.data(), out.size() * sizeof(float)))
        << "interleaved K/V pool differs from separate pools at pos " << pos;
    const double tol = 1e-5;  // F32 KV: only float summation order differs from the double reference
    EXPECT_LE(rel_error(out, ref), tol) << "pos " << pos << " heads " << c.n_heads << "/" << c.n_kv_heads
                                        << " block " << c.block_size << " window " << c.window;
  }
}

// One layer's paged K/V of n random tokens, its blocks in descending order (nothing contiguous).
struct LayerCase {
  int64_t n_heads, n_kv_heads, head_dim, block_size, window;
  DType type;
};
struct RandomCache {
  std::vector<int32_t> table;
  std::vector<uint8_t> kpool, vpool;
  KvLayerView view;
  RandomCache(const LayerCase& c, int64_t n, std::mt19937& rng) {
    std::normal_distribution<float> nd(0.f, 1.f);
    const int64_t kv_dim = c.n_kv_heads * c.head_dim, blocks = (n + c.block_size - 1) / c.block_size;
    table.resize(size_t(blocks));
    std::iota(table.rbegin(), table.rend(), 0);
    kpool.resize(row_bytes(c.type, blocks * c.block_size * kv_dim));
    vpool.resize(kpool.size());
    view = {kpool.data(), vpool.data(), c.type, c.block_size, c.n_kv_heads, c.head_dim};
    std::vector<float> k(static_cast<size_t>(kv_dim)), v(k.size());
    for (int64_t t = 0; t < n; ++t) {
      for (auto& x : k) x = nd(rng);
      for (auto& x : v) x = nd(rng);
      kv_store(view, table.data(), t, k.data(), v.data());
    }
  }
};

}  // namespace

TEST(Attention, PagedEqualsContiguousReference) {
  const Case cases[] = {
      {1, 1, 8, 16, 1, 0, DType::F32},    {8, 4, 8, 16, 37, 0, DType::F32},   {8, 2, 32, 16, 100, 0, DType::F32},
      {4, 1, 64, 16, 33, 8, DType::F32},  {4, 1, 64, 4, 50, 7, DType::F32},   {6, 3, 16, 1, 20, 0, DType::F32},
      {4, 4, 64, 32, 130, 0, DType::F32}, {4, 2, 64, 16, 17, 16, DType::F32}, {8, 1, 256, 16, 70, 0, DType::F32},
      // Past kAttentionSpan: several spans merged, and a window that crosses a span boundary.
      {4, 2, 32, 16, 2600, 0, DType::F32}, {4, 1, 64, 16, 2200, 700, DType::F32}, {2, 1, 16, 48, 1100, 0, DType::F32},
      // Small head dims (64 keys per softmax step: many blocks), across spans and with a window.
      {8, 4, 8, 16, 1500, 0, DType::F32}, {4, 2, 16, 4, 1300, 90, DType::F32},
  };
  uint32_t seed = 1;
  for (const auto& c : cases) run_case(c, seed++);
}

TEST(Attention, F16CacheMatchesReferenceOnRoundedValues) {
  run_case({8, 2, 32, 16, 45, 0, DType::F16}, 7);
  run_case({4, 1, 64, 16, 40, 8, DType::F16}, 8);
}

TEST(Attention, SlidingWindowIgnoresOldKeys) {
  // Keys outside the window must not matter: change them and the output stays bit-identical.
  const int64_t hd = 16, bs = 4, n = 20, window = 5;
  std::vector<float> kpool(static_cast<size_t>(8 * bs * hd)), vpool(kpool.size());
  std::vector<int32_t> table = {3, 0, 6, 1, 2};
  KvLayerView view{kpool.data(), vpool.data(), DType::F32, bs, 1, hd};
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> k(static_cast<size_t>(hd)), v(k.size());
  for (int64_t t = 0; t < n; ++t) {
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    kv_store(view, table.data(), t, k.data(), v.data());
  }
  const AttentionParams p{2, window, 0.25f, 0.f};
  std::vector<float> q(static_cast<size_t>(2 * hd)), a(q.size()), b(q.size()), scratch(size_t(attention_scratch_floats(view, p)));
  for (auto& x : q) x = nd(rng);
  attention(q.data(), view, table.data(), n - 1, p, a.data(), scratch.data());
  for (int64_t t = 0; t < n - window; ++t) {
    for (auto& x : k) x = 100.f;
    kv_store(view, table.data(), t, k.data(), k.data());
  }
  attention(q.data(), view, table.data(), n - 1, p, b.data(), scratch.data());
  EXPECT_EQ(a, b);
}

// A tile of consecutive rows (a prefill chunk), split over KV heads as threads do, gives every
// row bitwise what attention() gives it alone: the batch-invariance half of the kernel. (A
// single row and tiles of 2-3 rows read F16 K/V in place, tiles of 4 or more widen it into
// scratch, and the row counts below cover both; Q8_0 is read in place, Q4_0 dequantized.)
TEST(Attention, TileRowsEqualSingleRowsBitwise) {
  const LayerCase cases[] = {{8, 2, 64, 16, 0, DType::F16},   {4, 1, 36, 4, 7, DType::F32},  {6, 6, 8, 16, 0, DType::F16},
                             {4, 1, 256, 16, 20, DType::F16}, {2, 2, 100, 3, 0, DType::F32}, {16, 2, 64, 16, 0, DType::Q8_0},
                             {4, 1, 256, 16, 20, DType::Q8_0}, {3, 3, 32, 16, 0, DType::Q8_0}, {8, 2, 64, 16, 0, DType::Q4_0},
                             // Q8_0 pages of 8 (eight to a step) and 32 keys.
                             {8, 2, 64, 8, 5, DType::Q8_0},   {4, 1, 64, 32, 0, DType::Q8_0}};
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const auto& c : cases) {
    const int64_t n = 70, q_dim = c.n_heads * c.head_dim;
    const RandomCache cache(c, n, rng);
    const KvLayerView& view = cache.view;
    const std::vector<int32_t>& table = cache.table;
    const AttentionParams p{c.n_heads, c.window, 1.f / std::sqrt(float(c.head_dim)), 0.f};
    std::vector<float> scratch(size_t(attention_scratch_floats(view, p)));
    for (auto [pos0, rows] : {std::pair<int64_t, int64_t>{0, 16}, {5, 1}, {30, 13}, {54, 16}, {69, 1}, {40, 2}, {44, 3}, {47, 4}}) {
      std::vector<float> q(size_t(rows * q_dim)), tile(q.size(), -1.f);
      for (auto& x : q) x = nd(rng);
      // Two "threads": KV heads [0, h) and [h, n_kv_heads).
      const int64_t half = c.n_kv_heads / 2;
      attention_rows(q.data(), rows, q_dim, view, table.data(), pos0, p, 0, half, tile.data(), scratch.data());
      attention_rows(q.data(), rows, q_dim, view, table.data(), pos0, p, half, c.n_kv_heads, tile.data(), scratch.data());
      for (int64_t m = 0; m < rows; ++m) {
        std::vector<float> one(static_cast<size_t>(q_dim));
        attention(q.data() + m * q_dim, view, table.data(), pos0 + m, p, one.data(), scratch.data());
        for (int64_t i = 0; i < q_dim; ++i)
          ASSERT_EQ(std::memcmp(&one[size_t(i)], &tile[size_t(m * q_dim + i)], 4), 0)
              << "row " << m << " of tile at " << pos0 << " elem " << i << " head_dim " << c.head_dim;
      }
    }
  }
}

// One long sequence split by key span (as Forward does when a step has too few tiles for its
// threads): attention_span per span, then attention_merge, is bitwise attention_rows, for tiles
// inside a span, across a span boundary and with windows that cross one.
TEST(Attention, SpanSplitEqualsAttentionRowsBitwise) {
  const LayerCase cases[] = {{8, 2, 64, 16, 0, DType::F16}, {4, 1, 256, 16, 0, DType::F16}, {4, 1, 32, 16, 700, DType::F32},
                             {6, 3, 16, 48, 0, DType::F32}, {4, 2, 64, 32, 0, DType::Q8_0},
                             // Softmax steps of 64 keys over 4 and 8 blocks, here with a window.
                             {4, 2, 8, 16, 0, DType::F16},  {4, 2, 16, 8, 300, DType::F32}};
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const auto& c : cases) {
    const int64_t n = 2 * kAttentionSpan + 500, q_dim = c.n_heads * c.head_dim;
    const RandomCache cache(c, n, rng);
    const KvLayerView& view = cache.view;
    const std::vector<int32_t>& table = cache.table;
    const AttentionParams p{c.n_heads, c.window, 1.f / std::sqrt(float(c.head_dim)), 0.f};
    std::vector<float> scratch(size_t(attention_scratch_floats(view, p)));
    const int64_t S = kAttentionSpan;
    for (auto [pos0, rows] : {std::pair<int64_t, int64_t>{S - 8, 16}, {2 * S - 1, 1}, {n - 1, 1}, {S + 300, 16}, {3, 5}}) {
      std::vector<float> q(size_t(rows * q_dim)), whole(q.size(), -1.f), split(q.size(), -2.f);
      for (auto& x : q) x = nd(rng);
      attention_rows(q.data(), rows, q_dim, view, table.data(), pos0, p, 0, c.n_kv_heads, whole.data(), scratch.data());
      const SpanRange spans = attention_spans(pos0, rows, c.window);
      std::vector<float> partials(size_t(spans.count() * attention_partial_floats(rows, c.n_heads, c.head_dim)));
      std::vector<AttentionPartial> parts;
      for (int64_t j = 0; j < spans.count(); ++j)
        parts.push_back(attention_partial_at(partials.data() + j * attention_partial_floats(rows, c.n_heads, c.head_dim),
                                             rows, c.n_heads, c.head_dim));
      // Two "threads" over KV heads [0, h) and [h, n_kv_heads), each span on its own.
      const int64_t half = c.n_kv_heads / 2;
      for (auto [g0, g1] : {std::pair<int64_t, int64_t>{0, half}, {half, c.n_kv_heads}}) {
        for (int64_t j = spans.last; j >= spans.first; --j)  // any order: partials are independent
          attention_span(q.data(), rows, q_dim, view, table.data(), pos0, p, g0, g1, j, parts[size_t(j - spans.first)],
                         scratch.data());
        attention_merge(parts.data(), spans.count(), rows, q_dim, view, p, g0, g1, split.data());
      }
      ASSERT_EQ(0, std::memcmp(whole.data(), split.data(), whole.size() * sizeof(float)))
          << "tile at " << pos0 << " (" << rows << " rows, spans " << spans.first << ".." << spans.last
          << ") head_dim " << c.head_dim << " window " << c.window;
      // And each row of the tile alone, as a decode step computes it.
      for (int64_t m = 0; m < rows; ++m) {
        std::vector<float> one(static_cast<size_t>(q_dim));
        attention(q.data() + m * q_dim, view, table.data(), pos0 + m, p, one.data(), scratch.data());
        ASSERT_EQ(0, std::memcmp(one.data(), whole.data() + m * q_dim, size_t(q_dim) * sizeof(float)))
            << "row " << m << " of tile at " << pos0;
      }
    }
  }
}

// Query heads sharing a KV head are attended together, each K/V element read once for all of
// them, in passes of 8, 4, 2 and 1 heads (in 512-bit registers where compiled in, their dims
// left over in 256-bit ones; Q8_0 in integer lanes). Each head must still get bitwise what it gets alone:
// the same model with the KV head repeated for every query head (groups of one) is the twin.
TEST(Attention, GroupedHeadsEqualOneHeadPerKvHeadBitwise) {
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t group : {2, 3, 4, 7, 8, 12}) {
    for (auto [type, hd] : {std::pair{DType::F16, int64_t(64)}, {DType::F32, 64}, {DType::F16, 8}, {DType::F32, 40},
                            {DType::F16, 256}, {DType::F32, 128}, {DType::Q8_0, 64}, {DType::Q8_0, 256}}) {
      const int64_t bs = 16, n = 300, n_kv = 2, heads = n_kv * group;
      std::vector<int32_t> table(size_t((n + bs - 1) / bs));
      std::iota(table.begin(), table.end(), 0);
      std::vector<uint8_t> kp(row_bytes(type, int64_t(table.size()) * bs * n_kv * hd)), vp(kp.size());
      std::vector<uint8_t> kr(kp.size() * size_t(group)), vr(kr.size());
      KvLayerView grouped{kp.data(), vp.data(), type, bs, n_kv, hd};
      KvLayerView repeated{kr.data(), vr.data(), type, bs, heads, hd};
      std::vector<float> k(size_t(n_kv * hd)), v(k.size()), k_rep(size_t(heads * hd)), v_rep(k_rep.size());
      for (int64_t t = 0; t < n; ++t) {
        for (auto& x : k) x = nd(rng);
        for (auto& x : v) x = nd(rng);
        for (int64_t h = 0; h < heads; ++h) {
          std::copy_n(k.data() + h / group * hd, hd, k_rep.data() + h * hd);
          std::copy_n(v.data() + h / group * hd, hd, v_rep.data() + h * hd);
        }
        kv_store(grouped, table.data(), t, k.data(), v.data());
        kv_store(repeated, table.data(), t, k_rep.data(), v_rep.data());
      }
      const AttentionParams p{heads, 0, 0.125f, 0.f};
      std::vector<float> scratch(size_t(std::max(attention_scratch_floats(grouped, p), attention_scratch_floats(repeated, p))));
      for (int64_t rows : {1, 5}) {
        std::vector<float> q(size_t(rows * heads * hd)), a(q.size()), b(q.size());
        for (auto& x : q) x = nd(rng);
        attention_rows(q.data(), rows, heads * hd, grouped, table.data(), n - rows, p, 0, n_kv, a.data(), scratch.data());
        attention_rows(q.data(), rows, heads * hd, repeated, table.data(), n - rows, p, 0, heads, b.data(), scratch.data());
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
            << "group " << group << " rows " << rows << " head_dim " << hd << " " << dtype_name(type);
      }
    }
  }
}
