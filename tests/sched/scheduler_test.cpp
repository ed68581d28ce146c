#include <gtest/gtest.h>

#include "sched/scheduler.h"
#include "sched_test_util.h"

using namespace kvasir;
using namespace kvasir::sched;
using namespace kvasir::sched::test;
using Blocks = std::vector<kv::BlockId>;

TEST(Scheduler, RejectsBadConfig) {
  EXPECT_FALSE(Scheduler::create({.num_blocks = 0}).ok());
  EXPECT_FALSE(Scheduler::create({.max_batch_tokens = 8, .max_seqs = 9, .num_blocks = 4}).ok());
  EXPECT_FALSE(Scheduler::create({.block_size = 4, .num_blocks = 4, .max_model_len = 17}).ok());
  EXPECT_FALSE(Scheduler::create({.block_size = 4, .num_blocks = 4, .max_chunk_tokens = -1}).ok());
  auto ok = Scheduler::create({.block_size = 4, .num_blocks = 4});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->config().max_model_len, 16);
}

TEST(Scheduler, RejectsBadRequests) {
  Scheduler s = make_sched({.block_size = 4, .num_blocks = 4});
  EXPECT_TRUE(s.add_request(1, range(1, 3)).ok());
  EXPECT_FALSE(s.add_request(1, range(1, 3)).ok());   // duplicate id
  EXPECT_FALSE(s.add_request(2, {}).ok());            // empty prompt
  EXPECT_FALSE(s.add_request(3, range(1, 16)).ok());  // no room to generate
  EXPECT_FALSE(s.add_request(4, range(1, 3), {.max_new_tokens = -1}).ok());
  EXPECT_EQ(s.num_waiting(), 1);
}

TEST(Scheduler, ChunkedPrefillSpansSeveralSteps) {
  Scheduler s = make_sched({.max_batch_tokens = 8, .max_seqs = 4, .block_size = 4, .num_blocks = 16});
  ASSERT_TRUE(s.add_request(1, range(1, 20)).ok());
  EXPECT_EQ(run_step(s), (Chunks{{1, 0, 8, false}}));
  EXPECT_EQ(run_step(s), (Chunks{{1, 8, 16, false}}));
  EXPECT_EQ(run_step(s), (Chunks{{1, 16, 20, true}}));
  EXPECT_EQ(run_step(s), (Chunks{{1, 20, 21, true}}));
  const Request* r = s.find(1);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(std::vector<int32_t>(r->generated().begin(), r->generated().end()), (std::vector<int32_t>{1000, 1001}));
  EXPECT_EQ(s.kv().seq_blocks(1), (Blocks{0, 1, 2, 3, 4, 5}));
}

TEST(Scheduler, DecodesFirstThenRunningPrefillsThenAdmissions) {
  Scheduler s = make_sched({.max_batch_tokens = 8, .max_seqs = 4, .block_size = 4, .num_blocks = 16});
  ASSERT_TRUE(s.add_request(1, range(1, 3)).ok());
  EXPECT_EQ(run_step(s), (Chunks{{1, 0, 3, true}}));
  ASSERT_TRUE(s.add_request(2, range(100, 20)).ok());
  EXPECT_EQ(run_step(s), (Chunks{{1, 3, 4, true}, {2, 0, 7, false}}));
  ASSERT_TRUE(s.add_request(3, range(200, 10)).ok());
  EXPECT_EQ(run_step(s), (Chunks{{1, 4, 5, true}, {2, 7, 14, false}}));  // no budget left for 3
  EXPECT_EQ(run_step(s), (Chunks{{1, 5, 6, true}, {2, 14, 20, true}, {3, 0, 1, false}}));
  EXPECT_EQ(run_step(s), (Chunks{{1, 6, 7, true}, {2, 20, 21, true}, {3, 1, 7, false}}));
  EXPECT_EQ(run_step(s), (Chunks{{1, 7, 8, true}, {2, 21, 22, true}, {3, 7, 10, true}}));
  EXPECT_EQ(run_step(s), (Chunks{{1, 8, 9, true}, {2, 22, 23, true}, {3, 10, 11, true}}));
  EXPECT_EQ(s.counters().num_scheduled_tokens, 3 + 8 + 8 + 8 + 8 + 5 + 3);
}

TEST(Scheduler, MaxChunkTokensLetsPromptsShareSteps) {
  Scheduler s = make_sched(
      {.max_batch_tokens = 16, .max_seqs = 4, .block_size = 4, .num_blocks = 16, .max_chunk_tokens = 5});
  ASSERT_TRUE(s.add_request(1, range(1, 12)).ok());
  ASSERT_TRUE(s.add_request(2, range(50, 12)).ok());
  EXPECT_EQ(run_step(s), (Chunks{{1, 0, 5, false}, {2, 0, 5, false}}));
  EXPECT_EQ(run_step(s), (Chunks{{1, 5, 10, false}, {2, 5, 10, false}}));
  EXPECT_EQ(run_step(s), (Chunks{{1, 10, 12, true}, {2, 10, 12, true}}));
}

TEST(Scheduler, AdmitsOnlyWhenBlocksFit) {
  Scheduler s = make_sched({.max_batch_tokens = 16, .max_seqs = 4, .block_size = 4, .num_blocks = 4});
  ASSERT_TRUE(s.add_request(1, range(1, 10)).ok());   // 3 blocks
  ASSERT_TRUE(s.add_request(2, range(100, 6)).ok());  // 2 blocks, 1 free
  EXPECT_EQ(run_step(s), (Chunks{{1, 0, 10, true}}));
  EXPECT_EQ(s.num_waiting(), 1);
  EXPECT_EQ(run_step(s), (Chunks{{1, 10, 11, true}}));
  EXPECT_EQ(s.num_waiting(), 1);
  ASSERT_TRUE(s.finish(1, FinishReason::Stop).ok());
  const SchedulerOutput& out = s.step();
  EXPECT_EQ(chunks_of(out), (Chunks{{2, 0, 6, true}}));
  EXPECT_EQ(*out.seqs[0].block_table, (Blocks{2, 3}));  // request 1's uncached last block, then a fresh one
  EXPECT_EQ(std::vector<int32_t>(out.seqs[0].tokens.begin(), out.seqs[0].tokens.end()), range(100, 6));
}

TEST(Scheduler, HeadOfLineRequestIsNotOvertaken) {
  // Request 2 does not fit yet; request 3 would, but must wait its turn.
  Scheduler s = make_sched({.max_batch_tokens = 16, .max_seqs = 4, .block_size = 4, .num_blocks = 4});
  ASSERT_TRUE(s.add_request(1, range(1, 10)).ok());
  ASSERT_TRUE(s.add_request(2, range(100, 6)).ok());
  ASSERT_TRUE(s.add_request(3, range(200, 2)).ok());
  EXPECT_EQ(run_step(s), (Chunks{{1, 0, 10, true}}));
  EXPECT_EQ(s.num_waiting(), 2);
}

TEST(Scheduler, PreemptsMostRecentAndRecomputesIt) {
  Scheduler s = make_sched({.max_batch_tokens = 16, .max_seqs = 4, .block_size = 4, .num_blocks = 4});
  ASSERT_TRUE(s.add_request(1, range(1, 7)).ok());
  ASSERT_TRUE(s.add_request(2, range(50, 7)).ok());
  EXPECT_EQ(run_step(s), (Chunks{{1, 0, 7, true}, {2, 0, 7, true}}));
  EXPECT_EQ(run_step(s), (Chunks{{1, 7, 8, true}, {2, 7, 8, true}}));
  // Both need a third block for position 8; none is free: the most recent (2) goes.
  const SchedulerOutput& out = s.step();
  EXPECT_EQ(chunks_of(out), (Chunks{{1, 8, 9, true}}));
  EXPECT_EQ(out.preempted, (std::vector<RequestId>{2}));
  EXPECT_EQ(*out.seqs[0].block_table, (Blocks{0, 1, 3}));  // 2's deepest block, evicted from the cache
  ASSERT_TRUE(s.update(std::vector<SeqOutput>{{.id = 1, .token = 1002}}).ok());
  const Request* r2 = s.find(2);
  ASSERT_NE(r2, nullptr);
  EXPECT_EQ(r2->state, RequestState::Waiting);
  EXPECT_EQ(r2->num_preemptions, 1);
  EXPECT_EQ(r2->num_computed_tokens, 0);
  EXPECT_EQ(s.counters().num_preemptions, 1);
  EXPECT_EQ(s.kv().pool().free_list(), (Blocks{2}));

  // 2 still does not fit (its cached first block + 2 new > 1 free).
  EXPECT_EQ(run_step(s), (Chunks{{1, 9, 10, true}}));
  ASSERT_TRUE(s.finish(1, FinishReason::Stop).ok());
  // Recompute: prompt and both generated tokens, the first block straight from the cache.
  const SchedulerOutput& again = s.step();
  EXPECT_EQ(chunks_of(again), (Chunks{{2, 4, 9, true}}));
  EXPECT_EQ(*again.seqs[0].block_table, (Blocks{2, 3, 1}));
  EXPECT_EQ(s.find(2)->num_cached_tokens, 4);
  ASSERT_TRUE(s.update(std::vector<SeqOutput>{{.id = 2, .token = fake_token(s, 2)}}).ok());
  auto gen = s.find(2)->generated();
  EXPECT_EQ(std::vector<int32_t>(gen.begin(), gen.end()), (std::vector<int32_t>{2000, 2001, 2002}));
  EXPECT_EQ(run_step(s), (Chunks{{2, 9, 10, true}}));
  EXPECT_TRUE(s.kv().check().ok());
}

TEST(Scheduler, PrefillShrinksToFreeBlocksThenPreemptsItself) {
  Scheduler s = make_sched({.max_batch_tokens = 8, .max_seqs = 4, .block_size = 4, .num_blocks = 4});
  ASSERT_TRUE(s.add_request(2, range(100, 2)).ok());
  ASSERT_TRUE(s.add_request(1, range(1, 15)).ok());
  EXPECT_EQ(run_step(s), (Chunks{{2, 0, 2, true}, {1, 0, 6, false}}));
  EXPECT_EQ(run_step(s), (Chunks{{2, 2, 3, true}, {1, 6, 12, false}}));  // 7 wanted, 6 fit
  // Request 1 needs a block and is itself the most recently admitted.
  const SchedulerOutput& out = s.step();
  EXPECT_EQ(chunks_of(out), (Chunks{{2, 3, 4, true}}));
  EXPECT_EQ(out.preempted, (std::vector<RequestId>{1}));
  ASSERT_TRUE(s.update(std::vector<SeqOutput>{{.id = 2, .token = 7}}).ok());
  EXPECT_EQ(s.kv().pool().free_list(), (Blocks{3, 2, 1}));  // its full blocks stay cached
  // Two of its three cached blocks survive; it waits for room to use them.
  EXPECT_EQ(run_step(s), (Chunks{{2, 4, 5, true}}));
  EXPECT_EQ(s.kv().seq_blocks(2), (Blocks{0, 3}));
  ASSERT_TRUE(s.finish(2, FinishReason::Stop).ok());
  EXPECT_EQ(run_step(s), (Chunks{{1, 8, 15, true}}));
}

TEST(Scheduler, PrioritiesOrderAdmissionFcfsAmongEquals) {
  Scheduler s = make_sched({.max_batch_tokens = 16, .max_seqs = 1, .block_size = 4, .num_blocks = 16});
  ASSERT_TRUE(s.add_request(1, range(1, 3), {.priority = 0, .max_new_tokens = 1}).ok());
  ASSERT_TRUE(s.add_request(2, range(1, 3), {.priority = 5, .max_new_tokens = 1}).ok());
  ASSERT_TRUE(s.add_request(3, range(1, 3), {.priority = -1, .max_new_tokens = 1}).ok());
  ASSERT_TRUE(s.add_request(4, range(1, 3), {.priority = 0, .max_new_tokens = 1}).ok());
  std::vector<RequestId> order;
  while (s.has_unfinished()) {
    Chunks c = run_step(s);
    ASSERT_EQ(c.size(), 1u);
    order.push_back(c[0].id);
  }
  EXPECT_EQ(order, (std::vector<RequestId>{3, 1, 4, 2}));
  for (const Request& r : s.take_finished()) EXPECT_EQ(r.finish_reason, FinishReason::Length);
}

TEST(Scheduler, PreemptionPrefersTheLowestPriority) {
  Scheduler s = make_sched({.max_batch_tokens = 16, .max_seqs = 4, .block_size = 4, .num_blocks = 4});
  ASSERT_TRUE(s.add_request(1, range(1, 7), {.priority = 5}).ok());
  EXPECT_EQ(run_step(s), (Chunks{{1, 0, 7, true}}));
  ASSERT_TRUE(s.add_request(2, range(50, 7), {.priority = 0}).ok());
  EXPECT_EQ(run_step(s), (Chunks{{1, 7, 8, true}, {2, 0, 7, true}}));
  // 1 needs a block; 2 is more recent but 1 has the lower priority, so 1 yields.
  const SchedulerOutput& out = s.step();
  EXPECT_EQ(chunks_of(out), (Chunks{{2, 7, 8, true}}));
  EXPECT_EQ(out.preempted, (std::vector<RequestId>{1}));
  EXPECT_EQ(s.find(1)->state, RequestState::Waiting);
}

TEST(Scheduler, AbortFreesBlocksAnywhere) {
  Scheduler s = make_sched({.max_batch_tokens = 16, .max_seqs = 2, .block_size = 4, .num_blocks = 8});
  ASSERT_TRUE(s.add_request(1, range(1, 10)).ok());
  ASSERT_TRUE(s.add_request(2, range(50, 5)).ok());
  ASSERT_TRUE(s.add_request(3, range(90, 5)).ok());
  EXPECT_EQ(run_step(s), (Chunks{{1, 0, 10, true}, {2, 0, 5, true}}));
  EXPECT_EQ(s.kv().num_free_blocks(), 3);
  ASSERT_TRUE(s.abort(2).ok());  // running
  EXPECT_EQ(s.kv().num_free_blocks(), 5);
  ASSERT_TRUE(s.abort(3).ok());  // waiting
  EXPECT_EQ(s.num_waiting(), 0);
  EXPECT_FALSE(s.abort(3).ok());
  EXPECT_FALSE(s.abort(99).ok());
  // Aborted between step() and update(): its output is ignored.
  EXPECT_EQ(chunks_of(s.step()), (Chunks{{1, 10, 11, true}}));
  ASSERT_TRUE(s.abort(1).ok());
  EXPECT_TRUE(s.update(std::vector<SeqOutput>{{.id = 1, .token = 5}}).ok());
  EXPECT_EQ(s.kv().num_free_blocks(), 8);
  EXPECT_FALSE(s.has_unfinished());
  std::vector<Request> done = s.take_finished();
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[0].id, 2);
  EXPECT_EQ(done[1].id, 3);
  EXPECT_EQ(done[2].id, 1);
  for (const Request& r : done) EXPECT_EQ(r.finish_reason, FinishReason::Abort);
  EXPECT_EQ(done[2].num_generated(), 1);
  EXPECT_TRUE(s.kv().check().ok());
}

TEST(Scheduler, FinishReasonsFromCallerAndLimits) {
  Scheduler s = make_sched({.max_batch_tokens = 16, .max_seqs = 4, .block_size = 4, .num_blocks = 4, .max_model_len = 8});
  ASSERT_TRUE(s.add_request(1, range(1, 3), {.max_new_tokens = 2}).ok());
  ASSERT_TRUE(s.add_request(2, range(10, 6)).ok());  // stops at max_model_len 8
  ASSERT_TRUE(s.add_request(3, range(20, 2)).ok());  // the caller sees a stop token
  EXPECT_FALSE(s.add_request(4, range(1, 8)).ok());
  const SchedulerOutput& out = s.step();
  ASSERT_EQ(out.seqs.size(), 3u);
  ASSERT_TRUE(s.update(std::vector<SeqOutput>{{.id = 1, .token = 0},
                                             {.id = 2, .token = 0},
                                             {.id = 3, .token = 0, .finish = FinishReason::Stop}})
                  .ok());
  run_step(s);
  EXPECT_FALSE(s.has_unfinished());
  auto done = s.take_finished();
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[0].id, 3);
  EXPECT_EQ(done[0].finish_reason, FinishReason::Stop);
  EXPECT_EQ(done[1].id, 1);
  EXPECT_EQ(done[1].finish_reason, FinishReason::Length);
  EXPECT_EQ(done[1].num_generated(), 2);
  EXPECT_EQ(done[2].id, 2);
  EXPECT_EQ(done[2].finish_reason, FinishReason::Length);
  EXPECT_EQ(done[2].num_tokens(), 8);
  EXPECT_FALSE(s.finish(1, FinishReason::None).ok());
}

TEST(Scheduler, UpdateChecksOutputs) {
  Scheduler s = make_sched({.max_batch_tokens = 8, .max_seqs = 4, .block_size = 4, .num_blocks = 8});
  ASSERT_TRUE(s.add_request(1, range(1, 3)).ok());
  ASSERT_TRUE(s.add_request(2, range(1, 12)).ok());
  EXPECT_EQ(chunks_of(s.step()), (Chunks{{1, 0, 3, true}, {2, 0, 5, false}}));
  EXPECT_FALSE(s.update({}).ok());  // 1's token is missing
  EXPECT_FALSE(s.update(std::vector<SeqOutput>{{.id = 1}, {.id = 1}}).ok());
  EXPECT_FALSE(s.update(std::vector<SeqOutput>{{.id = 1}, {.id = 2}}).ok());  // 2 had no logits
  EXPECT_FALSE(s.update(std::vector<SeqOutput>{{.id = 1}, {.id = 9}}).ok());
  // A repeated step() before update() returns the pending step unchanged.
  EXPECT_EQ(chunks_of(s.step()), (Chunks{{1, 0, 3, true}, {2, 0, 5, false}}));
  EXPECT_EQ(s.counters().num_steps, 1);
  EXPECT_TRUE(s.update(std::vector<SeqOutput>{{.id = 1, .token = 4}}).ok());
  EXPECT_FALSE(s.update(std::vector<SeqOutput>{{.id = 1, .token = 4}}).ok());
  EXPECT_EQ(s.find(1)->num_tokens(), 4);
}

TEST(Scheduler, TimingsUseTheInjectedClock) {
  int64_t t = 100;
  Scheduler s = make_sched(
      {.max_batch_tokens = 8, .max_seqs = 4, .block_size = 4, .num_blocks = 16, .clock = [&t] { return t; }});
  ASSERT_TRUE(s.add_request(1, range(1, 10)).ok());
  t = 200;
  s.step();
  t = 250;
  ASSERT_TRUE(s.update({}).ok());
  t = 300;
  s.step();
  t = 350;
  ASSERT_TRUE(s.update(std::vector<SeqOutput>{{.id = 1, .token = 1}}).ok());
  t = 400;
  s.step();
  t = 450;
  ASSERT_TRUE(s.update(std::vector<SeqOutput>{{.id = 1, .token = 2}}).ok());
  t = 500;
  ASSERT_TRUE(s.finish(1, FinishReason::Stop).ok());
  auto done = s.take_finished();
  ASSERT_EQ(done.size(), 1u);
  const RequestTimings& tm = done[0].timings;
  EXPECT_EQ(tm.arrival_ns, 100);
  EXPECT_EQ(tm.first_scheduled_ns, 200);
  EXPECT_EQ(tm.first_token_ns, 350);
  EXPECT_EQ(tm.token_ns, (std::vector<int64_t>{350, 450}));
  EXPECT_EQ(tm.finished_ns, 500);
  EXPECT_EQ(tm.queue_ns(), 100);
  EXPECT_EQ(tm.ttft_ns(), 250);
  EXPECT_EQ(tm.tpot_ns(), 100);
}

TEST(Scheduler, PrefixCacheSkipsSharedPromptBlocks) {
  Scheduler s = make_sched({.max_batch_tokens = 64, .max_seqs = 4, .block_size = 4, .num_blocks = 32});
  ASSERT_TRUE(s.add_request(1, range(1, 18)).ok());
  EXPECT_EQ(run_step(s), (Chunks{{1, 0, 18, true}}));
  ASSERT_TRUE(s.finish(1, FinishReason::Stop).ok());
  auto b = range(1, 16);
  b.insert(b.end(), {77, 78, 79});
  ASSERT_TRUE(s.add_request(2, b).ok());
  ASSERT_TRUE(s.add_request(3, b, {.cache_salt = "other-tenant"}).ok());
  EXPECT_EQ(run_step(s), (Chunks{{2, 16, 19, true}, {3, 0, 19, true}}));
  const auto& c = s.kv().cache().counters();
  EXPECT_EQ(c.num_queries, 3);
  EXPECT_EQ(c.num_hits, 1);
  EXPECT_EQ(c.num_hit_tokens, 16);
}

TEST(Scheduler, NextTurnReusesThePreviousAnswer) {
  Scheduler s = make_sched({.max_batch_tokens = 64, .max_seqs = 4, .block_size = 4, .num_blocks = 32});
  ASSERT_TRUE(s.add_request(1, range(1, 6), {.max_new_tokens = 5}).ok());
  while (s.has_unfinished()) run_step(s);
  auto done = s.take_finished();
  ASSERT_EQ(done.size(), 1u);
  // 6 prompt + 5 generated; the last generated token was never fed, so 10 tokens have KV.
  std::vector<int32_t> turn2 = done[0].tokens;
  ASSERT_EQ(turn2.size(), 11u);
  turn2.insert(turn2.end(), {500, 501, 502});
  ASSERT_TRUE(s.add_request(2, turn2).ok());
  EXPECT_EQ(run_step(s), (Chunks{{2, 8, 14, true}}));  // blocks [1..4] and [5,6,1000,1001] reused
}
