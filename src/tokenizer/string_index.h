// Open-addressing hash index from strings to ids, built once, probed without allocating.
// It stores no strings: each slot keeps an id and the caller's table of texts resolves it, so
// the index over a 262k-token vocabulary costs 8 bytes a slot.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir::tok {

inline uint64_t hash_bytes(std::string_view s) {
  // 8 bytes at a time with a multiply-xorshift mix; tokens are short, so this beats FNV.
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  uint64_t h = s.size() * kMul;
  const char* p = s.data();
  size_t n = s.size();
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * kMul;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = (h ^ w) * kMul;
    h ^= h >> 29;
  }
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 31);
}

class StringIndex {
 public:
  // `texts` must outlive the index and keep its strings unchanged.
  void build(const std::vector<std::string>& texts);
  // Inserts texts[id]; returns the id already holding an equal text, or -1 if it was new.
  int32_t insert(int32_t id);
  int32_t find(std::string_view s) const;

 private:
  struct Slot {
    uint32_t tag = 0;  // high hash bits, to skip most string compares
    int32_t id = -1;
  };
  void grow();
  const std::vector<std::string>* texts_ = nullptr;
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace kvasir::tok
