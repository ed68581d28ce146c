// The step-time model's prices for draft rows: against the plain step of the same stretch of
// time, per count where the output head's cost jumps, and bounded against a step another process
// stole.
#include <gtest/gtest.h>

#include "sched/step_cost.h"

namespace kvasir::sched {
namespace {

constexpr double kMs = 1e6;

// Steps of one decode with rows = i % period (0: plain), taking time(rows) each.
template <class Time>
void run(StepCostModel& m, int steps, int period, int first_rows, Time time) {
  for (int i = 0; i < steps; ++i) {
    const int32_t rows = first_rows + i % period;
    m.observe(int64_t(time(rows)), 1, 0, rows);
  }
}

double relative(const StepCostModel& m, int32_t rows) { return m.draft_rows_time(1, rows) / m.plain_time(1); }

TEST(StepCost, ARowIsPricedAgainstThePlainStepOfItsOwnStretch) {
  StepCostModel m;
  EXPECT_EQ(m.draft_rows_time(1, 3), 0.0);
  EXPECT_EQ(m.plain_time(1), -1.0);
  run(m, 200, 5, 0, [](int32_t r) { return (10 + r) * kMs; });
  EXPECT_NEAR(m.plain_time(1), 10 * kMs, 0.05 * kMs);
  EXPECT_NEAR(m.draft_rows_time(1, 2), 2 * kMs, 0.05 * kMs);
  // The machine slows by half while every step drafts (1-4 rows, no plain step): the last plain
  // step measured says 10 ms, and 2 rows' step of 18 ms less that would price them at 0.8 of a
  // step. Priced against the stretch's own plain step they stay near 0.2.
  run(m, 64, 4, 1, [](int32_t r) { return 1.5 * (10 + r) * kMs; });
  EXPECT_EQ(m.decode_time(1), 10 * kMs);
  EXPECT_LT(relative(m, 2), 0.3);
  EXPECT_GT(relative(m, 2), 0.15);
  run(m, 200, 4, 1, [](int32_t r) { return 1.5 * (10 + r) * kMs; });
  EXPECT_NEAR(relative(m, 2), 0.2, 0.02);
  EXPECT_NEAR(m.plain_time(1), 15 * kMs, 0.5 * kMs);
}

// Rows from the third on cost 5 ms more (a larger tile of the output head): the line alone would
// spread that over every count and put the plain step below its measured 10 ms.
TEST(StepCost, ACountThatCostsMoreKeepsItsPrice) {
  StepCostModel m;
  auto time = [](int32_t r) { return (10 + r + (r >= 3 ? 5 : 0)) * kMs; };
  run(m, 2000, 5, 0, time);
  EXPECT_NEAR(m.plain_time(1), 10 * kMs, 0.3 * kMs);
  EXPECT_NEAR(m.draft_rows_time(1, 1), 1 * kMs, 0.3 * kMs);
  EXPECT_NEAR(m.draft_rows_time(1, 2), 2 * kMs, 0.3 * kMs);
  EXPECT_NEAR(m.draft_rows_time(1, 3), 8 * kMs, 0.5 * kMs);
  EXPECT_NEAR(m.draft_rows_time(1, 4), 9 * kMs, 0.5 * kMs);
}

TEST(StepCost, AStolenStepMovesThePricesOnlySoFar) {
  StepCostModel m;
  run(m, 200, 5, 0, [](int32_t r) { return (10 + r) * kMs; });
  m.observe(int64_t(200 * kMs), 1, 0, 4);  // 14 ms expected: counted as 28
  EXPECT_LT(relative(m, 1), 0.2);
  EXPECT_GT(relative(m, 1), 0.05);
}

// Without a fit at that decode count (rows never varied there), a row costs the average excess
// over the plain step of every step with drafts.
TEST(StepCost, WithoutAFitARowCostsTheAverageExcess) {
  StepCostModel m;
  m.observe(int64_t(10 * kMs), 4, 0);     // four decodes, plain
  m.observe(int64_t(14 * kMs), 4, 0, 2);  // two rows: 2 ms each
  EXPECT_EQ(m.plain_time(4), 10 * kMs);
  EXPECT_DOUBLE_EQ(m.draft_row_ns(), 2 * kMs);
  EXPECT_DOUBLE_EQ(m.draft_rows_time(4, 3), 6 * kMs);
  EXPECT_DOUBLE_EQ(m.draft_rows_time(1, 3), 6 * kMs);  // a count never seen
}

}  // namespace
}  // namespace kvasir::sched
