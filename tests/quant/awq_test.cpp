// AWQ's scale search (quant/awq.h) on a matrix whose input has a few large channels (what AWQ
// is for): the searched scales cut the output error of round-to-nearest well below α = 0's, the
// error it reports is the directly computed one, and with uninformative magnitudes (all equal)
// there is nothing to gain: the check can fail.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/quant/quant.h"
#include "quant/awq.h"

using namespace kvasir;
using namespace kvasir::quant;

namespace {

struct Problem {
  int64_t n = 256, n_out = 96, rows = 256;
  std::vector<float> w, x, mean_abs;
  Problem() {
    std::mt19937 rng(21);
    std::normal_distribution<float> normal(0.f, 1.f);
    w.resize(size_t(n_out * n));
    for (auto& v : w) v = 0.05f * normal(rng);
    x.resize(size_t(rows * n));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j) x[size_t(r * n + j)] = normal(rng) * (j % 37 == 3 ? 20.f : 1.f);  // 7 salient channels
    mean_abs.assign(size_t(n), 0.f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j) mean_abs[size_t(j)] += std::fabs(x[size_t(r * n + j)]) / float(rows);
  }
};

double direct_rtn_error(const Problem& p, DType t) {
  std::vector<uint8_t> q(row_bytes(t, p.n));
  std::vector<float> back(static_cast<size_t>(p.n));
  double total = 0;
  for (int64_t o = 0; o < p.n_out; ++o) {
    kernels::quant_traits(t)->quantize_row(p.w.data() + o * p.n, q.data(), p.n);
    kernels::quant_traits(t)->dequantize_row(q.data(), back.data(), p.n);
    for (int64_t r = 0; r < p.rows; ++r) {
      double y = 0;
      for (int64_t j = 0; j < p.n; ++j) y += double(back[size_t(j)] - p.w[size_t(o * p.n + j)]) * p.x[size_t(r * p.n + j)];
      total += y * y;
    }
  }
  return total;
}

}  // namespace

TEST(Awq, ScalesCutTheErrorOfRoundToNearest) {
  const Problem p;
  ThreadPool pool(2);
  for (DType t : {DType::Q4_0, DType::Q3_K, DType::Q2_K}) {
    const AwqMatrix m{p.w.data(), p.n_out, t};
    auto r = awq_search({&m, 1}, p.n, p.x.data(), p.rows, p.mean_abs, {}, {}, &pool);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_NEAR(r->rtn_loss, direct_rtn_error(p, t), 1e-4 * r->rtn_loss) << dtype_name(t);
    const std::vector<float> ones(size_t(p.n), 1.f);
    EXPECT_NEAR(awq_output_error({&m, 1}, p.n, p.x.data(), p.rows, ones, {}, &pool), r->rtn_loss, 1e-9 * r->rtn_loss);
    EXPECT_NEAR(awq_output_error({&m, 1}, p.n, p.x.data(), p.rows, r->s, {}, &pool), r->loss, 1e-9 * r->loss);
    std::printf("%s: alpha %.2f, error %.3f of RTN's\n", std::string(dtype_name(t)).c_str(), r->alpha, r->loss / r->rtn_loss);
    EXPECT_GT(r->alpha, 0);
    EXPECT_LT(r->loss, 0.7 * r->rtn_loss) << dtype_name(t);
    // Equal magnitudes: every α gives s = 1, nothing to gain.
    const std::vector<float> flat(size_t(p.n), 1.f);
    auto none = awq_search({&m, 1}, p.n, p.x.data(), p.rows, flat, {}, {}, &pool);
    ASSERT_TRUE(none.ok());
    EXPECT_EQ(none->loss, none->rtn_loss);
  }
  const AwqMatrix bad{p.w.data(), p.n_out, DType::Q4_0};
  EXPECT_FALSE(awq_search({&bad, 1}, 100, p.x.data(), p.rows, std::vector<float>(100, 1.f), {}, {}, nullptr).ok());
}
