#include "tokenizer/spm.h"

#include <algorithm>
#include <cstdio>

#include "core/scratch.h"
#include "tokenizer/utf8.h"

namespace kvasir::tok {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's escaped space

// Max-heap order: higher score first, then the leftmost pair (llama.cpp's comparator).
bool heap_less(float sa, int32_t la, float sb, int32_t lb) { return sa < sb || (sa == sb && la > lb); }

}  // namespace

void SpmEncoder::build(const Vocab& vocab, int32_t small_segment) {
  vocab_ = &vocab;
  small_segment_ = std::min(small_segment, kSmallSegment);
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    int32_t id = vocab.index.find(hex);
    if (id < 0) id = vocab.index.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
    byte_token_[b] = id >= 0 ? id : vocab.unk;
    if (b < 128) ascii_token_[b] = vocab.index.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
  }
  std::fill(std::begin(joins_space_), std::end(joins_space_), false);
  for (const std::string& t : vocab.text)
    for (size_t k = t.find(kSpace, 1); k != std::string::npos; k = t.find(kSpace, k + 1))
      joins_space_[uint8_t(t[k - 1])] = true;
}

bool SpmEncoder::spells_every_byte() const {
  return std::all_of(std::begin(byte_token_), std::end(byte_token_), [](int32_t id) { return id >= 0; });
}

void SpmEncoder::push_symbol(std::string_view piece, int32_t id, std::vector<int32_t>& out) const {
  if (id < 0) id = vocab_->index.find(piece);
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
    push_symbol(text.substr(sym[0].offset, sym[0].len), sym[0].id, out);
  } else if (n <= small_segment_) {
    merge_small(text.data(), sym);
  } else {
    merge_heap(text.data(), sym, heap);
  }
  if (n > 1)
    for (int32_t i = 0; i != -1; i = sym[size_t(i)].next)
      push_symbol(text.substr(sym[size_t(i)].offset, sym[size_t(i)].len), sym[size_t(i)].id, out);
}

// Short segments (almost all of them): the best pair is found by a scan over the few symbols,
// which picks the same pair as the priority queue (highest score, then leftmost) without its
// bookkeeping.
void SpmEncoder::merge_small(const char* text, std::vector<Symbol>& sym) const {
  const StringIndex& index = vocab_->index;
  const int32_t n = int32_t(sym.size());
  int32_t pair_id[kSmallSegment];  // token formed by symbol i and its right neighbour, -1 if none
  float pair_score[kSmallSegment];
  uint64_t hash[kSmallSegment];
  auto pair_text = [&](int32_t l) {
    const Symbol& a = sym[size_t(l)];
    return std::string_view(text + a.offset, a.len + sym[size_t(a.next)].len);
  };
  auto prepare = [&](int32_t l) {  // hash and prefetch
    if (l >= 0 && sym[size_t(l)].next >= 0) index.prefetch(hash[l] = hash_bytes(pair_text(l)));
  };
  auto resolve = [&](int32_t l) {
    if (l < 0) return;
    pair_id[l] = sym[size_t(l)].next >= 0 ? index.find(pair_text(l), hash[l]) : -1;
    if (pair_id[l] >= 0) pair_score[l] = vocab_->score[size_t(pair_id[l])];
  };
  for (int32_t i = 0; i + 1 < n; ++i) prepare(i);
  for (int32_t i = 0; i < n; ++i) resolve(i);
  for (;;) {
    int32_t best = -1;
    for (int32_t i = 0; i != -1; i = sym[size_t(i)].next)
      if (pair_id[i] >= 0 && (best < 0 || pair_score[i] > pair_score[best])) best = i;
    if (best < 0) break;
    Symbol& left = sym[size_t(best)];
    Symbol& right = sym[size_t(left.next)];
    left.len += right.len;
    left.id = pair_id[best];
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) sym[size_t(right.next)].prev = best;
    prepare(left.prev);
    prepare(best);
    resolve(left.prev);
    resolve(best);
  }
}

// Long segments (whitespace runs, text without spaces): llama.cpp's priority queue.
void SpmEncoder::merge_heap(const char* text, std::vector<Symbol>& sym, std::vector<Bigram>& heap) const {
  const StringIndex& index = vocab_->index;
  const int32_t n = int32_t(sym.size());
  auto cmp = [](const Bigram& a, const Bigram& b) { return heap_less(a.score, a.left, b.score, b.left); };
  auto pair_text = [&](int32_t l, int32_t r) {
    return std::string_view(text + sym[size_t(l)].offset, sym[size_t(l)].len + sym[size_t(r)].len);
  };
  auto add = [&](int32_t l, int32_t r, uint64_t hash) {
    const std::string_view t = pair_text(l, r);
    const int32_t id = index.find(t, hash);
    if (id < 0) return;
    heap.push_back({vocab_->score[size_t(id)], l, r, uint32_t(t.size()), id});
    std::push_heap(heap.begin(), heap.end(), cmp);
  };
  // The lookups are independent and mostly cache misses on a large vocabulary: hash and
  // prefetch all of them before probing any.
  thread_local std::vector<uint64_t> hashes;
  hashes.resize(size_t(n));
  for (int32_t i = 1; i < n; ++i) {
    hashes[size_t(i)] = hash_bytes(pair_text(i - 1, i));
    index.prefetch(hashes[size_t(i)]);
  }
  heap.clear();
  for (int32_t i = 1; i < n; ++i) add(i - 1, i, hashes[size_t(i)]);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), cmp);
    const Bigram b = heap.back();
    heap.pop_back();
    Symbol& left = sym[size_t(b.left)];
    Symbol& right = sym[size_t(b.right)];
    if (left.len == 0 || right.len == 0 || left.len + right.len != b.len) continue;  // stale
    left.len += right.len;
    left.id = b.id;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) sym[size_t(right.next)].prev = b.left;
    // The two new neighbour pairs, prefetched together.
    const int32_t p = left.prev, q = left.next;
    const uint64_t hp = p >= 0 ? hash_bytes(pair_text(p, b.left)) : 0;
    const uint64_t hq = q >= 0 ? hash_bytes(pair_text(b.left, q)) : 0;
    if (p >= 0) index.prefetch(hp);
    if (q >= 0) index.prefetch(hq);
    if (p >= 0) add(p, b.left, hp);
    if (q >= 0) add(b.left, q, hq);
  }
  release_if_large(hashes);
}

void SpmEncoder::encode(std::string_view text, std::vector<int32_t>& out, SegmentCache* cache) const {
  // Reused across calls: encode runs once per text fragment, and Gemma's whitespace tokens make
  // fragments short and many.
  thread_local std::vector<Symbol> sym;
  thread_local std::vector<Bigram> heap;
  size_t pos = 0;
  while (pos < text.size()) {
    // One segment: characters up to the next U+2581 that no token joins to its left neighbour.
    sym.clear();
    const size_t begin = pos;
    while (pos < text.size()) {
      const size_t len = std::min(utf8_len_from_lead(uint8_t(text[pos])), text.size() - pos);
      if (!sym.empty() && len == 3 && text.compare(pos, 3, kSpace) == 0 && !joins_space_[uint8_t(text[pos - 1])])
        break;
      const int32_t i = int32_t(sym.size());
      const uint8_t c = uint8_t(text[pos]);
      sym.push_back({i - 1, i + 1, pos, uint32_t(len), c < 128 ? ascii_token_[c] : -1});
      pos += len;
    }
    sym.back().next = -1;
    if (!cache) {
      encode_segment(text, sym, heap, out);
      continue;
    }
    const std::string_view key = text.substr(begin, pos - begin);
    const uint64_t hash = hash_bytes(key);
    if (cache->lookup(key, hash, out)) continue;
    const size_t from = out.size();
    encode_segment(text, sym, heap, out);
    cache->store(key, hash, out, from);
  }
  // A text without spaces is one segment as long as itself: do not keep that peak per thread.
  release_if_large(sym);
  release_if_large(heap);
}

}  // namespace kvasir::tok
