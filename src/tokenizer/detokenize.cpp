// Token ids -> text: per-token pieces (as llama.cpp's token_to_piece), whole-sequence decode and
// the UTF-8-safe streaming decoder.
#include <cstdlib>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace kvasir {

namespace tok {

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "<0xNN>" -> NN, or -1.
int byte_token_value(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  const int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// SPM text: U+2581 -> space.
std::string unescape_spaces(const std::string& t) {
  std::string out;
  out.reserve(t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    if (t.compare(i, 3, "\xE2\x96\x81") == 0) {
      out += ' ';
      i += 2;
    } else {
      out += t[i];
    }
  }
  return out;
}

// Byte-level BPE text: each character stands for one byte. A character outside GPT-2's map
// (only in malformed vocabularies) is kept as it is.
std::string unmap_bytes(const std::string& t) {
  std::string out;
  out.reserve(t.size());
  for (size_t i = 0; i < t.size();) {
    uint32_t cp = 0;
    const size_t n = utf8_decode(t, i, cp);
    if (n == 0) {
      out += t[i++];
      continue;
    }
    const int b = gpt2_codepoint_to_byte(cp);
    if (b >= 0) {
      out += char(b);
    } else {
      out.append(t, i, n);
    }
    i += n;
  }
  return out;
}

}  // namespace

Status build_pieces(TokenizerImpl& impl) {
  const Vocab& v = impl.vocab;
  impl.pieces.resize(v.text.size());
  for (int32_t id = 0; id < v.size(); ++id) {
    const std::string& t = v.text[size_t(id)];
    std::string& p = impl.pieces[size_t(id)];
    // Same precedence as llama.cpp: special and user-defined tokens show their text as is.
    if (v.has(id, kAttrSpecial | kAttrUserDefined)) {
      p = t;
    } else if (v.has(id, kAttrNormal)) {
      p = v.kind == VocabKind::spm ? unescape_spaces(t) : unmap_bytes(t);
    } else if (v.has(id, kAttrByte)) {
      const int b = byte_token_value(t);
      if (b < 0)
        return Error{"tokenizer: token " + std::to_string(id) + " has type byte but its text '" + t +
                     "' is not <0xNN>"};
      p = std::string(1, char(b));
    } else {
      p.clear();  // unused / undefined tokens render as nothing
    }
  }
  return {};
}

void append_piece(const TokenizerImpl& impl, int32_t id, bool skip_special, bool& at_start, std::string& out) {
  const Vocab& v = impl.vocab;
  if (!v.valid(id)) return;
  if (v.has(id, kAttrSpecial)) {
    if (!skip_special) out += impl.pieces[size_t(id)];
    return;
  }
  const std::string& p = impl.pieces[size_t(id)];
  // The space the SPM encoder prefixed to the text is not part of it.
  const bool strip = at_start && v.add_space_prefix && !p.empty() && p[0] == ' ';
  out.append(p, strip ? 1 : 0);
  at_start = false;
}

}  // namespace tok

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  bool at_start = true;
  for (int32_t id : ids) tok::append_piece(*impl_, id, skip_special, at_start, out);
  return out;
}

std::string Tokenizer::piece(int32_t id) const { return valid_id(id) ? impl_->pieces[size_t(id)] : std::string(); }

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special, bool continuation)
    : tokenizer_(tokenizer), skip_special_(skip_special), at_start_(!continuation) {}

std::string StreamDecoder::push(int32_t id) {
  tok::append_piece(tokenizer_.impl(), id, skip_special_, at_start_, pending_);
  std::string out;
  const size_t used = tok::utf8_sanitize_append(pending_, out, false);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  tok::utf8_sanitize_append(pending_, out, true);
  pending_.clear();
  return out;
}

}  // namespace kvasir
