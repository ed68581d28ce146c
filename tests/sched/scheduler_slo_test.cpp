// The TPOT target (SchedulerConfig::tpot_slo_ns): prefill joins steps with decodes only as far as
// the decoding sequences can absorb it, by the step-time model the scheduler fits. A fake clock
// advances by a known cost per step, so every admission decision is exact.
#include <gtest/gtest.h>

#include "sched/scheduler.h"
#include "sched_test_util.h"

using namespace kvasir;
using namespace kvasir::sched;
using namespace kvasir::sched::test;

namespace {

constexpr int64_t kMs = 1'000'000;

Scheduler make(FakeModel& m, int64_t slo_ns) {
  return make_sched({.max_batch_tokens = 256, .max_seqs = 8, .block_size = 16, .num_blocks = 64,
                     .tpot_slo_ns = slo_ns, .clock = [&m] { return m.now; }});
}

// Request 1 prefills 40 tokens (40 ms: 1 ms per token learned), decodes once alone (5 ms, learned
// when the next step starts), then request 2 arrives with 100 prompt tokens.
void warm_up(Scheduler& s, FakeModel& m) {
  ASSERT_TRUE(s.add_request(1, range(1, 40)).ok());
  EXPECT_EQ(timed_step(s, m), (Chunks{{1, 0, 40, true}}));
  EXPECT_EQ(timed_step(s, m), (Chunks{{1, 40, 41, true}}));
  EXPECT_DOUBLE_EQ(s.step_cost().prefill_token_ns(), double(kMs));
  ASSERT_TRUE(s.add_request(2, range(100, 100)).ok());
}

}  // namespace

TEST(SchedulerTpotTarget, OffAdmitsPrefillAtOnce) {
  FakeModel m;
  Scheduler s = make(m, 0);
  warm_up(s, m);
  EXPECT_EQ(timed_step(s, m), (Chunks{{1, 41, 42, true}, {2, 0, 100, true}}));
  EXPECT_EQ(s.counters().num_prefill_held, 0);
}

TEST(SchedulerTpotTarget, PrefillWaitsUntilDecodesBankedEnoughSlack) {
  FakeModel m;
  Scheduler s = make(m, 10 * kMs);
  warm_up(s, m);
  // Request 1 has k tokens, the first at t0; its next may come by t0 + k * 10 ms. Each 5 ms decode
  // step banks 5 ms; a chunk needs 32 tokens (32 ms) of room beyond the 5 ms decode: the room is
  // k * 10 - (k - 1) * 5 - 5 = 5k ms, so prefill is held for k = 2..6 and gets 35 tokens at k = 7.
  for (int k = 2; k <= 6; ++k) EXPECT_EQ(timed_step(s, m), (Chunks{{1, 39 + k, 40 + k, true}})) << k;
  EXPECT_DOUBLE_EQ(s.step_cost().decode_time(1), 5.0 * kMs);
  EXPECT_EQ(s.counters().num_prefill_held, 5);
  EXPECT_EQ(timed_step(s, m), (Chunks{{1, 46, 47, true}, {2, 0, 35, false}}));
  // That step took 40 ms: request 1's mean time per token is exactly the target.
  const Request* r1 = s.find(1);
  ASSERT_NE(r1, nullptr);
  const auto& ts = r1->timings.token_ns;
  EXPECT_EQ(ts.back() - ts.front(), int64_t(ts.size() - 1) * 10 * kMs);
  // The rest of request 2's prompt comes in chunks the slack allows, and request 1 never goes
  // over the target on average.
  while (s.find(2) && s.find(2)->num_generated() == 0) timed_step(s, m);
  for (int i = 0; i < 4; ++i) timed_step(s, m);
  r1 = s.find(1);
  ASSERT_NE(r1, nullptr);
  EXPECT_LE(r1->timings.tpot_ns(), 10 * kMs);
}

TEST(SchedulerTpotTarget, HeldPrefillGetsOneSmallChunkAfterMaxHeldSteps) {
  FakeModel m;
  Scheduler s = make(m, 1 * kMs);  // below the 5 ms decode step: never enough slack
  warm_up(s, m);
  for (int i = 0; i < Scheduler::kMaxHeldSteps; ++i) ASSERT_EQ(timed_step(s, m).size(), 1u) << i;
  EXPECT_EQ(s.counters().num_prefill_held, Scheduler::kMaxHeldSteps);
  const Chunks c = timed_step(s, m);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[1], (Chunk{2, 0, Scheduler::kMinPrefillChunk, false}));
}

TEST(SchedulerTpotTarget, NoDecodesNoHold) {
  FakeModel m;
  Scheduler s = make(m, 1 * kMs);
  ASSERT_TRUE(s.add_request(1, range(1, 40)).ok());
  ASSERT_TRUE(s.add_request(2, range(100, 50)).ok());
  EXPECT_EQ(timed_step(s, m), (Chunks{{1, 0, 40, true}, {2, 0, 50, true}}));
  EXPECT_EQ(s.counters().num_prefill_held, 0);
}

TEST(SchedulerTpotTarget, CapsConcurrencyWhenOneMoreDecodeWouldMissIt) {
  // Decode steps cost 5 ms per sequence here; with a 12 ms target two sequences fit, a third
  // would make every step 15 ms: it waits until one of the two finishes.
  FakeModel m{.decode_fixed = 0, .decode_per_seq = 5 * kMs, .prefill_per_token = kMs / 8};
  Scheduler s = make(m, 12 * kMs);
  auto step = [&] { return timed_step(s, m); };
  ASSERT_TRUE(s.add_request(1, range(1, 8), {.max_new_tokens = 40}).ok());
  step();  // prefill alone
  step();  // one decode: 5 ms measured for 1 sequence
  ASSERT_TRUE(s.add_request(2, range(100, 8), {.max_new_tokens = 40}).ok());
  EXPECT_EQ(step().size(), 2u);  // 2 sequences: 10 ms predicted, admitted
  for (int i = 0; i < 3; ++i) step();
  ASSERT_TRUE(s.add_request(3, range(200, 8)).ok());
  for (int i = 0; i < 20; ++i) {
    const Chunks c = step();
    for (const Chunk& x : c) EXPECT_NE(x.id, 3) << "step " << i;
  }
  EXPECT_EQ(s.num_waiting(), 1);
  EXPECT_DOUBLE_EQ(s.step_cost().decode_time(2), 10.0 * kMs);
  while (s.find(1)) step();  // request 1 finishes: now 3 joins request 2
  ASSERT_NE(s.find(2), nullptr);
  const Chunks c = step();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[1].id, 3);
  EXPECT_EQ(s.num_waiting(), 0);
}
