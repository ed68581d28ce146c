// Open-addressing hash index from strings to ids, built once, probed without allocating.
// It stores no strings: each slot keeps an id that the caller's table of texts resolves, plus
// the key's first 8 bytes and length, so lookups of short keys (most tokens) and misses never
// touch the texts: one cache line per probe.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir::tok {

// The first n <= 8 bytes of p, zero-padded, read with whole loads (byte-by-byte copies into a
// word stall store forwarding, and these run several times per input byte).
inline uint64_t load_prefix8(const char* p, size_t n) {
  if (n >= 4) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + n - 4, 4);
    return uint64_t(lo) | (uint64_t(hi) << ((n - 4) * 8));  // the overlap holds the same bytes
  }
  if (n == 0) return 0;
  const auto b = [&](size_t i) { return uint64_t(uint8_t(p[i])) << (8 * i); };
  return b(0) | b(n / 2) | b(n - 1);
}

inline uint64_t hash_mix(uint64_t h) {
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 31);
}

inline uint64_t hash_bytes(std::string_view s) {
  // 8 bytes at a time with a multiply-xorshift mix; tokens are short, so this beats FNV.
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  const char* p = s.data();
  size_t n = s.size();
  uint64_t h = n * kMul;
  if (n <= 8) return hash_mix((h ^ load_prefix8(p, n)) * kMul);
  while (n > 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * kMul;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  uint64_t w;
  std::memcpy(&w, p + n - 8, 8);  // the last 8 bytes, overlapping the previous word
  return hash_mix((h ^ w) * kMul);
}

class StringIndex {
 public:
  // `texts` must outlive the index and keep its strings unchanged.
  void build(const std::vector<std::string>& texts);
  // Inserts texts[id]; returns the id already holding an equal text, or -1 if it was new.
  int32_t insert(int32_t id);
  int32_t find(std::string_view s) const { return find(s, hash_bytes(s)); }
  // With the key's hash_bytes already computed (e.g. to prefetch first).
  int32_t find(std::string_view s, uint64_t hash) const;
  // Starts loading the slot a lookup with this hash will probe first, so several independent
  // lookups can wait on memory at the same time.
  void prefetch(uint64_t hash) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[size_t(hash) & mask_]);
  }

 private:
  struct Slot {
    uint64_t head = 0;  // the key's first 8 bytes, zero-padded
    uint32_t tag = 0;   // high hash bits << 8 | min(length, 255)
    int32_t id = -1;
  };
  static uint64_t head_of(std::string_view s) { return load_prefix8(s.data(), s.size() < 8 ? s.size() : 8); }
  static uint32_t tag_of(uint64_t hash, size_t len) {
    return (uint32_t(hash >> 32) & 0xFFFFFF00u) | uint32_t(len < 255 ? len : 255);
  }
  bool matches(const Slot& s, uint64_t head, uint32_t tag, std::string_view key) const {
    if (s.tag != tag || s.head != head) return false;
    return key.size() <= 8 || (*texts_)[size_t(s.id)] == key;
  }
  void grow();
  const std::vector<std::string>* texts_ = nullptr;
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace kvasir::tok
