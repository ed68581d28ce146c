#include "chat/jinja/unicode.h"

namespace kvasir::jinja::uni {

namespace {

constexpr char32_t kEscapeBase = 0xDC00;  // invalid byte b decodes to U+DC00 + b (b >= 0x80)

// Latin Extended-B: the digraphs (Ǆ ǅ ǆ ...) and the regular upper/lower pairs.
bool latin_b_pair_range(char32_t c, bool& even_upper) {
  if ((c >= 0x1CD && c <= 0x1DC)) { even_upper = false; return true; }
  if ((c >= 0x1DE && c <= 0x1EF) || (c >= 0x1F8 && c <= 0x21F) || (c >= 0x222 && c <= 0x233) ||
      (c >= 0x246 && c <= 0x24F) || c == 0x1F4 || c == 0x1F5) {
    even_upper = true;
    return true;
  }
  return false;
}

char32_t latin_b_upper(char32_t c) {
  // DŽ Dž dž, LJ Lj lj, NJ Nj nj, DZ Dz dz: upper is the first of each triple
  if (c >= 0x1C4 && c <= 0x1CC) return c - (c - 0x1C4) % 3;
  if (c >= 0x1F1 && c <= 0x1F3) return 0x1F1;
  bool even_upper;
  if (latin_b_pair_range(c, even_upper)) return (c % 2 == 0) == even_upper ? c : c - 1;
  return c;
}

char32_t latin_b_lower(char32_t c) {
  if (c >= 0x1C4 && c <= 0x1CC) return c - (c - 0x1C4) % 3 + 2;
  if (c >= 0x1F1 && c <= 0x1F3) return 0x1F3;
  bool even_upper;
  if (latin_b_pair_range(c, even_upper)) return (c % 2 == 0) == even_upper ? c + 1 : c;
  return c;
}

// Simple one-to-one case mappings for the ranges we cover; anything else maps to itself.
char32_t simple_upper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  if (c == 0xB5) return 0x39C;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if (c == 0x130 || c == 0x138 || c == 0x149 || c == 0x178) return c;
    bool odd_is_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    bool is_lower_form = odd_is_upper ? (c % 2 == 0) : (c % 2 == 1);
    return is_lower_form ? c - 1 : c;
  }
  if (c >= 0x180 && c <= 0x24F) return latin_b_upper(c);
  if (c >= 0x3B1 && c <= 0x3C9) return c == 0x3C2 ? 0x3A3 : c - 32;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if ((c >= 0x461 && c <= 0x481) || (c >= 0x48B && c <= 0x4BF) || (c >= 0x4D1 && c <= 0x52F)) {
    return c % 2 == 1 ? c - 1 : c;
  }
  if (c >= 0x4C2 && c <= 0x4CE) return c % 2 == 0 ? c - 1 : c;
  if (c == 0x4CF) return 0x4C0;
  if (c >= 0x561 && c <= 0x586) return c - 48;
  if ((c >= 0x1E00 && c <= 0x1E95) || (c >= 0x1EA0 && c <= 0x1EFF)) return c % 2 == 1 ? c - 1 : c;
  if (c >= 0x2170 && c <= 0x217F) return c - 16;
  if (c >= 0x24D0 && c <= 0x24E9) return c - 26;
  if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
  return c;
}

char32_t simple_lower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x130) return 'i';  // full mapping adds U+0307, see append_lower
    if (c == 0x178) return 0xFF;
    if (c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17F) return c;
    bool odd_is_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    bool is_upper_form = odd_is_upper ? (c % 2 == 1) : (c % 2 == 0);
    return is_upper_form ? c + 1 : c;
  }
  if (c >= 0x180 && c <= 0x24F) return latin_b_lower(c);
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if ((c >= 0x460 && c <= 0x480) || (c >= 0x48A && c <= 0x4BE) || (c >= 0x4D0 && c <= 0x52E)) {
    return c % 2 == 0 ? c + 1 : c;
  }
  if (c >= 0x4C1 && c <= 0x4CD) return c % 2 == 1 ? c + 1 : c;
  if (c == 0x4C0) return 0x4CF;
  if (c >= 0x531 && c <= 0x556) return c + 48;
  if (c == 0x1E9E) return 0xDF;
  if ((c >= 0x1E00 && c <= 0x1E94) || (c >= 0x1EA0 && c <= 0x1EFE)) return c % 2 == 0 ? c + 1 : c;
  if (c >= 0x2160 && c <= 0x216F) return c + 16;
  if (c >= 0x24B6 && c <= 0x24CF) return c + 26;
  if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
  return c;
}

bool in(char32_t c, char32_t lo, char32_t hi) { return c >= lo && c <= hi; }

}  // namespace

std::vector<char32_t> decode(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 < 0x80) { out.push_back(b0); ++i; continue; }
    int n = b0 >= 0xF0 && b0 <= 0xF4 ? 3 : b0 >= 0xE0 && b0 <= 0xEF ? 2 : b0 >= 0xC2 && b0 <= 0xDF ? 1 : -1;
    char32_t cp = n == 3 ? (b0 & 0x07) : n == 2 ? (b0 & 0x0F) : (b0 & 0x1F);
    bool ok = n > 0 && i + n < s.size();
    for (int k = 1; ok && k <= n; ++k) {
      auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) { ok = false; break; }
      cp = (cp << 6) | (b & 0x3F);
    }
    if (ok) {
      // reject overlong forms, surrogates and values past U+10FFFF
      if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) ok = false;
    }
    if (!ok) { out.push_back(kEscapeBase + b0); ++i; continue; }
    out.push_back(cp);
    i += n + 1;
  }
  return out;
}

void append(std::string& out, char32_t cp) {
  if (cp >= kEscapeBase + 0x80 && cp <= kEscapeBase + 0xFF) { out += static_cast<char>(cp - kEscapeBase); return; }
  if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;  // a lone surrogate cannot be encoded
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp <= 0x10FFFF) {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += "\xEF\xBF\xBD";
  }
}

std::string encode(const std::vector<char32_t>& cps, size_t begin, size_t end) {
  std::string out;
  out.reserve(end - begin);
  for (size_t i = begin; i < end; ++i) append(out, cps[i]);
  return out;
}

bool is_valid_utf8(std::string_view s) {
  for (char32_t c : decode(s)) {
    if (c >= kEscapeBase + 0x80 && c <= kEscapeBase + 0xFF) return false;
  }
  return true;
}

size_t length(std::string_view s) {
  if (is_ascii(s)) return s.size();
  return decode(s).size();
}

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         in(c, 0x2000, 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_cased(char32_t c) { return simple_upper(c) != c || simple_lower(c) != c || c == 0xDF || c == 0x138 || c == 0x149 || c == 0x130; }
bool is_titlecase(char32_t c) { return c == 0x1C5 || c == 0x1C8 || c == 0x1CB || c == 0x1F2; }
bool is_upper(char32_t c) { return simple_lower(c) != c && !is_titlecase(c); }
bool is_lower(char32_t c) { return (simple_upper(c) != c && !is_titlecase(c)) || c == 0xDF || c == 0x138 || c == 0x149; }

bool is_alpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (is_cased(c)) return true;
  return c == 0xAA || c == 0xBA || in(c, 0x180, 0x2AF) || in(c, 0x388, 0x3FF) || in(c, 0x400, 0x481) ||
         in(c, 0x48A, 0x52F) || in(c, 0x531, 0x556) || in(c, 0x561, 0x587) || in(c, 0x5D0, 0x5EA) ||
         in(c, 0x620, 0x64A) || in(c, 0x671, 0x6D3) || in(c, 0x904, 0x939) || in(c, 0x958, 0x961) ||
         in(c, 0x985, 0x9B9) || in(c, 0xB85, 0xBB9) || in(c, 0xE01, 0xE30) || in(c, 0xE40, 0xE46) ||
         in(c, 0x10D0, 0x10FA) || in(c, 0x1100, 0x11FF) || in(c, 0x1200, 0x135A) || in(c, 0x1E00, 0x1FBC) ||
         in(c, 0x3041, 0x3096) || in(c, 0x30A1, 0x30FA) || in(c, 0x30FC, 0x30FF) || in(c, 0x3131, 0x318E) ||
         in(c, 0x3400, 0x4DBF) || in(c, 0x4E00, 0x9FFF) || in(c, 0xAC00, 0xD7A3) || in(c, 0xF900, 0xFAFF) ||
         in(c, 0x20000, 0x2FFFF);
}

bool is_digit(char32_t c) {
  return in(c, '0', '9') || in(c, 0x660, 0x669) || in(c, 0x6F0, 0x6F9) || in(c, 0x966, 0x96F) ||
         in(c, 0x9E6, 0x9EF) || in(c, 0xE50, 0xE59) || in(c, 0xFF10, 0xFF19);
}

bool is_word(char32_t c) { return c == '_' || is_alpha(c) || is_digit(c) || in(c, 0x300, 0x36F); }

bool is_printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c < 0x600) return true;
  if (in(c, 0x600, 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x8E2 || c == 0x1680 || c == 0x180E) return false;
  if (in(c, 0x2000, 0x200F) || in(c, 0x2028, 0x202F) || in(c, 0x205F, 0x2064) || in(c, 0x2066, 0x206F)) return false;
  if (c == 0x3000 || c == 0xFEFF || in(c, 0xFFF9, 0xFFFB) || c == 0xFFFE || c == 0xFFFF) return false;
  if (in(c, 0xD800, 0xF8FF)) return false;  // surrogates and private use
  if (c == 0x110BD || in(c, 0x1D173, 0x1D17A) || c == 0xE0001 || in(c, 0xE0020, 0xE007F)) return false;
  if (c >= 0xF0000) return false;
  return true;
}

void append_upper(std::string& out, char32_t c) {
  if (c == 0xDF) { out += "SS"; return; }
  if (c == 0x149) { append(out, 0x2BC); out += 'N'; return; }
  append(out, simple_upper(c));
}

void append_lower(std::string& out, char32_t c) {
  if (c == 0x130) { out += 'i'; append(out, 0x307); return; }
  append(out, simple_lower(c));
}

void append_title(std::string& out, char32_t c) {
  if (c == 0xDF) { out += "Ss"; return; }
  if (c >= 0x1C4 && c <= 0x1CC) { append(out, c - (c - 0x1C4) % 3 + 1); return; }
  if (c >= 0x1F1 && c <= 0x1F3) { append(out, 0x1F2); return; }
  append_upper(out, c);
}

std::string upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  if (is_ascii(s)) {
    for (char c : s) out += (c >= 'a' && c <= 'z') ? static_cast<char>(c - 32) : c;
    return out;
  }
  for (char32_t c : decode(s)) append_upper(out, c);
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  if (is_ascii(s)) {
    for (char c : s) out += (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c;
    return out;
  }
  for (char32_t c : decode(s)) append_lower(out, c);
  return out;
}

}  // namespace kvasir::jinja::uni
