// Helpers for the kv tests: toy managers and token ranges.
#pragma once
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kv/kv_manager.h"

namespace kvasir::kv::test {

inline KvManager make_kv(int32_t num_blocks, BlockHasher hasher = {}, bool enable_prefix_cache = true) {
  auto r = KvManager::create({.num_blocks = num_blocks,
                              .block_size = 4,
                              .enable_prefix_cache = enable_prefix_cache,
                              .model_id = "toy",
                              .hasher = std::move(hasher)});
  EXPECT_TRUE(r.ok()) << r.error();
  return std::move(r).value();
}

// first, first+1, ..., first+n-1
inline std::vector<int32_t> range(int32_t first, int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

inline std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Admits a prompt the way the scheduler does, computes all of it in one go and commits it.
// Returns the number of tokens served from the cache.
inline int32_t run_prompt(KvManager& kv, SeqId id, const std::vector<int32_t>& tokens,
                          std::string_view salt = "") {
  PrefixHit hit = kv.find_prefix(tokens, salt);
  int32_t n = int32_t(tokens.size());
  EXPECT_TRUE(kv.seq_admit(id, hit, n - hit.num_tokens, salt, n));
  kv.seq_commit(id, tokens, n);
  EXPECT_TRUE(kv.check().ok()) << kv.check().error();
  return hit.num_tokens;
}

using Blocks = std::vector<BlockId>;

}  // namespace kvasir::kv::test
