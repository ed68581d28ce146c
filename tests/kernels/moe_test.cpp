// Mixture-of-experts routing: the kernel equals its scalar twin bitwise (random logits, exact
// ties, a single dominant expert, k = n), follows the stated tie rule, and the grouping puts
// every slot exactly once under its expert in ascending slot order.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/moe.h"

using namespace kvasir::kernels;

namespace {

void expect_twins_agree(const std::vector<float>& logits, int64_t k, bool renorm) {
  const int64_t n = int64_t(logits.size());
  std::vector<int32_t> ids(static_cast<size_t>(k)), ids_ref(static_cast<size_t>(k));
  std::vector<float> w(static_cast<size_t>(k)), w_ref(static_cast<size_t>(k)), scratch(static_cast<size_t>(n));
  moe_route(logits.data(), n, k, renorm, ids.data(), w.data(), scratch.data());
  moe_route_ref(logits.data(), n, k, renorm, ids_ref.data(), w_ref.data());
  EXPECT_EQ(ids, ids_ref);
  EXPECT_EQ(w, w_ref);  // bitwise: same floats, same order of operations
  if (renorm) {
    float sum = 0;
    for (float x : w) sum += x;
    EXPECT_NEAR(sum, 1.f, 1e-6f);
  }
  for (int64_t r = 1; r < k; ++r) EXPECT_GE(w[size_t(r - 1)], w[size_t(r)]);
}

}  // namespace

TEST(MoeRoute, EqualsScalarTwinOnRandomLogits) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 3.f);
  for (int64_t n : {2, 8, 60, 128, 256}) {
    for (int64_t k : {int64_t(1), int64_t(2), std::min<int64_t>(8, n), n}) {
      for (int trial = 0; trial < 20; ++trial) {
        std::vector<float> logits(static_cast<size_t>(n));
        for (auto& x : logits) x = nd(rng);
        expect_twins_agree(logits, k, trial % 2 == 0);
      }
    }
  }
}

TEST(MoeRoute, TiesGoToTheLowerExpertId) {
  // Logits drawn from a few values so that many experts tie exactly.
  std::mt19937 rng(9);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> logits(16);
    for (auto& x : logits) x = float(rng() % 3);
    expect_twins_agree(logits, 4, true);
  }
  const std::vector<float> flat(8, 0.5f);
  std::vector<int32_t> ids(3);
  std::vector<float> w(3), scratch(8);
  moe_route(flat.data(), 8, 3, true, ids.data(), w.data(), scratch.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1, 2}));
  for (float x : w) EXPECT_FLOAT_EQ(x, 1.f / 3.f);
}

TEST(MoeRoute, DominantExpertAndInPlaceScratch) {
  std::vector<float> logits = {0.f, -1.f, 80.f, 3.f, -200.f, 3.f};
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  moe_route(logits.data(), 6, 2, false, ids.data(), w.data(), logits.data());  // scratch = logits
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 3);  // ties 3 vs 5: the lower id
  EXPECT_FLOAT_EQ(w[0], 1.f);
  EXPECT_GT(w[1], 0.f);
  EXPECT_LT(w[1], 1e-30f);
}

TEST(MoeGroup, EverySlotOnceUnderItsExpertInOrder) {
  std::mt19937 rng(3);
  for (int64_t n_experts : {1, 4, 128}) {
    for (int64_t n_slots : {1, 7, 512}) {
      std::vector<int32_t> ids(static_cast<size_t>(n_slots));
      for (auto& e : ids) e = int32_t(rng() % uint32_t(n_experts));
      std::vector<int64_t> off(size_t(n_experts) + 1);
      std::vector<int32_t> order(static_cast<size_t>(n_slots)), pos(static_cast<size_t>(n_slots));
      moe_group(ids.data(), n_slots, n_experts, off.data(), order.data(), pos.data());
      ASSERT_EQ(off[0], 0);
      ASSERT_EQ(off[size_t(n_experts)], n_slots);
      std::vector<int> seen(size_t(n_slots), 0);
      for (int64_t e = 0; e < n_experts; ++e) {
        ASSERT_LE(off[size_t(e)], off[size_t(e) + 1]);
        for (int64_t p = off[size_t(e)]; p < off[size_t(e) + 1]; ++p) {
          const int32_t s = order[size_t(p)];
          EXPECT_EQ(ids[size_t(s)], e);
          EXPECT_EQ(pos[size_t(s)], p);
          if (p > off[size_t(e)]) {
            EXPECT_LT(order[size_t(p) - 1], s);
          }
          ++seen[size_t(s)];
        }
      }
      for (int c : seen) EXPECT_EQ(c, 1);
    }
  }
}
