// UTF-8 and the slice of Unicode that Python's str methods need: decoding to code points, whitespace
// (str.isspace), simple case mapping, and printability (for repr). Case mapping covers Latin, Greek,
// Cyrillic, Armenian and fullwidth Latin; other scripts are treated as uncased.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir::jinja::uni {

// Decodes leniently: a byte that is not part of valid UTF-8 becomes U+DC80..U+DCFF ("surrogateescape"),
// which encode() writes back as that same byte, so slicing never corrupts bytes it does not understand.
std::vector<char32_t> decode(std::string_view s);
void append(std::string& out, char32_t cp);
std::string encode(const std::vector<char32_t>& cps, size_t begin, size_t end);
inline std::string encode(const std::vector<char32_t>& cps) { return encode(cps, 0, cps.size()); }
bool is_valid_utf8(std::string_view s);
size_t length(std::string_view s);  // in code points
bool is_ascii(std::string_view s);

bool is_space(char32_t c);      // str.isspace
bool is_alpha(char32_t c);      // approximation of str.isalpha
bool is_digit(char32_t c);      // str.isdigit (decimal digits of common scripts)
bool is_cased(char32_t c);
bool is_upper(char32_t c);
bool is_lower(char32_t c);
bool is_printable(char32_t c);  // str.isprintable, for repr
bool is_word(char32_t c);       // regex \w

// Full case mapping may expand one code point to several (ß → SS); these append the result.
void append_upper(std::string& out, char32_t c);
void append_lower(std::string& out, char32_t c);
void append_title(std::string& out, char32_t c);

std::string upper(std::string_view s);
std::string lower(std::string_view s);

}  // namespace kvasir::jinja::uni
