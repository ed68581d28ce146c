#include "compress/sparsity.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kvasir::compress {

void weight_scores(std::span<const float> w, int64_t n_in, std::span<const float> col_mean_sq, std::span<float> scores) {
  std::vector<float> col_norm;
  if (!col_mean_sq.empty()) {
    col_norm.resize(size_t(n_in));
    for (int64_t j = 0; j < n_in; ++j) col_norm[size_t(j)] = std::sqrt(std::max(0.f, col_mean_sq[size_t(j)]));
  }
  for (size_t i = 0; i < w.size(); ++i)
    scores[i] = col_norm.empty() ? std::fabs(w[i]) : std::fabs(w[i]) * col_norm[i % size_t(n_in)];
}

int64_t zero_lowest(std::span<float> w, std::span<const float> scores, int64_t k) {
  k = std::clamp<int64_t>(k, 0, int64_t(w.size()));
  if (k == 0) return 0;
  std::vector<uint32_t> order(w.size());
  std::iota(order.begin(), order.end(), 0u);
  auto lower = [&](uint32_t a, uint32_t b) { return scores[a] < scores[b] || (scores[a] == scores[b] && a < b); };
  std::nth_element(order.begin(), order.begin() + (k - 1), order.end(), lower);
  for (int64_t i = 0; i < k; ++i) w[order[size_t(i)]] = 0.f;
  return k;
}

int64_t zero_lowest_per_row(std::span<float> w, std::span<const float> scores, int64_t n_in, double sparsity) {
  const int64_t k = std::llround(sparsity * double(n_in));
  int64_t zeroed = 0;
  for (size_t r = 0; r < w.size(); r += size_t(n_in))
    zeroed += zero_lowest(w.subspan(r, size_t(n_in)), scores.subspan(r, size_t(n_in)), k);
  return zeroed;
}

int64_t zero_n_of_m(std::span<float> w, std::span<const float> scores, int n, int m) {
  int64_t zeroed = 0;
  for (size_t g = 0; g + size_t(m) <= w.size(); g += size_t(m))
    zeroed += zero_lowest(w.subspan(g, size_t(m)), scores.subspan(g, size_t(m)), m - n);
  return zeroed;
}

bool has_n_of_m(std::span<const float> w, int64_t n_in, int n, int m) {
  if (n_in % m != 0) return false;
  for (size_t g = 0; g < w.size(); g += size_t(m))
    if (std::count_if(w.begin() + ptrdiff_t(g), w.begin() + ptrdiff_t(g + size_t(m)), [](float v) { return v != 0.f; }) > n)
      return false;
  return true;
}

Threshold lowest_k_threshold(std::vector<float> scores, int64_t k) {
  if (k <= 0 || scores.empty()) return {-INFINITY, 0};
  k = std::min<int64_t>(k, int64_t(scores.size()));
  std::nth_element(scores.begin(), scores.begin() + (k - 1), scores.end());
  const float t = scores[size_t(k - 1)];
  const int64_t below = std::count_if(scores.begin(), scores.end(), [t](float s) { return s < t; });
  return {t, k - below};
}

int64_t zero_below(std::span<float> w, std::span<const float> scores, Threshold& t) {
  int64_t zeroed = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (scores[i] < t.value) {
      w[i] = 0.f, ++zeroed;
    } else if (scores[i] == t.value && t.ties_to_zero > 0) {
      w[i] = 0.f, ++zeroed, --t.ties_to_zero;
    }
  }
  return zeroed;
}

int64_t count_zeros(std::span<const float> w) {
  return std::count(w.begin(), w.end(), 0.f);
}

}  // namespace kvasir::compress
