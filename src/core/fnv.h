// FNV-1a over 64-bit words (then the tail bytes): a fast non-cryptographic hash for content
// identities (model, adapter) and checksums (KV block files). Not for adversarial keys.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvasir {

inline constexpr uint64_t kFnvOffset = 1469598103934665603ull;

inline uint64_t fnv1a_words(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace kvasir
