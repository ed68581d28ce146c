// Prefill-only requests (scoring, embeddings, cache warming) and requests that opt out of
// prefix-cache hits.
#include <gtest/gtest.h>

#include "sched/sched_test_util.h"

namespace kvasir::sched::test {
namespace {

TEST(PrefillOnly, FinishesWithLengthOnceItsPromptIsComputed) {
  Scheduler s = make_sched({.max_batch_tokens = 16, .max_seqs = 4, .block_size = 4, .num_blocks = 32});
  ASSERT_TRUE(s.add_request(1, range(0, 24), {.prefill_only = true}).ok());
  // Two chunks; the second reaches the last token, and update() wants no sampled token for it.
  const SchedulerOutput& a = s.step();
  EXPECT_EQ(chunks_of(a), (Chunks{{1, 0, 16, false}}));
  ASSERT_TRUE(s.update({}).ok());
  const SchedulerOutput& b = s.step();
  EXPECT_EQ(chunks_of(b), (Chunks{{1, 16, 24, true}}));
  ASSERT_TRUE(s.update({}).ok());
  auto done = s.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].finish_reason, FinishReason::Length);
  EXPECT_EQ(done[0].num_generated(), 0);
  EXPECT_EQ(s.kv().num_free_blocks(), s.kv().num_blocks());
  EXPECT_FALSE(s.has_unfinished());
}

TEST(PrefillOnly, RefusesASampledTokenOrADraft) {
  Scheduler s = make_sched({.max_batch_tokens = 16, .max_seqs = 4, .block_size = 4, .num_blocks = 32});
  ASSERT_TRUE(s.add_request(1, range(0, 8), {.prefill_only = true}).ok());
  EXPECT_FALSE(s.set_draft(1, std::vector<int32_t>{1, 2}).ok());
  (void)s.step();
  EXPECT_FALSE(s.update(std::vector<SeqOutput>{{.id = 1, .token = 5}}).ok());
}

TEST(PrefillOnly, ItsBlocksServeOthersButItTakesNoHitsWhenAskedNot) {
  Scheduler s = make_sched({.max_batch_tokens = 64, .max_seqs = 4, .block_size = 4, .num_blocks = 32});
  ASSERT_TRUE(s.add_request(1, range(0, 20), {.prefill_only = true}).ok());
  (void)s.step();  // warms the cache with 5 full blocks
  ASSERT_TRUE(s.update({}).ok());
  EXPECT_EQ(s.take_finished().size(), 1u);
  ASSERT_TRUE(s.add_request(2, range(0, 20), {.reuse_prefix = false}).ok());
  EXPECT_EQ(chunks_of(s.step()), (Chunks{{2, 0, 20, true}}));  // every token computed
  ASSERT_TRUE(s.update(std::vector<SeqOutput>{{.id = 2, .token = 7}}).ok());
  ASSERT_TRUE(s.add_request(3, range(0, 20)).ok());
  const SchedulerOutput& out = s.step();
  ASSERT_EQ(out.seqs.size(), 2u);
  EXPECT_EQ(out.seqs[1].id, 3);
  EXPECT_GT(out.seqs[1].start, 0);  // a plain request is served by the cache
}

}  // namespace
}  // namespace kvasir::sched::test
