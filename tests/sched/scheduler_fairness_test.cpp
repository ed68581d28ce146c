// Serving under SLOs, the scheduler's part: fair share between tenants (the virtual token
// counter), batch work yielding to interactive work within one step, KV reserved at admission,
// and the TTFT forecast admission refuses by. Time is a fake clock advanced by a known cost per
// step, so every decision is exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "sched/scheduler.h"
#include "sched/ttft_forecast.h"
#include "sched_test_util.h"

using namespace kvasir;
using namespace kvasir::sched;
using namespace kvasir::sched::test;

namespace {

constexpr int64_t kMs = 1'000'000;

RequestOptions of(std::string tenant, int32_t max_new, double weight = 1.0) {
  return {.max_new_tokens = max_new, .tenant = std::move(tenant), .tenant_weight = weight};
}

// A flood tenant queues 40 requests at once, then a polite tenant sends one. With fair share the
// polite request is admitted at the first seat that frees; FCFS would put it behind the flood.
int64_t polite_queue_ns(bool fair) {
  FakeModel c;
  Scheduler s = make_sched({.max_batch_tokens = 64, .max_seqs = 2, .block_size = 4, .num_blocks = 256,
                            .clock = [&c] { return c.now; }});
  for (RequestId id = 1; id <= 40; ++id) EXPECT_TRUE(s.add_request(id, range(1, 8), of(fair ? "flood" : "", 4)).ok());
  for (int i = 0; i < 3; ++i) timed_step(s, c);
  EXPECT_TRUE(s.add_request(100, range(1, 8), of(fair ? "polite" : "", 4)).ok());
  while (s.has_unfinished()) timed_step(s, c);
  for (const Request& r : s.take_finished())
    if (r.id == 100) return r.timings.queue_ns();
  return -1;
}

}  // namespace

TEST(SchedulerFairness, AFloodingTenantCannotPushAnotherPastItsFairBound) {
  // Fair bound: the flood holds both seats, more than its share of one: the polite request takes
  // one in the next step.
  const int64_t fair = polite_queue_ns(true);
  EXPECT_GE(fair, 0);
  EXPECT_LE(fair, 5 * kMs + 8 * kMs);
  // The planted bug (everyone one tenant, FCFS) waits behind the whole flood.
  const int64_t fcfs = polite_queue_ns(false);
  EXPECT_GT(fcfs, 10 * fair);
}

TEST(SchedulerFairness, ATenantOverItsSeatShareYieldsASeat) {
  Scheduler s = make_sched({.max_batch_tokens = 64, .max_seqs = 4, .block_size = 4, .num_blocks = 256});
  for (RequestId id = 1; id <= 6; ++id) ASSERT_TRUE(s.add_request(id, range(10 * int32_t(id), 6), of("flood", 40)).ok());
  run_step(s);
  ASSERT_EQ(s.num_running(), 4);
  // Another tenant's request: the flood holds 4 seats of a share of 2, so its newest yields.
  ASSERT_TRUE(s.add_request(100, range(500, 6), of("polite", 40)).ok());
  const SchedulerOutput& out = s.step();
  EXPECT_EQ(out.preempted, (std::vector<RequestId>{4}));
  EXPECT_EQ(chunks_of(out).back(), (Chunk{100, 0, 6, true}));
  std::vector<SeqOutput> outs;
  for (const auto& q : out.seqs) outs.push_back({.id = q.id, .token = 1});
  ASSERT_TRUE(s.update(outs).ok());
  // A second one also fits its share (2 of 4); a third would not, and the flood's own waiting
  // requests never preempt their tenant's running ones.
  ASSERT_TRUE(s.add_request(101, range(600, 6), of("polite", 40)).ok());
  ASSERT_TRUE(s.add_request(102, range(700, 6), of("polite", 40)).ok());
  run_step(s);
  run_step(s);
  EXPECT_EQ(s.counters().num_yields, 2);
  EXPECT_EQ(s.num_running(), 4);
  EXPECT_EQ(s.find(102)->state, RequestState::Waiting);
  // Equal weights, equal seats: nothing more moves until requests end.
  for (int i = 0; i < 10; ++i) run_step(s);
  EXPECT_EQ(s.counters().num_yields, 2);
}

TEST(SchedulerFairness, AHeadWithoutASeatDoesNotBlockATenantBelowItsShare) {
  Scheduler s = make_sched({.max_batch_tokens = 128, .max_seqs = 4, .block_size = 4, .num_blocks = 256});
  ASSERT_TRUE(s.add_request(1, range(1, 60), of("polite", 40)).ok());  // polite's counter: 60 and more
  run_step(s);
  for (RequestId id = 10; id < 16; ++id) ASSERT_TRUE(s.add_request(id, range(10 * int32_t(id), 6), of("flood", 40)).ok());
  run_step(s);
  ASSERT_EQ(s.num_running(), 4);
  ASSERT_LT(s.tenant_counter("flood"), s.tenant_counter("polite"));  // the flood's head is first in line
  // ... but has no seat (its tenant holds 3 of 4, over its share of 2); polite's request (1 of 2)
  // goes past it and takes the flood's newest seat.
  ASSERT_TRUE(s.add_request(2, range(900, 6), of("polite", 40)).ok());
  const SchedulerOutput& out = s.step();
  EXPECT_EQ(out.preempted, (std::vector<RequestId>{12}));
  EXPECT_EQ(chunks_of(out).back(), (Chunk{2, 0, 6, true}));
}

TEST(SchedulerFairness, BackloggedTenantsReceiveServiceByTheirWeights) {
  FakeModel c;
  Scheduler s = make_sched({.max_batch_tokens = 32, .max_seqs = 1, .block_size = 4, .num_blocks = 256,
                            .clock = [&c] { return c.now; }});
  // Both tenants keep 5 requests waiting; "b" weighs 3.
  RequestId next = 1;
  std::map<RequestId, std::string> tenant_of;
  std::map<std::string, int> waiting{{"a", 0}, {"b", 0}};
  std::map<std::string, int64_t> served{{"a", 0}, {"b", 0}};
  auto top_up = [&] {
    for (auto& [t, n] : waiting)
      while (n < 5) {
        ASSERT_TRUE(s.add_request(next, range(10 * int32_t(next), 6), of(t, 3, t == "b" ? 3.0 : 1.0)).ok());
        tenant_of[next++] = t;
        ++n;
      }
  };
  double max_gap = 0;
  for (int step = 0; step < 600; ++step) {
    top_up();
    for (const Chunk& ch : timed_step(s, c)) served[tenant_of[ch.id]] += ch.end - ch.start;
    for (const Request& r : s.take_finished()) --waiting[tenant_of[r.id]];
    max_gap = std::max(max_gap, std::abs(s.tenant_counter("a") - s.tenant_counter("b")));
  }
  // A request costs 6 prompt rows + 2 decode rows x 2 = 10 units (its last token is sampled, not
  // computed): counters stay within about one request's cost of each other.
  EXPECT_LE(max_gap, 10.0 + 1e-9);
  const double ratio = double(served["b"]) / double(served["a"]);
  EXPECT_NEAR(ratio, 3.0, 0.3);
}

TEST(SchedulerFairness, AnIdleTenantBanksNoCredit) {
  Scheduler s = make_sched({.max_batch_tokens = 32, .max_seqs = 1, .block_size = 4, .num_blocks = 256});
  for (RequestId id = 1; id <= 20; ++id) ASSERT_TRUE(s.add_request(id, range(10 * int32_t(id), 6), of("busy", 2)).ok());
  for (int i = 0; i < 12; ++i) run_step(s);
  // "late" was idle: it starts at the busy tenant's counter, not at 0, so it alternates with the
  // busy tenant instead of running all its requests first.
  for (RequestId id = 101; id <= 104; ++id) ASSERT_TRUE(s.add_request(id, range(10 * int32_t(id), 6), of("late", 2)).ok());
  EXPECT_GE(s.tenant_counter("late"), s.tenant_counter("busy") - 10.0);
  std::vector<RequestId> admitted;
  for (int step = 0; step < 40 && admitted.size() < 6; ++step) {
    for (const Chunk& ch : run_step(s))
      if (ch.start == 0) admitted.push_back(ch.id);
  }
  const auto late = std::count_if(admitted.begin(), admitted.end(), [](RequestId id) { return id > 100; });
  EXPECT_GE(late, 2);
  EXPECT_LE(late, 4);
}

TEST(SchedulerClasses, BatchWorkYieldsItsSeatWithinOneStep) {
  Scheduler s = make_sched({.max_batch_tokens = 64, .max_seqs = 2, .block_size = 4, .num_blocks = 64});
  RequestOptions batch{.max_new_tokens = 50, .service_class = ServiceClass::batch};
  ASSERT_TRUE(s.add_request(1, range(1, 8), batch).ok());
  ASSERT_TRUE(s.add_request(2, range(1, 8), batch).ok());
  run_step(s);
  run_step(s);
  ASSERT_EQ(s.num_running(), 2);
  ASSERT_TRUE(s.add_request(3, range(100, 8), {.max_new_tokens = 2}).ok());
  const SchedulerOutput& out = s.step();
  // The next step admits it: the most recent batch request gave up its seat.
  EXPECT_EQ(out.preempted, (std::vector<RequestId>{2}));
  EXPECT_EQ(chunks_of(out), (Chunks{{1, 9, 10, true}, {3, 0, 8, true}}));
  std::vector<SeqOutput> outs{{.id = 1, .token = 7}, {.id = 3, .token = 8}};
  ASSERT_TRUE(s.update(outs).ok());
  EXPECT_EQ(s.counters().num_yields, 1);
  // Interactive work never yields to batch work, and the batch request comes back afterwards.
  while (s.has_unfinished()) run_step(s);
  EXPECT_EQ(s.counters().num_yields, 1);
  EXPECT_TRUE(s.kv().check().ok());
  EXPECT_EQ(s.kv().num_free_blocks(), s.kv().num_blocks());
}

TEST(SchedulerClasses, InteractivePrefillGoesBeforeARunningBatchPrefill) {
  Scheduler s = make_sched({.max_batch_tokens = 16, .max_seqs = 4, .block_size = 4, .num_blocks = 64});
  ASSERT_TRUE(s.add_request(1, range(1, 64), {.max_new_tokens = 2, .service_class = ServiceClass::batch}).ok());
  EXPECT_EQ(run_step(s), (Chunks{{1, 0, 16, false}}));
  ASSERT_TRUE(s.add_request(2, range(100, 10), {.max_new_tokens = 2}).ok());
  EXPECT_EQ(run_step(s), (Chunks{{2, 0, 10, true}, {1, 16, 22, false}}));
}

TEST(SchedulerKvReserve, AdmissionCountsTheWholeAnswerSoNothingIsPreempted) {
  for (bool reserve : {false, true}) {
    // 12 blocks of 4 tokens; each request may grow to 4 + 16 = 20 tokens, 5 blocks.
    Scheduler s = make_sched({.max_batch_tokens = 64, .max_seqs = 8, .block_size = 4, .num_blocks = 12,
                              .enable_prefix_cache = false, .reserve_kv = reserve});
    for (RequestId id = 1; id <= 4; ++id) ASSERT_TRUE(s.add_request(id, range(10 * int32_t(id), 4), {.max_new_tokens = 16}).ok());
    int32_t max_running = 0;
    while (s.has_unfinished()) {
      run_step(s);
      max_running = std::max(max_running, s.num_running());
    }
    if (reserve) {
      EXPECT_EQ(s.counters().num_preemptions, 0);
      EXPECT_EQ(max_running, 2);  // 2 x 5 blocks fit in 12, 3 do not
    } else {
      EXPECT_GT(s.counters().num_preemptions, 0);  // all 4 start, then collide
    }
    for (const Request& r : s.take_finished()) EXPECT_EQ(r.num_generated(), 16);
  }
}

TEST(TtftForecast, FairShareBoundsWhatAnotherTenantPutsAhead) {
  QueueLoad load{.num_running = 0, .seats = 64, .step_tokens = 512, .decode_step_ns = 0, .prefill_token_ns = 1e6};
  load.backlog.push_back({.tenant = "flood", .tokens = 100'000, .requests = 500});
  // Unknown costs: no forecast.
  EXPECT_EQ(forecast_ttft_ns(QueueLoad{}, Arrival{.tokens = 10}), -1);
  // The flood's own next request waits for all of it; a polite tenant's for as much of the flood
  // as its own work (equal weights): 200 tokens.
  const int64_t flood = forecast_ttft_ns(load, {.tenant = "flood", .tokens = 100});
  const int64_t polite = forecast_ttft_ns(load, {.tenant = "polite", .tokens = 100});
  EXPECT_EQ(flood, int64_t(100'100 * 1e6));
  EXPECT_EQ(polite, int64_t(200 * 1e6));
  // Weight 4 for the flood: it goes 4 tokens for each of the polite tenant's.
  load.backlog[0].weight = 4;
  EXPECT_EQ(forecast_ttft_ns(load, {.tenant = "polite", .tokens = 100}), int64_t(500 * 1e6));
  // Batch work ahead does not count for an interactive request; interactive work counts for batch.
  load.backlog[0].service_class = ServiceClass::batch;
  EXPECT_EQ(forecast_ttft_ns(load, {.tenant = "polite", .tokens = 100}), int64_t(100 * 1e6));
  EXPECT_EQ(forecast_ttft_ns(load, {.service_class = ServiceClass::batch, .tenant = "x", .tokens = 100}),
            int64_t(500 * 1e6));
}

TEST(TtftForecast, ATenantBelowItsSeatShareWaitsForNoSeat) {
  // Every seat is the flood's; finishes come every 100 ms and 20 flood requests wait.
  QueueLoad load{.num_running = 4, .seats = 4, .step_tokens = 512, .decode_step_ns = 5e6, .prefill_token_ns = 1e5,
                 .finish_interval_ns = 1e8};
  load.backlog.push_back({.tenant = "flood", .tokens = 2000, .requests = 20, .seats = 4});
  // The flood's next request waits for 21 seats to free; a polite one takes a seat now.
  EXPECT_GE(forecast_ttft_ns(load, {.tenant = "flood", .tokens = 100}), int64_t(2.1e9));
  EXPECT_LT(forecast_ttft_ns(load, {.tenant = "polite", .tokens = 100}), int64_t(1e8));
  // Once it holds its share (2 of 4), its next request waits for a seat like anyone's.
  load.backlog.push_back({.tenant = "polite", .tokens = 0, .requests = 0, .seats = 2});
  load.backlog[0].seats = 2;
  EXPECT_GE(forecast_ttft_ns(load, {.tenant = "polite", .tokens = 100}), int64_t(1e8));
}

TEST(TtftForecast, CalibrationLearnsTheRatioOfMeasuredToForecast) {
  ForecastCalibration c;
  for (int i = 0; i < ForecastCalibration::kMinSamples - 1; ++i) c.observe(1e9, 2e9);
  EXPECT_EQ(c.factor(), 1.0);  // too few to say
  c.observe(1e9, 2e9);
  EXPECT_NEAR(c.factor(), 2.0, 1e-9);
  for (int i = 0; i < 300; ++i) c.observe(2e9, 1.5e9);  // the recent past dominates
  EXPECT_NEAR(c.factor(), 0.75, 0.01);
  for (int i = 0; i < 300; ++i) c.observe(1e6, 1e9);    // bounded
  EXPECT_EQ(c.factor(), ForecastCalibration::kMaxFactor);
}

TEST(TtftForecast, MatchesTheScheduledTtftWithinAFewSteps) {
  // The forecast against the real thing: requests of 40 prompt tokens arrive in bursts onto a
  // loaded scheduler; each one's forecast at arrival is compared with its measured TTFT.
  FakeModel c;
  Scheduler s = make_sched({.max_batch_tokens = 64, .max_seqs = 6, .block_size = 4, .num_blocks = 512,
                            .enable_prefix_cache = false, .clock = [&c] { return c.now; }});
  std::map<RequestId, int64_t> forecast;
  RequestId next = 1;
  for (int step = 0; step < 400; ++step) {
    if (step % 10 == 0) {
      for (int k = 0; k < 3; ++k) {
        const Arrival a{.tenant = k == 2 ? "b" : "a", .tokens = 40};
        forecast[next] = forecast_ttft_ns(s.load(), a);
        ASSERT_TRUE(s.add_request(next, range(1000 + int32_t(next), 40), of(a.tenant, 12)).ok());
        ++next;
      }
    }
    timed_step(s, c);
  }
  while (s.has_unfinished()) timed_step(s, c);
  int compared = 0;
  for (const Request& r : s.take_finished()) {
    const int64_t f = forecast[r.id];
    if (f < 0) continue;  // costs not yet measured
    ++compared;
    const int64_t actual = r.timings.ttft_ns();
    // Within 30% or two steps' worth (a step here is 5-69 ms), whichever is larger.
    EXPECT_LE(std::abs(double(f - actual)), std::max(0.3 * double(actual), 2 * 69.0 * kMs))
        << "request " << r.id << " forecast " << f / kMs << " ms, actual " << actual / kMs << " ms";
  }
  EXPECT_GT(compared, 100);
}
