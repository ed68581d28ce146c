#include <gtest/gtest.h>

#include "kv/kv_manager.h"
#include "kv_test_util.h"

using namespace kvasir::kv;
using namespace kvasir::kv::test;

TEST(KvManager, RejectsBadOptions) {
  EXPECT_FALSE(KvManager::create({.num_blocks = 0}).ok());
  EXPECT_FALSE(KvManager::create({.num_blocks = 4, .block_size = 0}).ok());
}

TEST(KvManager, AllocatesBlocksAsTheSequenceGrows) {
  KvManager kv = make_kv(4);
  ASSERT_TRUE(kv.seq_admit(7, {}, 3, "", 3));
  EXPECT_EQ(kv.seq_blocks(7), (Blocks{0}));
  EXPECT_TRUE(kv.seq_allocate(7, 4));  // still fits in block 0
  EXPECT_EQ(kv.seq_blocks(7), (Blocks{0}));
  EXPECT_TRUE(kv.seq_allocate(7, 5));
  EXPECT_EQ(kv.seq_blocks(7), (Blocks{0, 1}));
  EXPECT_EQ(kv.seq_capacity(7), 16);
  EXPECT_EQ(kv.num_free_blocks(), 2);
  EXPECT_TRUE(kv.check().ok());
}

TEST(KvManager, AllocationFailureChangesNothing) {
  KvManager kv = make_kv(4);
  ASSERT_TRUE(kv.seq_admit(1, {}, 8, "", 8));
  ASSERT_TRUE(kv.seq_admit(2, {}, 4, "", 4));
  EXPECT_FALSE(kv.seq_allocate(2, 13));  // needs 3 more blocks, 1 free
  EXPECT_EQ(kv.seq_blocks(2), (Blocks{2}));
  EXPECT_EQ(kv.num_free_blocks(), 1);
  EXPECT_FALSE(kv.seq_admit(3, {}, 5, "", 5));
  EXPECT_FALSE(kv.seq_exists(3));
  EXPECT_TRUE(kv.seq_allocate(2, 8));
  EXPECT_EQ(kv.num_free_blocks(), 0);
  EXPECT_TRUE(kv.check().ok());
}

TEST(KvManager, FreeReturnsEveryBlock) {
  KvManager kv = make_kv(8);
  run_prompt(kv, 1, range(1, 10));
  run_prompt(kv, 2, range(1, 10));
  EXPECT_EQ(kv.num_free_blocks(), 4);
  kv.seq_free(1);
  kv.seq_free(2);
  kv.seq_free(3);  // unknown: no-op
  EXPECT_EQ(kv.num_free_blocks(), 8);
  EXPECT_EQ(kv.num_seqs(), 0);
  for (BlockId b = 0; b < 8; ++b) EXPECT_EQ(kv.pool().ref_count(b), 0);
  EXPECT_EQ(kv.cache().num_cached(), 2);  // cached until evicted
  EXPECT_TRUE(kv.check().ok());
}
