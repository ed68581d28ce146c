#include "spec/ngram.h"

#include <algorithm>

namespace kvasir::spec {

std::vector<int32_t> propose_ngram(std::span<const int32_t> tokens, int32_t k, const NgramOptions& o) {
  const int64_t len = int64_t(tokens.size());
  if (k <= 0 || len < 2) return {};
  const int64_t lo = std::max<int64_t>(0, len - o.max_scan);
  for (int64_t n = std::min<int64_t>(o.max_n, len - 1); n >= std::max(1, o.min_n); --n) {
    const auto suffix = tokens.subspan(size_t(len - n));
    // The latest earlier occurrence: a match starting at i, ending before the suffix itself.
    for (int64_t i = len - n - 1; i >= lo; --i) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + i)) continue;
      const int64_t from = i + n;
      const int64_t take = std::min<int64_t>(k, len - from);
      if (take <= 0) continue;
      return std::vector<int32_t>(tokens.begin() + from, tokens.begin() + from + take);
    }
  }
  return {};
}

}  // namespace kvasir::spec
