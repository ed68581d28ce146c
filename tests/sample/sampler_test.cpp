#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "sample/sampler.h"

using namespace kvasir;

TEST(Sampler, ArgmaxLowestIdWinsTies) {
  std::vector<float> l = {1.f, 3.f, 2.f, 3.f};
  EXPECT_EQ(argmax(l), 1);
  Sampler s({.temperature = 0.f});
  EXPECT_EQ(s.sample(l, {}), 1);
}

// The blocked argmax against its scalar twin: lengths around the 16-lane blocks, ties (the lowest
// id wins), NaN (ranks like -inf), infinities, and rows with nothing possible (id 0).
TEST(Sampler, ArgmaxMatchesItsScalarTwin) {
  const auto twin = [](const std::vector<float>& l) {
    int32_t best = 0;
    float bv = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < l.size(); ++i)
      if (!std::isnan(l[i]) && l[i] > bv) bv = l[i], best = int32_t(i);
    return best;
  };
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> coarse(-3, 3), kind(0, 19);
  for (size_t n : {1u, 2u, 15u, 16u, 17u, 31u, 32u, 33u, 100u, 1000u, 4099u}) {
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<float> l(n);
      for (float& v : l) {
        const int k = kind(rng);
        v = k == 0 ? nan : k == 1 ? -inf : k == 2 && trial % 7 == 0 ? inf : float(coarse(rng));  // many ties
      }
      if (trial % 13 == 0) std::fill(l.begin(), l.end(), trial % 2 ? nan : -inf);
      if (trial % 17 == 0)
        for (size_t i = 0; i < n; ++i) l[i] = i % 2 ? nan : -inf;
      ASSERT_EQ(argmax(l), twin(l)) << "n " << n << " trial " << trial;
    }
  }
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

// The reference twin of Sampler::sample: the contract of sampler.h written out the slow way (the
// whole vocabulary sorted every call). The fast sampler must pick exactly the same token for the
// same logits, history and seed.
namespace {

struct C {
  int32_t id;
  float logit;
};

// Every processor applied, the slow way: survivors c[0..keep) in sampling order, their
// softmax's normalizer (summed in id order, as the contract says).
struct RefDist {
  std::vector<C> c;
  size_t keep = 0;
  float mx = 0;
  double sum = 0;
  float temperature = 1;
  bool greedy = false;
  int32_t best = 0;
  double weight(const C& x) const { return std::exp(double(x.logit - mx) / temperature); }
};

RefDist reference_process(const SamplingParams& p, std::vector<float> l, const std::vector<int32_t>& history) {
  const size_t n = p.penalty_last_n < 0 ? history.size() : std::min(history.size(), size_t(p.penalty_last_n));
  std::map<int32_t, int> counts;
  for (size_t i = history.size() - n; i < history.size(); ++i) counts[history[i]]++;
  if (p.repetition_penalty != 1.f || p.presence_penalty != 0.f || p.frequency_penalty != 0.f)
    for (const auto& [id, count] : counts) {
      float& x = l[size_t(id)];
      if (p.repetition_penalty != 1.f) x = x > 0 ? x / p.repetition_penalty : x * p.repetition_penalty;
      x -= p.presence_penalty + p.frequency_penalty * float(count);
    }
  RefDist d;
  d.best = argmax(l);
  d.temperature = p.temperature;
  if (p.temperature <= 0.f) return d.greedy = true, d;
  std::vector<C>& c = d.c;
  for (size_t i = 0; i < l.size(); ++i) c.push_back({int32_t(i), l[i]});
  std::sort(c.begin(), c.end(), [](const C& a, const C& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); });
  const float mx = c[0].logit;
  if (mx == -std::numeric_limits<float>::infinity()) return d.greedy = true, d;
  d.mx = mx;
  size_t keep = c.size();
  if (p.top_k > 0 && size_t(p.top_k) < keep) keep = size_t(p.top_k);
  auto sum_by_id = [&](size_t k, double t) {
    std::vector<C> s(c.begin(), c.begin() + ptrdiff_t(k));
    std::sort(s.begin(), s.end(), [](const C& a, const C& b) { return a.id < b.id; });
    double sum = 0;
    for (const C& x : s) sum += std::exp(double(x.logit - mx) / t);
    return sum;
  };
  if (p.top_p < 1.f) {
    const double total = sum_by_id(keep, 1.0);
    double cum = 0;
    for (size_t i = 0; i < keep; ++i) {
      cum += std::exp(double(c[i].logit - mx)) / total;
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.f) {
    size_t k = 1;
    while (k < keep && double(c[k].logit - mx) >= std::log(double(p.min_p))) ++k;
    keep = k;
  }
  d.keep = keep;
  d.sum = sum_by_id(keep, p.temperature);
  return d;
}

int32_t reference_sample(const SamplingParams& p, std::mt19937_64& rng, std::vector<float> l,
                         const std::vector<int32_t>& history) {
  const RefDist d = reference_process(p, std::move(l), history);
  if (d.greedy) return d.best;
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng) * d.sum;
  double acc = 0;
  for (size_t i = 0; i < d.keep; ++i) {
    acc += d.weight(d.c[i]);
    if (u < acc) return d.c[i].id;
  }
  return d.c[d.keep - 1].id;
}

// p(id) for every id, from the reference.
std::vector<double> reference_probs(const RefDist& d, size_t vocab) {
  std::vector<double> out(vocab, 0.0);
  if (d.greedy) {
    out[size_t(d.best)] = 1.0;
    return out;
  }
  for (size_t i = 0; i < d.keep; ++i)
    if (d.c[i].logit != -std::numeric_limits<float>::infinity()) out[size_t(d.c[i].id)] = d.weight(d.c[i]) / d.sum;
  return out;
}

}  // namespace

// Random vocabularies (peaked like a language model, flat, with ties and masked -inf entries,
// up to Gemma 3's 262,144 tokens) and random parameters: the fast sampler and the reference twin
// choose the same token every time, with and without penalties.
TEST(Sampler, MatchesReferenceTwin) {
  std::mt19937 gen(2024);
  int checked = 0;
  for (int trial = 0; trial < 240; ++trial) {
    const size_t vocab = trial % 40 == 0 ? 262144 : size_t(std::uniform_int_distribution<int>(2, 3000)(gen));
    std::vector<float> l(vocab);
    const int shape = trial % 4;
    std::normal_distribution<float> g(0.f, shape == 0 ? 0.3f : shape == 1 ? 3.f : 8.f);
    for (auto& x : l) x = g(gen);
    if (shape == 2)  // a few dominant tokens, like a confident model
      for (int i = 0; i < 3; ++i) l[gen() % vocab] += 25.f;
    if (shape == 3) {  // ties and masked tokens
      for (auto& x : l) x = std::round(x);
      for (size_t i = 0; i < vocab / 5; ++i) l[gen() % vocab] = -std::numeric_limits<float>::infinity();
    }
    SamplingParams p;
    p.temperature = std::uniform_real_distribution<float>(0.1f, 2.5f)(gen);
    p.top_k = std::array<int, 4>{0, 1, 40, 2000}[gen() % 4];
    p.top_p = std::array<float, 4>{1.f, 0.95f, 0.5f, 0.999f}[gen() % 4];
    p.min_p = std::array<float, 3>{0.f, 0.05f, 0.3f}[gen() % 3];
    if (trial % 3 == 0) p.repetition_penalty = 1.3f, p.frequency_penalty = 0.2f;
    p.seed = gen();
    std::vector<int32_t> history;
    for (int i = 0; i < 20; ++i) history.push_back(int32_t(gen() % vocab));
    Sampler fast(p);
    std::mt19937_64 rng(p.seed);
    const int draws = vocab > 100000 ? 3 : 25;
    for (int d = 0; d < draws; ++d) {
      const int32_t ref = reference_sample(p, rng, l, history);
      ASSERT_EQ(fast.sample(l, history), ref) << "trial " << trial << " vocab " << vocab << " draw " << d << " T "
                                              << p.temperature << " k " << p.top_k << " p " << p.top_p << " min_p " << p.min_p;
      ++checked;
    }
  }
  EXPECT_GT(checked, 4000);
}

TEST(Sampler, NothingPossibleFallsBackToLowestId) {
  std::vector<float> l(10, -std::numeric_limits<float>::infinity());
  Sampler s({.temperature = 1.f, .top_k = 0, .top_p = 0.9f, .min_p = 0.f, .seed = 1});
  EXPECT_EQ(s.sample(l, {}), 0);
  l[7] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(s.sample(l, {}), 0);  // NaN ranks like -inf
  l[3] = 1.f;
  EXPECT_EQ(s.sample(l, {}), 3);
}

// distribution() is the processed distribution sample() draws from: for random vocabularies and
// parameters, every token's probability equals the reference's (to 1e-12 relative), the
// probabilities sum to 1, cut tokens are exactly 0, and draw() after distribution() is sample().
TEST(Sampler, DistributionIsWhatSamplingDrawsFrom) {
  std::mt19937 gen(77);
  for (int trial = 0; trial < 120; ++trial) {
    const size_t vocab = size_t(std::uniform_int_distribution<int>(2, 2000)(gen));
    std::vector<float> l(vocab);
    std::normal_distribution<float> g(0.f, trial % 2 ? 1.f : 6.f);
    for (auto& x : l) x = g(gen);
    if (trial % 5 == 0)
      for (size_t i = 0; i < vocab / 4; ++i) l[gen() % vocab] = -std::numeric_limits<float>::infinity();
    SamplingParams p;
    p.temperature = std::array<float, 4>{0.f, 0.3f, 1.f, 2.f}[gen() % 4];
    p.top_k = std::array<int, 3>{0, 5, 100}[gen() % 3];
    p.top_p = std::array<float, 3>{1.f, 0.9f, 0.5f}[gen() % 3];
    p.min_p = std::array<float, 3>{0.f, 0.05f, 0.2f}[gen() % 3];
    if (trial % 3 == 0) p.repetition_penalty = 1.3f, p.presence_penalty = 0.5f;
    p.seed = gen();
    std::vector<int32_t> history;
    for (int i = 0; i < 10; ++i) history.push_back(int32_t(gen() % vocab));
    Sampler a(p), b(p);
    const std::vector<double> ref = reference_probs(reference_process(p, l, history), vocab);
    for (int step = 0; step < 5; ++step) {
      Distribution d = a.distribution(l, history);
      double total = 0;
      for (size_t i = 0; i < vocab; ++i) {
        const double got = d.prob(int32_t(i));
        total += got;
        if (ref[i] == 0) {
          ASSERT_EQ(got, 0.0) << "trial " << trial << " id " << i;
        } else {
          ASSERT_NEAR(got, ref[i], 1e-12 * std::max(1.0, ref[i])) << "trial " << trial << " id " << i;
        }
      }
      EXPECT_NEAR(total, 1.0, 1e-9);
      EXPECT_EQ(a.draw(d), b.sample(l, history)) << "trial " << trial;  // same RNG use, same token
    }
  }
}

// Draws follow prob(): chi-square of 40,000 draws against the probabilities over 6 tokens.
TEST(Sampler, DrawsFollowTheDistribution) {
  std::vector<float> l = {2.f, 1.5f, 1.f, 0.f, -1.f, -8.f};
  Sampler s({.temperature = 0.9f, .top_k = 5, .top_p = 0.97f, .min_p = 0.f, .seed = 3});
  std::vector<int> counts(l.size(), 0);
  const int n = 40000;
  std::vector<double> prob(l.size());
  for (int i = 0; i < n; ++i) {
    Distribution d = s.distribution(l, {});
    if (i == 0)
      for (size_t k = 0; k < l.size(); ++k) prob[k] = d.prob(int32_t(k));
    counts[size_t(s.draw(d))]++;
  }
  double chi2 = 0;
  int dof = -1;
  for (size_t k = 0; k < l.size(); ++k) {
    if (prob[k] == 0) {
      EXPECT_EQ(counts[k], 0);
      continue;
    }
    const double e = prob[k] * n;
    chi2 += (counts[k] - e) * (counts[k] - e) / e;
    ++dof;
  }
  EXPECT_LT(chi2, 20.5);  // p < 0.001 at 4 degrees of freedom is 18.47; 20.5 at dof <= 5
}

// Position-keyed draws: draw_at depends only on (seed, position) and the distribution, not on
// what was drawn before; over positions its tokens follow the distribution (chi-square of 40,000
// positions over 6 tokens, p < 0.001 at 5 degrees of freedom: 20.5); another seed gives another
// sequence.
TEST(Sampler, PositionDrawsAreKeyedAndFollowTheDistribution) {
  std::vector<float> l = {2.f, 1.5f, 1.f, 0.f, -1.f, -3.f};
  const SamplingParams params{.temperature = 0.9f, .top_k = 0, .top_p = 1.f, .min_p = 0.f, .seed = 3};
  Sampler a(params), b(params), other({.temperature = 0.9f, .top_k = 0, .top_p = 1.f, .min_p = 0.f, .seed = 4});
  const int n = 40000;
  std::vector<int> counts(l.size(), 0);
  std::vector<double> prob(l.size());
  int differ = 0;
  for (int i = 0; i < n; ++i) {
    Distribution d = a.distribution(l, {});
    if (i == 0)
      for (size_t k = 0; k < l.size(); ++k) prob[k] = d.prob(int32_t(k));
    const int32_t t = a.draw_at(d, i);
    counts[size_t(t)]++;
    if (i % 7 == 0) (void)a.draw(d);  // the stream moves; position draws do not
    Distribution e = b.distribution(l, {});
    EXPECT_EQ(b.draw_at(e, i), t);
    Distribution f = other.distribution(l, {});
    differ += other.draw_at(f, i) != t;
  }
  Distribution d = b.distribution(l, {});
  EXPECT_EQ(b.draw_at(d, 12345), a.draw_at(d, 12345));
  double chi2 = 0;
  for (size_t k = 0; k < l.size(); ++k) chi2 += (counts[k] - prob[k] * n) * (counts[k] - prob[k] * n) / (prob[k] * n);
  EXPECT_LT(chi2, 20.5);
  EXPECT_GT(differ, n / 4);
  const double u = position_uniform(3, 17);
  EXPECT_GE(u, 0.0);
  EXPECT_LT(u, 1.0);
  EXPECT_EQ(u, position_uniform(3, 17));
}
