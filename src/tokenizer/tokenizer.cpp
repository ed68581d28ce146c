// Tokenizer construction, encode, and accessors. Encode follows llama.cpp's
// llama_vocab::impl::tokenize: split out special tokens, tokenize each raw fragment, add BOS/EOS.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <limits>

#include "tokenizer/tokenizer_impl.h"

namespace kvasir {

using tok::Fragment;
using tok::TokenizerImpl;
using tok::VocabKind;

namespace {

// The most input bytes one token can stand for (see max_piece_bytes). encode() splits the text
// into special-token matches, each covering exactly its text (which is its piece), and raw
// fragments, where a token covers what it was merged from:
//  - BPE: one mapped character (1-2 bytes of token text) per input byte, i.e. its code points;
//    for a normal token that is its piece.
//  - SPM: its text in the escaped fragment, which is never shorter than the input (a space grows
//    to U+2581, all else stays), i.e. its text length; a byte-fallback token covers one byte.
// No bound where special tokens strip whitespace (the stripped run belongs to no token) or where
// encode drops bytes it cannot spell (StarCoder and Falcon lack some byte tokens).
int32_t max_input_bytes_per_token(const TokenizerImpl& t) {
  constexpr int32_t kNoBound = std::numeric_limits<int32_t>::max();
  const tok::Vocab& v = t.vocab;
  const bool spm = v.kind == VocabKind::spm;
  if (spm ? !t.spm.spells_every_byte() : !t.bpe.every_symbol_is_token()) return kNoBound;
  size_t most = 1;
  for (int32_t id = 0; id < v.size(); ++id) {
    if (v.has(id, tok::kAttrLstrip | tok::kAttrRstrip)) return kNoBound;
    const std::string& text = v.text[size_t(id)];
    size_t covers = text.size();
    if (!spm)  // code points: bytes that do not continue a UTF-8 sequence
      covers = size_t(std::count_if(text.begin(), text.end(), [](char c) { return (uint8_t(c) & 0xC0) != 0x80; }));
    most = std::max({most, covers, t.pieces[size_t(id)].size()});
  }
  return int32_t(std::min<size_t>(most, size_t(kNoBound)));
}

}  // namespace

Result<Tokenizer> Tokenizer::from_gguf(const gguf::File& file) {
  auto impl = std::make_shared<TokenizerImpl>();
  if (Status s = tok::load_vocab(file, impl->vocab); !s) return Error{s.error()};
  impl->special.build(impl->vocab);
  if (impl->vocab.kind == VocabKind::spm) {
    impl->spm.build(impl->vocab);
  } else {
    if (Status s = impl->bpe.build(impl->vocab, *file.find("tokenizer.ggml.merges")); !s) return Error{s.error()};
    if (Status s = impl->pre.build(impl->vocab.pre); !s) return Error{s.error()};
  }
  if (Status s = tok::build_pieces(*impl); !s) return Error{s.error()};
  impl->max_piece_bytes = max_input_bytes_per_token(*impl);
  return Tokenizer(std::move(impl));
}

namespace {

// SPM: spaces become U+2581; a space is prepended at the start of the text and after each
// special token when the vocabulary asks for it.
void encode_spm(const TokenizerImpl& t, std::string_view text, const std::vector<Fragment>& frags,
                std::vector<int32_t>& out, tok::SegmentCache* cache) {
  std::string escaped;
  bool prev_special = true;
  for (const Fragment& f : frags) {
    if (f.token != tok::kNoToken) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    escaped.clear();
    if (t.vocab.add_space_prefix && prev_special) escaped += "\xE2\x96\x81";
    for (size_t i = f.begin; i < f.end; ++i) {
      if (text[i] == ' ') {
        escaped += "\xE2\x96\x81";
      } else {
        escaped += text[i];
      }
    }
    t.spm.encode(escaped, out, cache);
    prev_special = false;
  }
}

void encode_bpe(const TokenizerImpl& t, std::string_view text, const std::vector<Fragment>& frags,
                std::vector<int32_t>& out, tok::SegmentCache* cache) {
  std::vector<tok::Span> words;
  for (const Fragment& f : frags) {
    if (f.token != tok::kNoToken) {
      out.push_back(f.token);
      continue;
    }
    const std::string_view raw = text.substr(f.begin, f.end - f.begin);
    t.pre.split(raw, words);
    for (const tok::Span& w : words) t.bpe.encode_word(raw.substr(w.begin, w.end - w.begin), out, cache);
  }
}

}  // namespace

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  const TokenizerImpl& t = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (options.add_special && t.vocab.add_bos) out.push_back(t.vocab.bos);
  std::vector<Fragment> frags;
  t.special.partition(text, options.parse_special, frags);
  tok::SegmentCache cache;
  tok::SegmentCache* use_cache = text.size() >= tok::SegmentCache::kMinText ? &cache : nullptr;
  if (t.vocab.kind == VocabKind::spm) {
    encode_spm(t, text, frags, out, use_cache);
  } else {
    encode_bpe(t, text, frags, out, use_cache);
  }
  if (options.add_special && t.vocab.add_eos) out.push_back(t.vocab.eos);
  return out;
}

int32_t Tokenizer::bos() const { return impl_->vocab.bos; }
int32_t Tokenizer::eos() const { return impl_->vocab.eos; }
int32_t Tokenizer::eot() const { return impl_->vocab.eot; }
int32_t Tokenizer::eom() const { return impl_->vocab.eom; }
int32_t Tokenizer::unk() const { return impl_->vocab.unk; }
int32_t Tokenizer::pad() const { return impl_->vocab.pad; }
bool Tokenizer::add_bos() const { return impl_->vocab.add_bos; }
bool Tokenizer::add_eos() const { return impl_->vocab.add_eos; }
bool Tokenizer::add_space_prefix() const { return impl_->vocab.add_space_prefix; }
int32_t Tokenizer::n_vocab() const { return impl_->vocab.size(); }
int32_t Tokenizer::max_piece_bytes() const { return impl_->max_piece_bytes; }
TokenizerKind Tokenizer::kind() const {
  return impl_->vocab.kind == VocabKind::spm ? TokenizerKind::spm : TokenizerKind::bpe;
}
const std::string& Tokenizer::pre() const { return impl_->vocab.pre_name; }

bool Tokenizer::is_eog(int32_t id) const {
  const auto& eog = impl_->vocab.eog;
  return std::binary_search(eog.begin(), eog.end(), id);
}

std::span<const int32_t> Tokenizer::eog_ids() const { return impl_->vocab.eog; }

bool Tokenizer::is_special(int32_t id) const { return valid_id(id) && impl_->vocab.has(id, tok::kAttrSpecial); }

const std::string& Tokenizer::token_text(int32_t id) const {
  static const std::string kEmpty;
  return valid_id(id) ? impl_->vocab.text[size_t(id)] : kEmpty;
}

int32_t Tokenizer::token_to_id(std::string_view text) const { return impl_->vocab.index.find(text); }

float Tokenizer::token_score(int32_t id) const { return valid_id(id) ? impl_->vocab.score[size_t(id)] : 0.0f; }

}  // namespace kvasir
