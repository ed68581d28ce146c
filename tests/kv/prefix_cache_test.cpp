#include <gtest/gtest.h>

#include "kv/kv_manager.h"
#include "kv_test_util.h"

using namespace kvasir::kv;
using namespace kvasir::kv::test;

TEST(PrefixCache, SharesFullBlocksOfACommonPrefix) {
  KvManager kv = make_kv(8);
  auto a = range(1, 10);  // blocks [1..4] [5..8] [9,10]
  EXPECT_EQ(run_prompt(kv, 1, a), 0);
  EXPECT_EQ(kv.seq_blocks(1), (Blocks{0, 1, 2}));
  EXPECT_EQ(kv.cache().num_cached(), 2);  // the partial third block is not cached
  EXPECT_TRUE(kv.cache().is_cached(0));
  EXPECT_TRUE(kv.cache().is_cached(1));
  EXPECT_FALSE(kv.cache().is_cached(2));

  auto b = concat(range(1, 8), {99, 100});
  EXPECT_EQ(run_prompt(kv, 2, b), 8);
  EXPECT_EQ(kv.seq_blocks(2), (Blocks{0, 1, 3}));
  EXPECT_EQ(kv.pool().ref_count(0), 2);
  EXPECT_EQ(kv.pool().ref_count(1), 2);
  EXPECT_EQ(kv.pool().ref_count(3), 1);

  const auto& c = kv.cache().counters();
  EXPECT_EQ(c.num_queries, 2);
  EXPECT_EQ(c.num_query_tokens, 20);
  EXPECT_EQ(c.num_hits, 1);
  EXPECT_EQ(c.num_hit_tokens, 8);
  EXPECT_EQ(c.num_inserts, 2);
  EXPECT_EQ(c.num_evictions, 0);
}

TEST(PrefixCache, HitNeverCoversTheLastPromptToken) {
  KvManager kv = make_kv(8);
  run_prompt(kv, 1, range(1, 12));  // three full blocks, all cached
  EXPECT_EQ(kv.cache().num_cached(), 3);
  // The same 12 tokens again: the last one must be computed, so only 2 blocks can be reused.
  PrefixHit same = kv.find_prefix(range(1, 12), "");
  EXPECT_EQ(same.blocks, (Blocks{0, 1}));
  EXPECT_EQ(same.num_tokens, 8);
  // Exactly 8 tokens: the second block holds the last token.
  EXPECT_EQ(kv.find_prefix(range(1, 8), "").num_tokens, 4);
  // 13 tokens: all three blocks.
  EXPECT_EQ(kv.find_prefix(concat(range(1, 12), {0}), "").blocks, (Blocks{0, 1, 2}));
  // A prompt of one block or less never hits.
  EXPECT_EQ(kv.find_prefix(range(1, 4), "").num_tokens, 0);
}

TEST(PrefixCache, FreedCachedBlocksAreEvictedLeastRecentlyFreedFirst) {
  KvManager kv = make_kv(8);
  run_prompt(kv, 1, range(100, 10));  // blocks 0,1 cached, 2 partial
  run_prompt(kv, 2, range(200, 9));   // blocks 3,4 cached, 5 partial
  kv.seq_free(1);
  kv.seq_free(2);
  // Uncached blocks went to the head, cached ones to the tail: deepest block of each sequence first.
  EXPECT_EQ(kv.pool().free_list(), (Blocks{5, 2, 6, 7, 1, 0, 4, 3}));
  EXPECT_EQ(kv.pool().ref_count(0), 0);
  EXPECT_EQ(kv.cache().num_cached(), 4);

  // 5 blocks of fresh content use up the uncached blocks and evict sequence 1's blocks, deepest first.
  EXPECT_EQ(run_prompt(kv, 3, range(300, 18)), 0);
  EXPECT_EQ(kv.seq_blocks(3), (Blocks{5, 2, 6, 7, 1}));
  EXPECT_EQ(kv.cache().counters().num_evictions, 1);
  EXPECT_FALSE(kv.cache().is_cached(1));
  EXPECT_TRUE(kv.cache().is_cached(0));
  // Sequence 1's first block still hits; sequence 2's prefix is intact.
  EXPECT_EQ(kv.find_prefix(range(100, 10), "").blocks, (Blocks{0}));
  EXPECT_EQ(kv.find_prefix(range(200, 9), "").blocks, (Blocks{3, 4}));
}

TEST(PrefixCache, HitOnFreedBlocksTakesThemOffTheFreeList) {
  KvManager kv = make_kv(4);
  run_prompt(kv, 1, range(1, 12));
  kv.seq_free(1);
  EXPECT_EQ(kv.pool().free_list(), (Blocks{3, 2, 1, 0}));
  // 13 tokens: 3 blocks hit (all free) + 1 new block = the whole pool.
  EXPECT_EQ(run_prompt(kv, 2, concat(range(1, 12), {7})), 12);
  EXPECT_EQ(kv.seq_blocks(2), (Blocks{0, 1, 2, 3}));
  EXPECT_EQ(kv.num_free_blocks(), 0);
  EXPECT_EQ(kv.pool().counters().num_reclaimed, 3);
  kv.seq_free(2);
  // 17 tokens would need 3 hit blocks + 2 new = 5 > 4: refused without touching anything.
  auto big = concat(range(1, 12), range(50, 5));
  PrefixHit hit = kv.find_prefix(big, "");
  ASSERT_EQ(hit.num_tokens, 12);
  EXPECT_FALSE(kv.seq_admit(3, hit, 5, "", 17));
  EXPECT_FALSE(kv.seq_exists(3));
  EXPECT_EQ(kv.num_free_blocks(), 4);
  EXPECT_TRUE(kv.check().ok());
}

TEST(PrefixCache, SaltIsolatesTenants) {
  KvManager kv = make_kv(16);
  auto prompt = range(1, 10);
  EXPECT_EQ(run_prompt(kv, 1, prompt, "tenant-a"), 0);
  EXPECT_EQ(kv.find_prefix(prompt, "tenant-a").num_tokens, 8);
  EXPECT_EQ(kv.find_prefix(prompt, "tenant-b").num_tokens, 0);
  EXPECT_EQ(kv.find_prefix(prompt, "").num_tokens, 0);
  EXPECT_EQ(run_prompt(kv, 2, prompt, "tenant-b"), 0);
  EXPECT_EQ(kv.cache().num_cached(), 4);
}

TEST(PrefixCache, SaltIsCheckedEvenWhenHashesCollide) {
  // Every block hashes to the same value: only the stored content can tell entries apart.
  KvManager kv = make_kv(16, [](BlockHash, std::span<const int32_t>) { return BlockHash(42); });
  auto prompt = range(1, 10);
  run_prompt(kv, 1, prompt, "tenant-a");
  EXPECT_EQ(kv.find_prefix(prompt, "tenant-b").num_tokens, 0);
  EXPECT_EQ(kv.find_prefix(prompt, "tenant-a").num_tokens, 8);
}

TEST(PrefixCache, ForcedCollisionNeverGivesAFalseHit) {
  KvManager kv = make_kv(16, [](BlockHash, std::span<const int32_t>) { return BlockHash(42); });
  auto x = range(1, 4), y = range(5, 4), z = range(9, 4), w = range(13, 4);
  run_prompt(kv, 1, concat(concat(x, y), {0}));  // X(0) -> Y(1)
  run_prompt(kv, 2, concat(concat(z, y), {0}));  // Z(3) -> Y(4): same hash and tokens, other parent
  EXPECT_EQ(kv.cache().num_cached(), 4);          // colliding entries coexist
  EXPECT_EQ(kv.find_prefix(concat(w, {0}), "").num_tokens, 0);
  EXPECT_EQ(kv.find_prefix(concat(concat(w, y), {0}), "").num_tokens, 0);
  EXPECT_EQ(kv.find_prefix(concat(concat(x, y), {0}), "").blocks, (Blocks{0, 1}));
  EXPECT_EQ(kv.find_prefix(concat(concat(z, y), {0}), "").blocks, (Blocks{3, 4}));
  EXPECT_EQ(kv.find_prefix(concat(concat(x, z), {0}), "").blocks, (Blocks{0}));
}

TEST(PrefixCache, MultiTurnReusesGeneratedTokens) {
  KvManager kv = make_kv(16);
  // Turn 1: a 6-token prompt, then decode; each generated token is fed one step later.
  std::vector<int32_t> tokens = range(1, 6);
  run_prompt(kv, 1, tokens);
  EXPECT_EQ(kv.cache().num_cached(), 1);
  for (int32_t t : {70, 71, 72, 73}) {
    tokens.push_back(t);  // sampled
    const int32_t computed = int32_t(tokens.size());  // fed in the next step
    ASSERT_TRUE(kv.seq_allocate(1, computed));
    kv.seq_commit(1, tokens, computed);
  }
  // Tokens 1..6,70,71 fill block 1 during decode: it is registered too.
  EXPECT_EQ(kv.cache().num_cached(), 2);
  EXPECT_EQ(kv.seq_blocks(1), (Blocks{0, 1, 2}));
  kv.seq_free(1);
  // Turn 2 = turn 1 + a new user message.
  auto turn2 = concat(tokens, range(500, 5));
  EXPECT_EQ(run_prompt(kv, 2, turn2), 8);
  EXPECT_EQ(kv.seq_blocks(2), (Blocks{0, 1, 2, 3}));
}

TEST(PrefixCache, DuplicateContentChainsThroughTheFirstEntryAndEvictionCascades) {
  KvManager kv = make_kv(6);
  auto prompt = range(1, 9);
  // Both admitted before either committed: no hit, two private copies.
  for (SeqId id : {1, 2}) {
    PrefixHit hit = kv.find_prefix(prompt, "");
    ASSERT_TRUE(kv.seq_admit(id, hit, 9, "", 9));
  }
  EXPECT_EQ(kv.seq_blocks(1), (Blocks{0, 1, 2}));
  EXPECT_EQ(kv.seq_blocks(2), (Blocks{3, 4, 5}));
  kv.seq_commit(1, prompt, 9);
  kv.seq_commit(2, prompt, 9);
  EXPECT_EQ(kv.cache().num_cached(), 2);  // sequence 2's copies stay private
  EXPECT_FALSE(kv.cache().is_cached(3));
  // Sequence 2 decodes 3 more tokens: its block 5 becomes full and is registered under block 1.
  auto tokens = concat(prompt, {20, 21, 22});
  kv.seq_commit(2, tokens, 12);
  EXPECT_TRUE(kv.cache().is_cached(5));
  EXPECT_EQ(kv.cache().parent(5), 1);
  EXPECT_EQ(kv.find_prefix(concat(tokens, {0}), "").blocks, (Blocks{0, 1, 5}));

  kv.seq_free(1);
  EXPECT_EQ(kv.pool().free_list(), (Blocks{2, 1, 0}));
  // A new sequence needs 2 blocks: 2 (uncached) then 1 (cached) — evicting 1 drops its child 5,
  // which sequence 2 still uses (the block stays referenced, only the cache entry goes).
  ASSERT_TRUE(kv.seq_admit(3, {}, 8, "", 8));
  EXPECT_EQ(kv.seq_blocks(3), (Blocks{2, 1}));
  EXPECT_EQ(kv.cache().counters().num_evictions, 2);
  EXPECT_FALSE(kv.cache().is_cached(5));
  EXPECT_EQ(kv.pool().ref_count(5), 1);
  EXPECT_EQ(kv.find_prefix(concat(tokens, {0}), "").blocks, (Blocks{0}));
  kv.seq_free(3);
  EXPECT_EQ(kv.pool().free_list(), (Blocks{2, 1, 0}));
  // Sequence 2's chain is broken: later full blocks are not registered under a stale parent.
  EXPECT_TRUE(kv.seq_allocate(2, 16));
  kv.seq_commit(2, concat(tokens, {23, 24, 25, 26}), 16);
  EXPECT_EQ(kv.cache().num_cached(), 1);
  EXPECT_TRUE(kv.check().ok()) << kv.check().error();
}

TEST(PrefixCache, DisabledCacheNeverHits) {
  KvManager kv = make_kv(8, {}, /*enable_prefix_cache=*/false);
  run_prompt(kv, 1, range(1, 10));
  kv.seq_free(1);
  EXPECT_EQ(kv.find_prefix(range(1, 10), "").num_tokens, 0);
  EXPECT_EQ(kv.cache().counters().num_queries, 0);
  EXPECT_EQ(kv.num_free_blocks(), 8);
}
