// Text <-> token ids for GGUF models, token-exact with llama.cpp.
//
// Two tokenizer families, chosen by tokenizer.ggml.model:
//   "llama" - SentencePiece-style (Llama 2, Mistral, TinyLlama, Phi-3, Gemma 3): spaces become
//             U+2581, score-driven merges, byte fallback <0xNN>.
//   "gpt2"  - byte-level BPE (GPT-2, Llama 3, Qwen2, DeepSeek, StarCoder, Falcon, SmolLM): regex
//             pre-tokenizer chosen by tokenizer.ggml.pre, then rank-driven merges.
// Special and user-defined token strings in the text are matched first (longest first).
//
// Thread safety: a Tokenizer is immutable after from_gguf; copies share it and any number of
// threads may encode/decode at once. A StreamDecoder belongs to one thread.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "format/gguf.h"

namespace kvasir {

namespace tok {
struct TokenizerImpl;
}

struct EncodeOptions {
  bool add_special = true;    // add BOS / EOS as the vocabulary's add_bos / add_eos flags say
  bool parse_special = true;  // match control-token strings ("<s>", "<|im_end|>") in the text;
                              // false: they are plain text (user-defined tokens still match)
};

enum class TokenizerKind { spm, bpe };

class Tokenizer {
 public:
  // Reads and validates the tokenizer.ggml.* metadata; the File may be dropped afterwards.
  static Result<Tokenizer> from_gguf(const gguf::File& file);

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;

  // Concatenated pieces. skip_special hides control/unknown tokens (BOS, EOS, <|im_end|>...);
  // otherwise their text is shown. Ids outside the vocabulary contribute nothing. For SPM
  // vocabularies that add a space prefix, the leading space of the first text token is dropped
  // (also after leading special tokens such as BOS, as SentencePiece does), so
  // decode(encode(s)) == s. The result is raw bytes and may be invalid UTF-8 (byte tokens);
  // StreamDecoder yields its UTF-8-safe form. Unlike llama_detokenize, no
  // clean_up_tokenization_spaces pass is applied (it drops spaces before punctuation, so it is
  // lossy, and streamed pieces never get it either).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The bytes one token stands for, as decode shows it (special tokens as their text).
  std::string piece(int32_t id) const;

  // The most input bytes one token of encode() can stand for (>= 1), so that a text of B bytes
  // encodes to at least ceil(B / max_piece_bytes()) tokens, with or without special tokens and
  // parse_special. It is at least the longest piece(id), and can be larger: an SPM token may
  // cover a literal U+2581 (3 bytes) where its piece has a 1-byte space, so there it is the
  // longest token text. INT32_MAX (no bound) when some special token strips the whitespace
  // next to it (Phi-3: a whitespace run of any length vanishes into it) or the vocabulary
  // cannot spell every byte (encode drops those bytes).
  int32_t max_piece_bytes() const;

  int32_t bos() const;  // -1 when the vocabulary has none
  int32_t eos() const;
  int32_t eot() const;
  int32_t eom() const;
  int32_t unk() const;
  int32_t pad() const;
  bool add_bos() const;  // encode adds BOS when add_special
  bool add_eos() const;
  bool add_space_prefix() const;
  // End of generation: EOS, EOT, EOM and the end-of-turn tokens llama.cpp recognizes by text
  // (<end_of_turn>, <|im_end|>, <|eot_id|>, <|endoftext|>, <|end|>, ...).
  bool is_eog(int32_t id) const;
  std::span<const int32_t> eog_ids() const;  // sorted
  bool is_special(int32_t id) const;  // control or unknown: hidden by skip_special

  int32_t n_vocab() const;
  bool valid_id(int32_t id) const { return id >= 0 && id < n_vocab(); }
  const std::string& token_text(int32_t id) const;  // as stored; empty string for invalid ids
  int32_t token_to_id(std::string_view text) const;  // exact token text -> id, -1 if none
  float token_score(int32_t id) const;
  TokenizerKind kind() const;
  const std::string& pre() const;  // tokenizer.ggml.pre ("" if absent)

  const tok::TokenizerImpl& impl() const { return *impl_; }

 private:
  explicit Tokenizer(std::shared_ptr<const tok::TokenizerImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const tok::TokenizerImpl> impl_;
};

// Incremental detokenization for streaming output: push ids one at a time and get text that
// is always complete UTF-8. A multi-byte character split across tokens is held back until it is
// complete; bytes that can never become valid are replaced by U+FFFD (never held forever).
// For every way of splitting a sequence, the concatenated output (pushes + flush) equals
// tok::utf8_sanitize(decode(ids, skip_special)), i.e. decode itself whenever that is valid UTF-8.
class StreamDecoder {
 public:
  // continuation: the ids continue text that was decoded earlier (e.g. generation after a
  // prompt), so the first token keeps its leading space.
  StreamDecoder(const Tokenizer& tokenizer, bool skip_special, bool continuation = false);
  std::string push(int32_t id);
  std::string flush();  // emits what is held back (as U+FFFD); pushing may go on after it

 private:
  Tokenizer tokenizer_;  // a copy shares the vocabulary, so the decoder cannot dangle
  bool skip_special_;
  bool at_start_;
  std::string pending_;  // bytes of an incomplete UTF-8 sequence
};

}  // namespace kvasir
