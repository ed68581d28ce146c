#include <gtest/gtest.h>

#include "kv/block_pool.h"

using namespace kvasir::kv;

TEST(BlockPool, AllocatesInIdOrderUntilEmpty) {
  BlockPool pool(4);
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_EQ(pool.block_alloc(), 0);
  EXPECT_EQ(pool.block_alloc(), 1);
  EXPECT_EQ(pool.block_alloc(), 2);
  EXPECT_EQ(pool.block_alloc(), 3);
  EXPECT_EQ(pool.block_alloc(), kNoBlock);
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_EQ(pool.counters().num_allocated, 4);
  EXPECT_TRUE(pool.check().ok());
}

TEST(BlockPool, FreedBlocksGoToTailOrHead) {
  BlockPool pool(5);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(pool.block_alloc(), i);
  pool.block_free(3);                   // tail
  pool.block_free(1);                   // tail
  pool.block_free(4, FreePlace::Head);  // head: nothing worth keeping
  EXPECT_EQ(pool.free_list(), (std::vector<BlockId>{4, 3, 1}));
  EXPECT_EQ(pool.block_alloc(), 4);
  EXPECT_EQ(pool.block_alloc(), 3);
  EXPECT_EQ(pool.free_list(), (std::vector<BlockId>{1}));
  EXPECT_EQ(pool.counters().num_freed, 3);
  EXPECT_TRUE(pool.check().ok());
}

TEST(BlockPool, RefCountsDelayFree) {
  BlockPool pool(3);
  BlockId b = pool.block_alloc();
  pool.touch(b);
  EXPECT_EQ(pool.ref_count(b), 2);
  pool.block_free(b);
  EXPECT_EQ(pool.ref_count(b), 1);
  EXPECT_EQ(pool.num_free(), 2);
  pool.block_free(b);
  EXPECT_EQ(pool.ref_count(b), 0);
  EXPECT_EQ(pool.free_list(), (std::vector<BlockId>{1, 2, 0}));
  EXPECT_EQ(pool.counters().num_freed, 1);
  EXPECT_TRUE(pool.check().ok());
}

TEST(BlockPool, TouchPullsAFreeBlockOffTheList) {
  BlockPool pool(4);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(pool.block_alloc(), i);
  for (int i = 0; i < 4; ++i) pool.block_free(i);
  pool.touch(2);  // a prefix-cache hit on a freed block
  EXPECT_EQ(pool.ref_count(2), 1);
  EXPECT_EQ(pool.free_list(), (std::vector<BlockId>{0, 1, 3}));
  EXPECT_EQ(pool.counters().num_reclaimed, 1);
  pool.touch(2);  // already referenced: no reclaim
  EXPECT_EQ(pool.counters().num_reclaimed, 1);
  pool.move_to_head(3);
  EXPECT_EQ(pool.free_list(), (std::vector<BlockId>{3, 0, 1}));
  EXPECT_TRUE(pool.check().ok());
}
