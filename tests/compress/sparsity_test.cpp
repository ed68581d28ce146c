// The pruning masks against brute force: exactly the stated number of weights goes, and only the
// lowest-scoring ones (ties by position), per row, per N:M group and under a shared threshold.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "compress/sparsity.h"

namespace kvasir::compress {
namespace {

std::vector<float> random_weights(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> w(n);
  for (auto& v : w) v = d(rng);
  return w;
}

// Every zeroed weight scores at most every kept one.
void expect_lowest_gone(std::span<const float> before, std::span<const float> after, std::span<const float> scores) {
  float max_gone = -1, min_kept = 1e30f;
  for (size_t i = 0; i < before.size(); ++i) {
    if (after[i] == 0.f) max_gone = std::max(max_gone, scores[i]);
    else {
      min_kept = std::min(min_kept, scores[i]);
      EXPECT_EQ(after[i], before[i]);
    }
  }
  EXPECT_LE(max_gone, min_kept);
}

TEST(Sparsity, PerRowZeroesExactlyTheLowestScores) {
  const int64_t n_in = 96, rows = 7;
  const auto w0 = random_weights(size_t(n_in * rows), 1);
  for (double s : {0.0, 0.25, 0.5, 0.9}) {
    auto w = w0;
    std::vector<float> sc(w.size());
    weight_scores(w, n_in, {}, sc);
    const int64_t zeroed = zero_lowest_per_row(w, sc, n_in, s);
    EXPECT_EQ(zeroed, rows * std::llround(s * n_in));
    for (int64_t r = 0; r < rows; ++r) {
      const auto row = std::span<const float>(w).subspan(size_t(r * n_in), size_t(n_in));
      EXPECT_EQ(count_zeros(row), std::llround(s * n_in)) << "row " << r << " at " << s;
      expect_lowest_gone(std::span<const float>(w0).subspan(size_t(r * n_in), size_t(n_in)), row,
                         std::span<const float>(sc).subspan(size_t(r * n_in), size_t(n_in)));
    }
  }
}

TEST(Sparsity, WandaKeepsTheWeightsOfLoudColumns) {
  const int64_t n_in = 8, rows = 4;
  auto w = random_weights(size_t(n_in * rows), 2);
  for (auto& v : w) v = std::fabs(v) + 0.5f;  // nonzero, comparable magnitudes
  w[3] = 0.01f;                               // the smallest weight of row 0 ...
  std::vector<float> col(size_t(n_in), 1.f);
  col[3] = 1e6f;                              // ... reads a column 1000x louder (norm)
  std::vector<float> mag(w.size()), wanda(w.size());
  weight_scores(w, n_in, {}, mag);
  weight_scores(w, n_in, col, wanda);
  auto by_mag = w, by_wanda = w;
  zero_lowest_per_row(by_mag, mag, n_in, 0.5);
  zero_lowest_per_row(by_wanda, wanda, n_in, 0.5);
  EXPECT_EQ(by_mag[3], 0.f);
  EXPECT_NE(by_wanda[3], 0.f);
  EXPECT_FLOAT_EQ(wanda[3], 0.01f * 1000.f);
}

TEST(Sparsity, NOfMKeepsTheTopNOfEveryGroup) {
  const int64_t n_in = 64, rows = 5;
  const auto w0 = random_weights(size_t(n_in * rows), 3);
  for (auto [n, m] : {std::pair{2, 4}, std::pair{1, 4}, std::pair{4, 8}}) {
    auto w = w0;
    std::vector<float> sc(w.size());
    weight_scores(w, n_in, {}, sc);
    EXPECT_FALSE(has_n_of_m(w, n_in, n, m));
    EXPECT_EQ(zero_n_of_m(w, sc, n, m), int64_t(w.size()) / m * (m - n));
    EXPECT_TRUE(has_n_of_m(w, n_in, n, m));
    for (size_t g = 0; g < w.size(); g += size_t(m))
      expect_lowest_gone(std::span<const float>(w0).subspan(g, size_t(m)), std::span<const float>(w).subspan(g, size_t(m)),
                         std::span<const float>(sc).subspan(g, size_t(m)));
  }
  std::vector<float> three = {1, 2, 3, 0, 1, 0, 0, 0};
  EXPECT_FALSE(has_n_of_m(three, 8, 2, 4));
  EXPECT_TRUE(has_n_of_m(three, 8, 3, 4));
}

// A threshold shared by several matrices, with many equal scores: exactly k go, in visiting order.
TEST(Sparsity, ASharedThresholdCountsTiesExactly) {
  std::vector<float> a = {1, 1, 1, 1, 5, 6}, b = {1, 1, 9, 1, 1, 2};
  std::vector<float> all(a);
  all.insert(all.end(), b.begin(), b.end());
  for (int64_t k : {0, 3, 6, 8, 9, 12}) {
    auto x = a, y = b;
    Threshold t = lowest_k_threshold(all, k);
    const int64_t zeroed = zero_below(x, a, t) + zero_below(y, b, t);
    EXPECT_EQ(zeroed, k);
    EXPECT_EQ(t.ties_to_zero, 0);
    EXPECT_EQ(count_zeros(x) + count_zeros(y), k);
  }
}

}  // namespace
}  // namespace kvasir::compress
