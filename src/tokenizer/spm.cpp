#include "tokenizer/spm.h"

#include <algorithm>
#include <cstdio>

#include "tokenizer/utf8.h"

namespace kvasir::tok {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's escaped space

// Max-heap order: higher score first, then the leftmost pair (llama.cpp's comparator).
bool heap_less(float sa, int32_t la, float sb, int32_t lb) { return sa < sb || (sa == sb && la > lb); }

}  // namespace

void SpmEncoder::build(const Vocab& vocab) {
  vocab_ = &vocab;
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    int32_t id = vocab.index.find(hex);
    if (id < 0) id = vocab.index.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
    byte_token_[b] = id >= 0 ? id : vocab.unk;
  }
  std::fill(std::begin(joins_space_), std::end(joins_space_), false);
  for (const std::string& t : vocab.text)
    for (size_t k = t.find(kSpace, 1); k != std::string::npos; k = t.find(kSpace, k + 1))
      joins_space_[uint8_t(t[k - 1])] = true;
}

void SpmEncoder::push_symbol(std::string_view piece, std::vector<int32_t>& out) const {
  const int32_t id = vocab_->index.find(piece);
  if (id >= 0) {
    out.push_back(id);
    return;
  }
  // Not a token (merged symbols always are, so this is one character): byte fallback.
  for (char c : piece)
    if (byte_token_[uint8_t(c)] >= 0) out.push_back(byte_token_[uint8_t(c)]);
}

void SpmEncoder::encode_segment(std::string_view text, std::vector<Symbol>& sym, std::vector<Bigram>& heap,
                                std::vector<int32_t>& out) const {
  const int32_t n = int32_t(sym.size());
  if (n == 1) {
    push_symbol(text.substr(sym[0].offset, sym[0].len), out);
    return;
  }
  auto cmp = [](const Bigram& a, const Bigram& b) { return heap_less(a.score, a.left, b.score, b.left); };
  auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const uint32_t len = sym[size_t(l)].len + sym[size_t(r)].len;
    const int32_t id = vocab_->index.find(text.substr(sym[size_t(l)].offset, len));
    if (id < 0) return;
    heap.push_back({vocab_->score[size_t(id)], l, r, len});
    std::push_heap(heap.begin(), heap.end(), cmp);
  };
  heap.clear();
  for (int32_t i = 1; i < n; ++i) try_add(i - 1, i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), cmp);
    const Bigram b = heap.back();
    heap.pop_back();
    Symbol& left = sym[size_t(b.left)];
    Symbol& right = sym[size_t(b.right)];
    if (left.len == 0 || right.len == 0 || left.len + right.len != b.len) continue;  // stale
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) sym[size_t(right.next)].prev = b.left;
    try_add(left.prev, b.left);
    try_add(b.left, left.next);
  }
  for (int32_t i = 0; i != -1; i = sym[size_t(i)].next)
    push_symbol(text.substr(sym[size_t(i)].offset, sym[size_t(i)].len), out);
}

void SpmEncoder::encode(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<Symbol> sym;
  std::vector<Bigram> heap;
  sym.reserve(64);
  heap.reserve(64);
  size_t pos = 0;
  while (pos < text.size()) {
    // One segment: characters up to the next U+2581 that no token joins to its left neighbour.
    sym.clear();
    while (pos < text.size()) {
      const size_t len = std::min(utf8_len_from_lead(uint8_t(text[pos])), text.size() - pos);
      if (!sym.empty() && len == 3 && text.compare(pos, 3, kSpace) == 0 && !joins_space_[uint8_t(text[pos - 1])])
        break;
      const int32_t i = int32_t(sym.size());
      sym.push_back({i - 1, i + 1, pos, uint32_t(len)});
      pos += len;
    }
    sym.back().next = -1;
    encode_segment(text, sym, heap, out);
  }
}

}  // namespace kvasir::tok
