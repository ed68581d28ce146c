#include "spec/draft_head.h"

#include <algorithm>
#include <unordered_map>

namespace kvasir::spec {

std::vector<int32_t> frequent_tokens(std::span<const int32_t> text, int32_t n, std::span<const int32_t> always,
                                     int64_t n_vocab) {
  n = int32_t(std::min<int64_t>(n, n_vocab));
  std::vector<uint8_t> taken(size_t(std::max<int64_t>(n_vocab, 0)), 0);
  std::vector<int32_t> out;
  auto take = [&](int32_t t) {
    if (int32_t(out.size()) < n && t >= 0 && t < n_vocab && !taken[size_t(t)]) taken[size_t(t)] = 1, out.push_back(t);
  };
  for (int32_t t : always) take(t);
  std::unordered_map<int32_t, int64_t> count;
  for (int32_t t : text) ++count[t];
  std::vector<std::pair<int64_t, int32_t>> ranked;  // (-count, id)
  for (const auto& [t, c] : count) ranked.push_back({-c, t});
  std::sort(ranked.begin(), ranked.end());
  for (const auto& [c, t] : ranked) take(t);
  for (int32_t t = 0; int32_t(out.size()) < n && t < n_vocab; ++t) take(t);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace kvasir::spec
