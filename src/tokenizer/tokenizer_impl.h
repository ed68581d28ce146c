// The parts a Tokenizer is made of (internal to the tokenizer layer).
#pragma once
#include <string>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/special.h"
#include "tokenizer/spm.h"
#include "tokenizer/vocab.h"

namespace kvasir::tok {

struct TokenizerImpl {
  TokenizerImpl() = default;
  TokenizerImpl(const TokenizerImpl&) = delete;  // the indexes point into its own members
  TokenizerImpl& operator=(const TokenizerImpl&) = delete;

  Vocab vocab;
  SpecialMatcher special;
  SpmEncoder spm;       // VocabKind::spm
  BpeEncoder bpe;       // VocabKind::bpe
  PreTokenizer pre;     // VocabKind::bpe
  std::vector<std::string> pieces;  // id -> decoded bytes (special tokens as their text)
  int32_t max_piece_bytes = 1;      // see Tokenizer::max_piece_bytes
};

// Builds `impl.pieces`; fails on a byte-type token whose text is not <0xNN>.
Status build_pieces(TokenizerImpl& impl);

// Appends the piece of `id` the way decode does. `at_start` is true until the first text token
// (it drops that token's leading space when the vocabulary adds a space prefix).
void append_piece(const TokenizerImpl& impl, int32_t id, bool skip_special, bool& at_start, std::string& out);

}  // namespace kvasir::tok
