#include "tokenizer/bpe.h"

#include <algorithm>

#include "core/scratch.h"
#include "tokenizer/utf8.h"

namespace kvasir::tok {

namespace {

constexpr bool maps_to_itself(uint32_t b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

uint64_t pair_key(int32_t l, int32_t r) { return (uint64_t(uint32_t(l)) << 32) | uint32_t(r); }

size_t pair_hash(uint64_t k) {
  k ^= k >> 33;
  k *= 0xFF51AFD7ED558CCDull;
  k ^= k >> 33;
  return size_t(k);
}

// Min-heap order on (rank, left) via std::*_heap, which builds max-heaps.
bool bigram_after(int32_t ra, int32_t la, int32_t rb, int32_t lb) { return ra > rb || (ra == rb && la > lb); }

}  // namespace

namespace {

struct Gpt2Tables {
  uint16_t to_cp[256];
  int16_t to_byte[324];  // code points 0..323 cover the whole map
};

constexpr Gpt2Tables make_gpt2_tables() {
  Gpt2Tables t{};
  for (int16_t& b : t.to_byte) b = -1;
  uint16_t n = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    t.to_cp[b] = maps_to_itself(b) ? uint16_t(b) : uint16_t(256 + n++);
    t.to_byte[t.to_cp[b]] = int16_t(b);
  }
  return t;
}

constexpr Gpt2Tables kGpt2 = make_gpt2_tables();

}  // namespace

uint32_t gpt2_byte_to_codepoint(uint8_t b) { return kGpt2.to_cp[b]; }

int gpt2_codepoint_to_byte(uint32_t cp) { return cp < 324 ? kGpt2.to_byte[cp] : -1; }

int32_t BpeEncoder::symbol_id(std::string_view s, uint64_t hash) {
  const int32_t id = vocab_->index.find(s, hash);
  if (id >= 0) return id;
  const int32_t extra = extra_index_.find(s, hash);
  if (extra >= 0) return vocab_->size() + extra;
  extra_text_.emplace_back(s);
  extra_index_.insert(int32_t(extra_text_.size() - 1));
  return vocab_->size() + int32_t(extra_text_.size() - 1);
}

const BpeEncoder::PairSlot* BpeEncoder::find_pair(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  for (size_t i = pair_hash(key) & pair_mask_;; i = (i + 1) & pair_mask_) {
    const PairSlot& s = pairs_[i];
    if (s.key == key) return &s;
    if (s.key == ~0ull) return nullptr;
  }
}

void BpeEncoder::insert_pair(int32_t left, int32_t right, int32_t rank, int32_t result) {
  const uint64_t key = pair_key(left, right);
  for (size_t i = pair_hash(key) & pair_mask_;; i = (i + 1) & pair_mask_) {
    PairSlot& s = pairs_[i];
    if (s.key == key) return;  // a repeated pair keeps its first (lowest) rank
    if (s.key == ~0ull) {
      s = {key, rank, result};
      ++pair_count_;
      return;
    }
  }
}

Status BpeEncoder::build(const Vocab& vocab, const gguf::Value& merges) {
  vocab_ = &vocab;
  extra_text_.clear();
  extra_text_.reserve(16);
  extra_index_.build(extra_text_);
  for (int b = 0; b < 256; ++b) {
    byte_char_[b].clear();
    utf8_append(byte_char_[b], gpt2_byte_to_codepoint(uint8_t(b)));
    byte_id_[b] = symbol_id(byte_char_[b], hash_bytes(byte_char_[b]));
  }
  every_symbol_is_token_ = extra_text_.empty();

  // Load factor <= 0.6: the table stays small enough to be cache-friendly when encoding.
  size_t cap = 16;
  while (cap * 3 < merges.items.size() * 5) cap <<= 1;
  pairs_.assign(cap, PairSlot{});
  pair_mask_ = cap - 1;
  pair_count_ = 0;
  if (merges.items.size() >= size_t(INT32_MAX)) return Error{"tokenizer: tokenizer.ggml.merges has too many entries"};

  // Resolved in batches: hash and prefetch the three lookups of every merge in the batch before
  // probing, since they are independent cache misses into a large vocabulary index.
  constexpr size_t kBatch = 32;
  struct Parts {
    std::string_view left, right;
    uint64_t hl, hr, hj;
  };
  Parts parts[kBatch];
  std::string joined[kBatch];
  for (size_t start = 0; start < merges.items.size(); start += kBatch) {
    const size_t end = std::min(merges.items.size(), start + kBatch);
    for (size_t i = start; i < end; ++i) {
      const std::string& m = merges.items[i].str;
      // The separator is the first space after the first byte (a token may itself be a space).
      const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
      if (sp == std::string::npos || sp + 1 >= m.size())
        return Error{"tokenizer: tokenizer.ggml.merges[" + std::to_string(i) + "] = '" + m +
                     "' is not two tokens separated by a space"};
      Parts& p = parts[i - start];
      p.left = std::string_view(m).substr(0, sp);
      p.right = std::string_view(m).substr(sp + 1);
      std::string& j = joined[i - start];
      j.assign(p.left);
      j.append(p.right);
      p.hl = hash_bytes(p.left);
      p.hr = hash_bytes(p.right);
      p.hj = hash_bytes(j);
      vocab.index.prefetch(p.hl);
      vocab.index.prefetch(p.hr);
      vocab.index.prefetch(p.hj);
    }
    int32_t ids[kBatch][3];
    for (size_t i = start; i < end; ++i) {
      const Parts& p = parts[i - start];
      int32_t* id = ids[i - start];
      id[0] = symbol_id(p.left, p.hl);
      id[1] = symbol_id(p.right, p.hr);
      id[2] = symbol_id(joined[i - start], p.hj);
      __builtin_prefetch(&pairs_[pair_hash(pair_key(id[0], id[1])) & pair_mask_]);
    }
    for (size_t i = start; i < end; ++i) {
      insert_pair(ids[i - start][0], ids[i - start][1], int32_t(i), ids[i - start][2]);
      if (ids[i - start][2] >= vocab.size()) every_symbol_is_token_ = false;
    }
  }
  return {};
}

void BpeEncoder::emit(int32_t id, std::vector<int32_t>& out) const {
  if (id < vocab_->size()) {
    out.push_back(id);
    return;
  }
  // A merge result the vocabulary lacks: llama.cpp falls back to single-byte tokens of its
  // (byte-mapped) text, which mostly do not exist. Real vocabularies never get here.
  for (char c : extra_text_[size_t(id - vocab_->size())]) {
    const int32_t t = vocab_->index.find(std::string_view(&c, 1));
    if (t >= 0) out.push_back(t);
  }
}

void BpeEncoder::encode_word(std::string_view word, std::vector<int32_t>& out, SegmentCache* cache) const {
  if (word.empty()) return;
  if (!cache || word.size() == 1) {
    merge_word(word, out);
    return;
  }
  const uint64_t hash = hash_bytes(word);
  if (cache->lookup(word, hash, out)) return;
  const size_t from = out.size();
  merge_word(word, out);
  cache->store(word, hash, out, from);
}

void BpeEncoder::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  if (vocab_->ignore_merges) {
    // Llama 3: a word that is a token is taken whole, even where the merges would split it.
    thread_local std::string mapped;
    mapped.clear();
    for (char c : word) mapped += byte_char_[uint8_t(c)];
    const int32_t id = vocab_->index.find(mapped);
    release_if_large(mapped);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  if (word.size() == 1) {
    emit(byte_id_[uint8_t(word[0])], out);
    return;
  }

  thread_local std::vector<Symbol> sym;
  thread_local std::vector<Bigram> heap;
  const int32_t n = int32_t(word.size());
  sym.resize(size_t(n));
  for (int32_t i = 0; i < n; ++i) sym[size_t(i)] = {i - 1, i + 1 < n ? i + 1 : -1, byte_id_[uint8_t(word[size_t(i)])]};

  auto cmp = [](const Bigram& a, const Bigram& b) { return bigram_after(a.rank, a.left, b.rank, b.left); };
  auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const PairSlot* p = find_pair(sym[size_t(l)].id, sym[size_t(r)].id);
    if (!p) return;
    heap.push_back({p->rank, l, r, sym[size_t(l)].id, sym[size_t(r)].id, p->result});
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
    if (left.id != b.left_id || right.id != b.right_id || left.next != b.right) continue;  // stale
    left.id = b.result;
    right.id = -1;
    left.next = right.next;
    if (right.next >= 0) sym[size_t(right.next)].prev = b.left;
    try_add(left.prev, b.left);
    try_add(b.left, left.next);
  }
  for (int32_t i = 0; i != -1; i = sym[size_t(i)].next) emit(sym[size_t(i)].id, out);
  // One huge word (a long run of letters) must not pin its peak size in every thread.
  release_if_large(sym);
  release_if_large(heap);
}

}  // namespace kvasir::tok
