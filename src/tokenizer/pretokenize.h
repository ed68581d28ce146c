// Byte-level BPE pre-tokenization: split text into words with the regexes of the model's
// tokenizer.ggml.pre, as llama.cpp's unicode_regex_split does. Each regex in turn splits every
// piece left by the previous one; text between matches stays a piece of its own.
// PCRE2 (UTF + UCP, JIT-compiled once per tokenizer) supplies the Unicode classes.
#pragma once
#include <cstddef>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "tokenizer/vocab.h"

namespace kvasir::tok {

struct Span {
  size_t begin, end;
};

class PreTokenizer {
 public:
  PreTokenizer();
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  Status build(PreKind kind);
  // Replaces `words` with the words of `text`, in order, covering it exactly. Bytes that are not
  // valid UTF-8 never match a regex, so they end up in words of their own.
  void split(std::string_view text, std::vector<Span>& words) const;

  // The regexes for a pre-tokenizer (exposed for tests and documentation).
  static std::vector<std::string> patterns(PreKind kind);

 private:
  struct Regex;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace kvasir::tok
