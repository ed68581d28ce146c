#include "tokenizer/segment_cache.h"

namespace kvasir::tok {

void SegmentCache::place(const Entry& e) {
  const size_t mask = table_.size() - 1;
  size_t i = size_t(e.hash) & mask;
  while (table_[i].used) i = (i + 1) & mask;
  table_[i] = e;
}

void SegmentCache::grow() {
  std::vector<Entry> old;
  old.swap(table_);
  table_.resize(old.empty() ? 1024 : old.size() * 2);
  for (const Entry& e : old)
    if (e.used) place(e);
}

bool SegmentCache::lookup(std::string_view key, uint64_t hash, std::vector<int32_t>& out) const {
  if (table_.empty() || key.size() > kMaxKey) return false;
  const size_t mask = table_.size() - 1;
  for (size_t i = size_t(hash) & mask;; i = (i + 1) & mask) {
    const Entry& e = table_[i];
    if (!e.used) return false;
    if (e.hash == hash && std::string_view(keys_).substr(e.key_off, e.key_len) == key) {
      out.insert(out.end(), ids_.begin() + e.ids_off, ids_.begin() + e.ids_off + e.ids_len);
      return true;
    }
  }
}

void SegmentCache::store(std::string_view key, uint64_t hash, const std::vector<int32_t>& out, size_t from) {
  const size_t n = out.size() - from;
  if (key.size() > kMaxKey || n > 0xFFFF || count_ >= kMaxEntries) return;
  if ((count_ + 1) * 2 > table_.size()) grow();
  const Entry e{hash, uint32_t(keys_.size()), uint32_t(ids_.size()), uint16_t(key.size()), uint16_t(n), true};
  place(e);
  keys_.append(key);
  ids_.insert(ids_.end(), out.begin() + long(from), out.end());
  ++count_;
}

}  // namespace kvasir::tok
