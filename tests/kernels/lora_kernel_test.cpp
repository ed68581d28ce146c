// The LoRA kernels against their scalar twins at awkward shapes (ranks and widths that are not
// multiples of the vector width, rows picked out of order). F32 sums in another order: 1e-5.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/lora.h"

namespace kvasir::kernels {
namespace {

TEST(LoraKernels, DownAndUpEqualTheirScalarTwins) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-1, 1);
  for (auto [n_in, rank, n_out] : {std::tuple{37, 3, 29}, {64, 8, 256}, {200, 16, 130}, {5, 1, 9}}) {
    const int64_t T = 6;
    std::vector<float> x(size_t(T * n_in)), a(size_t(rank * n_in)), bt(size_t(rank * n_out)), y(size_t(T * n_out));
    for (auto* v : {&x, &a, &bt, &y})
      for (float& f : *v) f = d(rng);
    const std::vector<int32_t> rows = {4, 1, 5};
    std::vector<float> u(rows.size() * size_t(rank)), want_y = y;
    lora_down(x.data(), n_in, rows.data(), int64_t(rows.size()), a.data(), rank, n_in, u.data());
    // y over two column ranges, as the forward splits it.
    std::vector<float> got_y = y;
    lora_up(u.data(), rows.data(), int64_t(rows.size()), bt.data(), rank, n_out, 0.75f, got_y.data(), n_out, 0, n_out / 2);
    lora_up(u.data(), rows.data(), int64_t(rows.size()), bt.data(), rank, n_out, 0.75f, got_y.data(), n_out, n_out / 2, n_out);
    for (size_t i = 0; i < rows.size(); ++i) {
      std::vector<double> ui(static_cast<size_t>(rank), 0.0);
      for (int64_t k = 0; k < rank; ++k) {
        for (int64_t j = 0; j < n_in; ++j) ui[size_t(k)] += double(a[size_t(k * n_in + j)]) * x[size_t(rows[i] * n_in + j)];
        EXPECT_NEAR(u[i * size_t(rank) + size_t(k)], ui[size_t(k)], 1e-5 * n_in) << n_in << " " << rank;
      }
      for (int64_t o = 0; o < n_out; ++o) {
        double s = 0;
        for (int64_t k = 0; k < rank; ++k) s += ui[size_t(k)] * bt[size_t(k * n_out + o)];
        want_y[size_t(rows[i] * n_out + o)] += float(0.75 * s);
      }
    }
    for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(got_y[i], want_y[i], 1e-4) << "element " << i;
  }
}

}  // namespace
}  // namespace kvasir::kernels
