// The rejection rule is lossless: drafts drawn from q, verified against p, give tokens distributed
// as p, for random pairs over several vocabulary sizes (drafts with no mass where p has mass and
// the reverse included). Statistic: Pearson's chi-square of 60,000 seeded draws against p over
// the tokens p can emit, compared with the critical value at p = 1e-4 (Wilson-Hilferty). The same
// test run on a planted bug (rejections redrawn from p instead of the residual) must exceed it.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "spec/ngram.h"
#include "spec/verify.h"

namespace kvasir::spec {
namespace {

std::vector<double> random_dist(std::mt19937_64& rng, size_t n, double zero_share) {
  std::vector<double> d(n);
  std::uniform_real_distribution<double> u(0, 1);
  double sum = 0;
  for (auto& x : d) {
    x = u(rng) < zero_share ? 0.0 : std::pow(u(rng), 3.0);  // skewed, some exact zeros
    sum += x;
  }
  if (sum == 0) d[0] = sum = 1;
  for (auto& x : d) x /= sum;
  return d;
}

int32_t draw(const std::vector<double>& d, double u) {
  double acc = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    acc += d[i];
    if (u < acc) return int32_t(i);
  }
  for (size_t i = d.size(); i-- > 0;)
    if (d[i] > 0) return int32_t(i);
  return 0;
}

double chi2_critical(int dof) {  // P(chi2 > x) = 1e-4
  const double z = 3.719, k = double(dof);
  return k * std::pow(1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k)), 3);
}

// The chi-square statistic of `draws` verified tokens against p, and its degrees of freedom.
template <typename Verify>
std::pair<double, int> chi_square(const std::vector<double>& p, const std::vector<double>& q, int draws,
                                  uint64_t seed, Verify verify_fn) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<int> counts(p.size(), 0);
  for (int i = 0; i < draws; ++i) {
    const int32_t x = draw(q, u(rng));
    counts[size_t(verify_fn(p, q, x, u(rng), u(rng)))]++;
  }
  double chi2 = 0;
  int cells = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "a token the target cannot emit came out";
      continue;
    }
    const double e = p[i] * draws;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ++cells;
  }
  return {chi2, cells - 1};
}

int32_t lossless(const std::vector<double>& p, const std::vector<double>& q, int32_t x, double ua, double ur) {
  return verify(p, q, x, ua, ur).token;
}

// The planted bug: a rejected draft is replaced by a plain draw from the target.
int32_t broken(const std::vector<double>& p, const std::vector<double>& q, int32_t x, double ua, double ur) {
  if (accept_draft(p[size_t(x)], q[size_t(x)], ua)) return x;
  return draw(p, ur);
}

TEST(SpecVerify, RejectionSamplingReproducesTheTarget) {
  std::mt19937_64 rng(2025);
  const int kDraws = 60000;
  int bug_caught = 0, cases = 0;
  for (size_t vocab : {2u, 5u, 17u, 64u}) {
    for (int pair = 0; pair < 3; ++pair) {
      // Zeros in q where p has mass, and zeros in p where q has mass.
      const std::vector<double> p = random_dist(rng, vocab, pair == 1 ? 0.3 : 0.0);
      const std::vector<double> q = random_dist(rng, vocab, pair == 2 ? 0.4 : 0.1);
      const auto [chi2, dof] = chi_square(p, q, kDraws, rng(), lossless);
      if (dof < 1) continue;
      ++cases;
      EXPECT_LT(chi2, chi2_critical(dof)) << "vocab " << vocab << " pair " << pair;
      const auto [bad, bad_dof] = chi_square(p, q, kDraws, rng(), broken);
      bug_caught += bad > chi2_critical(bad_dof);
    }
  }
  EXPECT_GE(cases, 10);
  EXPECT_EQ(bug_caught, cases);  // the test can fail: the planted bug trips it in every case
}

TEST(SpecVerify, PointMassDraftsAndGreedy) {
  // A deterministic proposer (q one-hot at x): accepted with probability p(x), else p without x.
  const std::vector<double> p = {0.5, 0.3, 0.2};
  const std::vector<double> q = {0.0, 1.0, 0.0};
  const auto [chi2, dof] = chi_square(p, q, 60000, 9, lossless);
  EXPECT_LT(chi2, chi2_critical(dof));
  EXPECT_TRUE(verify(p, q, 1, 0.29, 0.0).accepted);
  EXPECT_FALSE(verify(p, q, 1, 0.31, 0.0).accepted);
  // The residual never gives back the rejected point-mass draft.
  for (double u = 0; u < 1; u += 0.01) EXPECT_NE(sample_residual(p, q, u), 1);
  // Greedy: p is one-hot at its argmax, so only the argmax is accepted, and the residual is it.
  const std::vector<double> g = {0, 0, 1};
  EXPECT_FALSE(verify(g, q, 1, 0.0, 0.5).accepted);
  EXPECT_EQ(verify(g, q, 1, 0.0, 0.5).token, 2);
  EXPECT_TRUE(verify(g, std::vector<double>{0, 0, 1}, 2, 0.999, 0.5).accepted);
}

TEST(SpecNgram, ProposesWhatFollowedTheLatestLongestMatch) {
  const std::vector<int32_t> t = {1, 2, 3, 4, 9, 2, 3, 7, 8, 5, 1, 2, 3};
  // Suffix (1,2,3) occurs at 0: proposes 4, 9, 2.
  EXPECT_EQ(propose_ngram(t, 3), (std::vector<int32_t>{4, 9, 2}));
  // Only the suffix (2,3) matching: the latest earlier one (at 5) is followed by 7, 8.
  const std::vector<int32_t> u = {2, 3, 4, 2, 3, 7, 8, 6, 2, 3};
  EXPECT_EQ(propose_ngram(u, 2), (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(propose_ngram(u, 2, {.min_n = 3}), std::vector<int32_t>{});  // no 3-gram matches
  // k limits the draft; the draft stops at the end of the text.
  EXPECT_EQ(propose_ngram(std::vector<int32_t>{5, 6, 5}, 4), (std::vector<int32_t>{6, 5}));
  EXPECT_TRUE(propose_ngram(std::vector<int32_t>{1, 2, 3}, 4).empty());
  EXPECT_TRUE(propose_ngram(std::vector<int32_t>{1}, 4).empty());
  EXPECT_TRUE(propose_ngram(t, 0).empty());
}

}  // namespace
}  // namespace kvasir::spec
