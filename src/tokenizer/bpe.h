// Byte-level BPE (GPT-2 style) as llama.cpp's llm_tokenizer_bpe does it: each byte of a word is
// first mapped to a printable character (GPT-2's byte<->unicode table), then the adjacent pair
// with the lowest merge rank is merged (ties: leftmost) until no pair is in the merge list.
// Merging works on ids: the merge table is a hash map keyed by the (left, right) id pair, so a
// merge is one probe and words never become strings.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "format/gguf.h"
#include "tokenizer/segment_cache.h"
#include "tokenizer/string_index.h"
#include "tokenizer/vocab.h"

namespace kvasir::tok {

// GPT-2's reversible byte -> code point map: printable Latin-1 bytes map to themselves, the
// other 68 bytes to U+0100.. in order.
uint32_t gpt2_byte_to_codepoint(uint8_t b);
// The inverse; -1 for code points outside the map.
int gpt2_codepoint_to_byte(uint32_t cp);

class BpeEncoder {
 public:
  // `merges` is tokenizer.ggml.merges (an array of "left right" strings; rank = position).
  Status build(const Vocab& vocab, const gguf::Value& merges);
  // Appends the tokens of one pre-tokenized word (raw bytes).
  void encode_word(std::string_view word, std::vector<int32_t>& out, SegmentCache* cache = nullptr) const;
  // Every byte and every merge result is a vocabulary token. Otherwise encode spells such a
  // symbol with single-byte tokens that mostly do not exist, i.e. drops it.
  bool every_symbol_is_token() const { return every_symbol_is_token_; }

 private:
  struct Symbol {
    int32_t prev, next;
    int32_t id;  // vocabulary id, or >= n_vocab for a merge result that is not a token; -1 merged away
  };
  struct Bigram {
    int32_t rank;
    int32_t left, right;
    int32_t left_id, right_id;  // stale once either symbol changed
    int32_t result;
  };
  struct PairSlot {
    uint64_t key = ~0ull;  // (left id << 32) | right id
    int32_t rank = 0, result = 0;
  };
  int32_t symbol_id(std::string_view s, uint64_t hash);
  const PairSlot* find_pair(int32_t left, int32_t right) const;
  void insert_pair(int32_t left, int32_t right, int32_t rank, int32_t result);
  void emit(int32_t id, std::vector<int32_t>& out) const;
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  const Vocab* vocab_ = nullptr;
  std::vector<PairSlot> pairs_;
  size_t pair_mask_ = 0, pair_count_ = 0;
  // Strings that merges mention but the vocabulary lacks, as ids n_vocab + i.
  std::vector<std::string> extra_text_;
  StringIndex extra_index_;
  int32_t byte_id_[256] = {};         // raw byte -> id of its mapped character
  std::string byte_char_[256];        // raw byte -> UTF-8 of its mapped character
  bool every_symbol_is_token_ = true;
};

}  // namespace kvasir::tok
