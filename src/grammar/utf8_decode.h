// UTF-8 for the grammar layer: whole code points (grammar text) and the byte-at-a-time partial
// state the matcher keeps while a token ends inside a character.
#pragma once
#include <cstdint>
#include <string_view>

namespace kvasir::grammar {

// Decodes one well-formed code point at the start of s (no overlongs, surrogates or values past
// U+10FFFF); returns its length in bytes, 0 when s does not start with one.
inline size_t decode_utf8(std::string_view s, uint32_t& cp) {
  if (s.empty()) return 0;
  const auto b0 = uint8_t(s[0]);
  if (b0 < 0x80) return cp = b0, 1;
  size_t n = b0 >= 0xF0 && b0 <= 0xF4 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC2 && b0 <= 0xDF ? 2 : 0;
  if (n == 0 || s.size() < n) return 0;
  uint32_t v = b0 & (0x7F >> n);
  for (size_t i = 1; i < n; ++i) {
    const auto b = uint8_t(s[i]);
    if ((b & 0xC0) != 0x80) return 0;
    v = v << 6 | (b & 0x3F);
  }
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < kMin[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  cp = v;
  return n;
}

// A code point in progress: 0 between characters, else (length << 28 | remaining << 24 | bits so
// far). step() feeds one byte; the range of code points still reachable is [lo, hi] (only valid
// ones: an overlong or out-of-range prefix has an empty range).
struct Utf8Partial {
  uint32_t state = 0;

  uint32_t length() const { return state >> 28; }
  uint32_t remaining() const { return (state >> 24) & 0xF; }
  uint32_t bits() const { return state & 0xFFFFFF; }

  // Feeds byte b. Returns false on a byte that cannot continue (or start) a character.
  bool step(uint8_t b) {
    if (state == 0) {
      if (b < 0x80) return state = 0, complete = b, true;
      uint32_t n = b >= 0xF0 && b <= 0xF4 ? 4 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xC2 && b <= 0xDF ? 2 : 0;
      if (n == 0) return false;
      state = n << 28 | (n - 1) << 24 | (b & (0x7F >> n));
      return true;
    }
    if ((b & 0xC0) != 0x80) return false;
    const uint32_t n = length(), rem = remaining() - 1, v = bits() << 6 | (b & 0x3F);
    if (rem == 0) return state = 0, complete = v, true;
    state = n << 28 | rem << 24 | v;
    return true;
  }
  bool in_progress() const { return state != 0; }
  // After a step that ended a character: its code point (valid only when !in_progress()).
  uint32_t complete = 0;
  // Reachable completions while in progress.
  uint32_t lo() const {
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    const uint32_t base = bits() << (6 * remaining());
    return base < kMin[length()] ? kMin[length()] : base;
  }
  uint32_t hi() const {
    const uint32_t top = (bits() << (6 * remaining())) | ((1u << (6 * remaining())) - 1);
    return top > 0x10FFFF ? 0x10FFFF : top;
  }
};

}  // namespace kvasir::grammar
