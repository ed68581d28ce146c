// Memo of segment -> token ids for one encode call. A segment (an SPM piece between escaped
// spaces, a BPE pre-tokenizer word) always tokenizes the same way, and natural text repeats its
// words constantly, so long inputs skip most merge work. Living for one call, it needs no locks
// and is bounded: short keys only, and it stops growing when full.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir::tok {

class SegmentCache {
 public:
  static constexpr size_t kMaxKey = 48;
  static constexpr size_t kMaxEntries = size_t(1) << 16;
  // Worth it only for inputs long enough to repeat themselves.
  static constexpr size_t kMinText = 4096;

  // Appends the cached ids of `key` to `out`; false if absent.
  bool lookup(std::string_view key, uint64_t hash, std::vector<int32_t>& out) const;
  // Remembers out[from..] as the ids of `key` (ignored for long keys or when full).
  void store(std::string_view key, uint64_t hash, const std::vector<int32_t>& out, size_t from);

 private:
  struct Entry {
    uint64_t hash = 0;
    uint32_t key_off = 0, ids_off = 0;
    uint16_t key_len = 0, ids_len = 0;
    bool used = false;
  };
  void place(const Entry& e);
  void grow();

  std::vector<Entry> table_;
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t count_ = 0;
};

}  // namespace kvasir::tok
