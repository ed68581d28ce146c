#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "sample/sampler.h"

using namespace kvasir;

TEST(Sampler, ArgmaxLowestIdWinsTies) {
  std::vector<float> l = {1.f, 3.f, 2.f, 3.f};
  EXPECT_EQ(argmax(l), 1);
  Sampler s({.temperature = 0.f});
  EXPECT_EQ(s.sample(l, {}), 1);
}

TEST(Sampler, SameSeedSameTokens) {
  std::vector<float> l(100);
  for (int i = 0; i < 100; ++i) l[size_t(i)] = std::sin(float(i));
  auto draw = [&](uint64_t seed) {
    Sampler s({.temperature = 1.5f, .top_k = 0, .top_p = 1.f, .min_p = 0.f, .seed = seed});
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) out.push_back(s.sample(l, {}));
    return out;
  };
  EXPECT_EQ(draw(7), draw(7));
  EXPECT_NE(draw(7), draw(8));
}

TEST(Sampler, TopKOneIsGreedy) {
  std::vector<float> l = {0.1f, 0.5f, 0.4f, 0.45f};
  Sampler s({.temperature = 5.f, .top_k = 1, .top_p = 1.f, .min_p = 0.f, .seed = 3});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(l, {}), 1);
}

TEST(Sampler, TopKRestrictsSupport) {
  std::vector<float> l = {0.f, 1.f, 2.f, 3.f, 4.f};
  Sampler s({.temperature = 10.f, .top_k = 2, .top_p = 1.f, .min_p = 0.f, .seed = 1});
  for (int i = 0; i < 200; ++i) {
    const int32_t t = s.sample(l, {});
    EXPECT_TRUE(t == 3 || t == 4) << t;
  }
}

TEST(Sampler, TopPKeepsTheNucleus) {
  // Probabilities ~ {0.6, 0.3, 0.1}: top_p 0.8 keeps the first two only.
  std::vector<float> l = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  Sampler s({.temperature = 1.f, .top_k = 0, .top_p = 0.8f, .min_p = 0.f, .seed = 5});
  std::map<int32_t, int> counts;
  for (int i = 0; i < 3000; ++i) counts[s.sample(l, {})]++;
  EXPECT_EQ(counts[2], 0);
  EXPECT_NEAR(counts[0] / 3000.0, 2.0 / 3.0, 0.04);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.2f), std::log(0.01f)};
  Sampler s({.temperature = 1.f, .top_k = 0, .top_p = 1.f, .min_p = 0.1f, .seed = 9});
  for (int i = 0; i < 2000; ++i) EXPECT_NE(s.sample(l, {}), 3);
}

TEST(Sampler, TemperatureMatchesDistribution) {
  std::vector<float> l = {0.f, 1.f};
  Sampler s({.temperature = 2.f, .top_k = 0, .top_p = 1.f, .min_p = 0.f, .seed = 11});
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ones += s.sample(l, {}) == 1;
  const double expected = 1.0 / (1.0 + std::exp(-0.5));  // softmax of {0, 0.5}
  EXPECT_NEAR(ones / double(n), expected, 0.015);
}

TEST(Sampler, PenaltiesChangeGreedyChoice) {
  std::vector<float> l = {2.f, 1.9f, 0.f};
  std::vector<int32_t> history = {0};
  Sampler rep({.temperature = 0.f, .repetition_penalty = 1.1f});
  EXPECT_EQ(rep.sample(l, history), 1);  // 2/1.1 = 1.82 < 1.9
  Sampler pres({.temperature = 0.f, .presence_penalty = 0.2f});
  EXPECT_EQ(pres.sample(l, history), 1);
  Sampler freq({.temperature = 0.f, .frequency_penalty = 0.04f});
  EXPECT_EQ(freq.sample(l, std::vector<int32_t>{0, 0}), 0);  // 2 - 0.08 = 1.92 > 1.9
  EXPECT_EQ(freq.sample(l, std::vector<int32_t>{0, 0, 0}), 1);  // 2 - 0.12 = 1.88
  Sampler none({.temperature = 0.f});
  EXPECT_EQ(none.sample(l, history), 0);
}
