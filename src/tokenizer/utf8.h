// UTF-8 helpers shared by the tokenizers and the detokenizer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvasir::tok {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Sequence length from the lead byte alone, the way llama.cpp splits text into "characters"
// (no validation: 0x80..0xBF count as 1, 0xF8..0xFF as 4). Callers clamp to the text end.
inline size_t utf8_len_from_lead(uint8_t c) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[c >> 4];
}

void utf8_append(std::string& out, uint32_t cp);

// Decodes the well-formed sequence at s[i]. Returns its length, or 0 if s[i] does not start a
// well-formed sequence (or the text ends inside one).
size_t utf8_decode(std::string_view s, size_t i, uint32_t& cp);

bool utf8_is_valid(std::string_view s);

// Appends `in` to `out` with every ill-formed subsequence replaced by U+FFFD (one per maximal
// subpart, as Unicode recommends). With final == false it stops before a trailing sequence that is
// incomplete but could still become valid, and returns how many bytes of `in` it consumed; the
// caller keeps the rest for later. Chunking never changes the total output.
size_t utf8_sanitize_append(std::string_view in, std::string& out, bool final);

inline std::string utf8_sanitize(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  utf8_sanitize_append(in, out, true);
  return out;
}

}  // namespace kvasir::tok
