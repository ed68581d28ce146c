// SentencePiece-style tokenization as llama.cpp's llm_tokenizer_spm does it: start from single
// UTF-8 characters, repeatedly merge the adjacent pair whose concatenation is the vocabulary
// token with the highest score (ties: leftmost), and spell out characters that are not tokens
// with byte tokens <0xNN>.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/segment_cache.h"
#include "tokenizer/vocab.h"

namespace kvasir::tok {

class SpmEncoder {
 public:
  // Segments of up to `small_segment` characters use a linear scan instead of the priority
  // queue; both give the same tokens (0 = always the queue; tests compare the two).
  void build(const Vocab& vocab, int32_t small_segment = kSmallSegment);

  static constexpr int32_t kSmallSegment = 24;
  // `text` is one raw-text fragment with spaces already escaped to U+2581. `cache` (optional)
  // remembers segments across the fragments of one encode call.
  void encode(std::string_view text, std::vector<int32_t>& out, SegmentCache* cache = nullptr) const;
  // Every byte has a fallback token (<0xNN>, or the unknown token); otherwise encode drops the
  // bytes of characters it cannot spell.
  bool spells_every_byte() const;

 private:
  struct Symbol {
    int32_t prev, next;
    size_t offset;
    uint32_t len;  // bytes of text; 0 once merged into its left neighbour
    int32_t id;    // its token, when known (-1: look it up at the end)
  };
  struct Bigram {
    float score;
    int32_t left, right;
    uint32_t len;  // left.len + right.len when queued; stale if that changed
    int32_t id;    // the merged token
  };
  void encode_segment(std::string_view text, std::vector<Symbol>& sym, std::vector<Bigram>& heap,
                      std::vector<int32_t>& out) const;
  void merge_small(const char* text, std::vector<Symbol>& sym) const;
  void merge_heap(const char* text, std::vector<Symbol>& sym, std::vector<Bigram>& heap) const;
  void push_symbol(std::string_view piece, int32_t id, std::vector<int32_t>& out) const;


  const Vocab* vocab_ = nullptr;
  int32_t small_segment_ = kSmallSegment;
  int32_t byte_token_[256] = {};   // <0xNN> (byte fallback)
  int32_t ascii_token_[128] = {};  // the token of a one-byte character, -1 if none
  // Bytes that end a character directly followed by U+2581 inside some token. Before any other
  // U+2581 no merge can reach across, so the text is cut there into independent segments: the
  // same result as llama.cpp's single pass, with small priority queues.
  bool joins_space_[256] = {};
};

}  // namespace kvasir::tok
