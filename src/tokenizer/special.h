// Finds special (control, unknown) and user-defined token strings in text before the model's
// tokenizer runs, reproducing llama.cpp's tokenizer_st_partition: tokens are tried longest
// first, each splitting the text fragments that remain, so a longer token wins over a shorter
// one wherever they overlap; tokens with the strip attributes eat adjacent whitespace.
// Instead of one pass over the text per special token (Gemma 3 has 6,400), one trie walk finds
// every occurrence and the occurrences are then accepted in llama.cpp's order. Text with very
// many occurrences (long whitespace runs against Gemma's whitespace tokens) would make that list
// huge, so past a bound it falls back to llama.cpp's per-token scan, over only the tokens present.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace kvasir::tok {

// A piece of the input: a token already decided, or raw text [begin, end) to tokenize.
struct Fragment {
  int32_t token;  // kNoToken for raw text
  size_t begin, end;
};

class SpecialMatcher {
 public:
  void build(const Vocab& vocab);
  static constexpr size_t kMaxOccurrences = size_t(1) << 20;

  // parse_special == false still matches user-defined tokens (as llama.cpp and HF do).
  // `max_occurrences` bounds the occurrence list (0 forces the per-token scan; for tests).
  void partition(std::string_view text, bool parse_special, std::vector<Fragment>& out,
                 size_t max_occurrences = kMaxOccurrences) const;

 private:
  struct Node {
    int32_t first_child = -1, next_sibling = -1;
    int32_t token = kNoToken;  // a special token ends here
    int32_t rank = 0;          // its position in llama.cpp's processing order
    uint8_t byte = 0;
  };
  int32_t child(int32_t node, uint8_t b) const;
  void scan_tokens(std::string_view text, const std::vector<uint8_t>& present, std::vector<Fragment>& out) const;

  const Vocab* vocab_ = nullptr;
  std::vector<Node> nodes_;           // trie over token texts; node 0 is the root
  std::vector<int32_t> order_;        // rank -> token id
  int32_t root_children_[256] = {};  // direct table for the first byte
};

}  // namespace kvasir::tok
