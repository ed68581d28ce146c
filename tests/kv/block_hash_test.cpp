#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "kv/block_hash.h"

using namespace kvasir::kv;

TEST(BlockHash, DependsOnParentTokensAndLength) {
  std::vector<int32_t> a = {1, 2, 3, 4}, b = {1, 2, 3, 5}, c = {1, 2, 3};
  EXPECT_EQ(hash_block(7, a), hash_block(7, a));
  EXPECT_NE(hash_block(7, a), hash_block(8, a));
  EXPECT_NE(hash_block(7, a), hash_block(7, b));
  EXPECT_NE(hash_block(7, a), hash_block(7, c));
  std::vector<int32_t> zero3 = {0, 0, 0}, zero4 = {0, 0, 0, 0};
  EXPECT_NE(hash_block(0, zero3), hash_block(0, zero4));
}

TEST(BlockHash, RootSeparatesModelsAndSalts) {
  EXPECT_EQ(hash_root("m", ""), hash_root("m", ""));
  EXPECT_NE(hash_root("m", ""), hash_root("m", "tenant-a"));
  EXPECT_NE(hash_root("m", "tenant-a"), hash_root("m", "tenant-b"));
  EXPECT_NE(hash_root("m1", ""), hash_root("m2", ""));
  EXPECT_NE(hash_root("ab", "c"), hash_root("a", "bc"));
}

TEST(BlockHash, NoCollisionsOnSmallBlocks) {
  // Every 2-token block over a 200-token vocabulary, chained from two parents: 80k distinct hashes.
  std::set<BlockHash> seen;
  for (BlockHash parent : {BlockHash(1), BlockHash(2)}) {
    for (int32_t x = 0; x < 200; ++x) {
      for (int32_t y = 0; y < 200; ++y) {
        std::vector<int32_t> t = {x, y};
        seen.insert(hash_block(parent, t));
      }
    }
  }
  EXPECT_EQ(seen.size(), 80000u);
}
