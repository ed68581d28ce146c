#include "tokenizer/utf8.h"

namespace kvasir::tok {

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

namespace {

// For a lead byte: how many continuation bytes follow and the allowed range of the first one
// (the narrowed ranges exclude overlong forms, surrogates and code points above U+10FFFF).
struct LeadInfo {
  int need;  // -1: never a valid lead byte
  uint8_t lo, hi;
};

LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {0, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {1, 0x80, 0xBF};
  if (b == 0xE0) return {2, 0xA0, 0xBF};
  if (b == 0xED) return {2, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {2, 0x80, 0xBF};
  if (b == 0xF0) return {3, 0x90, 0xBF};
  if (b == 0xF4) return {3, 0x80, 0x8F};
  if (b >= 0xF1 && b <= 0xF3) return {3, 0x80, 0xBF};
  return {-1, 0, 0};
}

// Length of the longest valid prefix of a sequence starting at s[i] (the "maximal subpart"),
// and whether the whole sequence is complete.
size_t scan_sequence(std::string_view s, size_t i, bool& complete) {
  const LeadInfo info = lead_info(uint8_t(s[i]));
  complete = false;
  if (info.need < 0) return 1;
  if (info.need == 0) {
    complete = true;
    return 1;
  }
  size_t k = 1;
  for (; k <= size_t(info.need); ++k) {
    if (i + k >= s.size()) return k;  // runs off the end: incomplete
    const uint8_t c = uint8_t(s[i + k]);
    const uint8_t lo = k == 1 ? info.lo : 0x80, hi = k == 1 ? info.hi : 0xBF;
    if (c < lo || c > hi) return k;  // ill-formed: the bytes so far are one maximal subpart
  }
  complete = true;
  return k;
}

}  // namespace

size_t utf8_decode(std::string_view s, size_t i, uint32_t& cp) {
  bool complete = false;
  const size_t n = scan_sequence(s, i, complete);
  if (!complete) return 0;
  const uint8_t b0 = uint8_t(s[i]);
  if (n == 1) {
    cp = b0;
  } else if (n == 2) {
    cp = (uint32_t(b0 & 0x1F) << 6) | (uint8_t(s[i + 1]) & 0x3F);
  } else if (n == 3) {
    cp = (uint32_t(b0 & 0x0F) << 12) | (uint32_t(uint8_t(s[i + 1]) & 0x3F) << 6) | (uint8_t(s[i + 2]) & 0x3F);
  } else {
    cp = (uint32_t(b0 & 0x07) << 18) | (uint32_t(uint8_t(s[i + 1]) & 0x3F) << 12) |
         (uint32_t(uint8_t(s[i + 2]) & 0x3F) << 6) | (uint8_t(s[i + 3]) & 0x3F);
  }
  return n;
}

bool utf8_is_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    bool complete = false;
    const size_t n = scan_sequence(s, i, complete);
    if (!complete) return false;
    i += n;
  }
  return true;
}

size_t utf8_sanitize_append(std::string_view in, std::string& out, bool final) {
  size_t i = 0;
  while (i < in.size()) {
    // Copy a run of ASCII at once: the common case.
    size_t j = i;
    while (j < in.size() && uint8_t(in[j]) < 0x80) ++j;
    out.append(in.data() + i, j - i);
    i = j;
    if (i == in.size()) break;
    bool complete = false;
    const size_t n = scan_sequence(in, i, complete);
    if (complete) {
      out.append(in.data() + i, n);
    } else if (i + n >= in.size() && !final && lead_info(uint8_t(in[i])).need > 0) {
      return i;  // a valid prefix cut by the end of the input: wait for more bytes
    } else {
      utf8_append(out, kReplacementChar);
    }
    i += n;
  }
  return in.size();
}

}  // namespace kvasir::tok
