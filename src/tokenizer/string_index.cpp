#include "tokenizer/string_index.h"

namespace kvasir::tok {

void StringIndex::build(const std::vector<std::string>& texts) {
  texts_ = &texts;
  size_t cap = 16;
  while (cap < texts.size() * 2) cap <<= 1;
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  size_ = 0;
}

void StringIndex::grow() {
  std::vector<Slot> old;
  old.swap(slots_);
  slots_.assign(old.size() * 2, Slot{});
  mask_ = slots_.size() - 1;
  size_ = 0;
  for (const Slot& s : old)
    if (s.id >= 0) insert(s.id);
}

int32_t StringIndex::insert(int32_t id) {
  if ((size_ + 1) * 2 > slots_.size()) grow();
  const std::string& text = (*texts_)[size_t(id)];
  const uint64_t h = hash_bytes(text);
  const uint64_t head = head_of(text);
  const uint32_t tag = tag_of(h, text.size());
  for (size_t i = size_t(h) & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.id < 0) {
      s = {head, tag, id};
      ++size_;
      return -1;
    }
    if (matches(s, head, tag, text)) return s.id;
  }
}

int32_t StringIndex::find(std::string_view text, uint64_t h) const {
  if (slots_.empty()) return -1;
  const uint64_t head = head_of(text);
  const uint32_t tag = tag_of(h, text.size());
  for (size_t i = size_t(h) & mask_;; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.id < 0) return -1;
    if (matches(s, head, tag, text)) return s.id;
  }
}

}  // namespace kvasir::tok
