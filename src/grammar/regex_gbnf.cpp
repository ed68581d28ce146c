#include "grammar/regex_gbnf.h"

#include <cstdio>
#include <optional>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/utf8_decode.h"

namespace kvasir::grammar {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

constexpr int kMaxNesting = 64;

std::string hex_cp(uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\U%08X", cp);
  return buf;
}

// The GBNF for one character from `set` inside a JSON string: the plain ones as a class, the
// ones JSON escapes as their escape sequences.
std::string json_char(const CharSet& set) {
  std::vector<std::string> alts;
  const CharSet plain = CharSet::of({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true);
  Ranges keep;
  for (auto [lo, hi] : set.ranges)
    for (auto [plo, phi] : plain.ranges) {
      const uint32_t a = std::max(lo, plo), b = std::min(hi, phi);
      if (a <= b) keep.push_back({a, b});
    }
  if (!keep.empty()) {
    std::string cls = "[";
    for (auto [lo, hi] : keep) cls += lo == hi ? hex_cp(lo) : hex_cp(lo) + "-" + hex_cp(hi);
    alts.push_back(cls + "]");
  }
  for (uint32_t c = 0; c < 0x20; ++c)
    if (set.contains(c)) {
      const char* named = c == '\n' ? "n" : c == '\t' ? "t" : c == '\r' ? "r" : c == '\b' ? "b" : c == '\f' ? "f" : nullptr;
      char buf[16];
      if (named) std::snprintf(buf, sizeof buf, "\"\\\\%s\"", named);
      else std::snprintf(buf, sizeof buf, "\"\\\\u%04X\"", c);
      alts.push_back(buf);
    }
  if (set.contains('"')) alts.push_back("\"\\\\\\\"\"");
  if (set.contains('\\')) alts.push_back("\"\\\\\\\\\"");
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
  return out + " )";
}

struct Piece {
  std::string text;
  bool single_class = false;  // one bracket class: `*` on it becomes a Star
};

class RegexParser {
 public:
  explicit RegexParser(std::string_view p) : s_(p) {}

  Result<std::string> run() {
    if (!s_.empty() && s_[0] == '^') s_.remove_prefix(1);
    if (!s_.empty() && s_.back() == '$' && (s_.size() < 2 || s_[s_.size() - 2] != '\\')) s_.remove_suffix(1);
    std::string out = alternation(0);
    if (!error_ && pos_ < s_.size()) fail("unbalanced ')'");
    if (error_) return Error{*error_, ErrorCode::invalid_argument};
    return out.empty() ? std::string("\"\"") : out;
  }

 private:
  void fail(const std::string& m) {
    if (!error_) error_ = "pattern: " + m + " at offset " + std::to_string(pos_);
  }
  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }

  std::string alternation(int depth) {
    std::string out = sequence(depth);
    while (!error_ && peek() == '|') {
      ++pos_;
      out = (out.empty() ? "\"\"" : out) + " | " + [&] { std::string s = sequence(depth); return s.empty() ? std::string("\"\"") : s; }();
    }
    return out;
  }

  std::string sequence(int depth) {
    std::string out;
    while (!error_ && !at_end() && peek() != '|' && peek() != ')') {
      Piece p = atom(depth);
      if (error_) break;
      p.text = quantified(std::move(p));
      out += (out.empty() ? "" : " ") + p.text;
    }
    return out;
  }

  std::string quantified(Piece p) {
    std::string q;
    const char c = peek();
    if (c == '*' || c == '+' || c == '?') {
      q = std::string(1, c);
      ++pos_;
    } else if (c == '{') {
      const size_t close = s_.find('}', pos_);
      if (close == std::string_view::npos) return fail("unterminated '{'"), p.text;
      q = std::string(s_.substr(pos_, close - pos_ + 1));
      for (char d : q.substr(1, q.size() - 2))
        if (!(d >= '0' && d <= '9') && d != ',') return fail("bad repetition " + q), p.text;
      pos_ = close + 1;
    } else {
      return p.text;
    }
    if (peek() == '?' || peek() == '+') ++pos_;  // lazy / possessive: the same language
    if (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{') return fail("repeated quantifier"), p.text;
    return (p.single_class ? p.text : "( " + p.text + " )") + q;
  }

  Piece atom(int depth) {
    const char c = peek();
    if (c == '(') {
      if (depth >= kMaxNesting) return fail("groups nested too deeply"), Piece{};
      ++pos_;
      if (peek() == '?') {
        const std::string_view rest = s_.substr(pos_);
        if (rest.rfind("?:", 0) == 0) pos_ += 2;
        else if (rest.rfind("?<", 0) == 0 && rest.size() > 2 && rest[2] != '=' && rest[2] != '!') pos_ = s_.find('>', pos_) + 1;
        else if (rest.rfind("?P<", 0) == 0) pos_ = s_.find('>', pos_) + 1;
        else return fail("lookaround and inline flags are not supported"), Piece{};
        if (pos_ == 0) return fail("unterminated group name"), Piece{};
      }
      std::string inner = alternation(depth + 1);
      if (peek() != ')') return fail("missing ')'"), Piece{};
      ++pos_;
      return {inner.empty() ? "\"\"" : "( " + inner + " )", false};
    }
    if (c == '[') return {json_char(bracket()), true};
    if (c == '.') {
      ++pos_;
      return {json_char(CharSet::of({{'\n', '\n'}}, true)), true};
    }
    if (c == '^' || c == '$') return fail("anchors inside a pattern"), Piece{};
    if (c == '*' || c == '+' || c == '?' || c == '{') return fail("nothing to repeat"), Piece{};
    Ranges r;
    if (!escape_or_char(r, false)) return Piece{};
    return {json_char(CharSet::of(r)), true};
  }

  // One character or class escape into r; false on error.
  bool escape_or_char(Ranges& r, bool in_class) {
    if (peek() != '\\') {
      uint32_t cp = 0;
      const size_t n = decode_utf8(s_.substr(pos_), cp);
      if (n == 0) return fail("invalid UTF-8"), false;
      pos_ += n;
      r.push_back({cp, cp});
      return true;
    }
    ++pos_;
    if (at_end()) return fail("trailing backslash"), false;
    const char e = s_[pos_++];
    auto add = [&](Ranges x, bool negate) {
      const CharSet set = CharSet::of(std::move(x), negate);
      r.insert(r.end(), set.ranges.begin(), set.ranges.end());
      return true;
    };
    switch (e) {
      case 'd': return add({{'0', '9'}}, false);
      case 'D': return add({{'0', '9'}}, true);
      case 'w': return add({{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'_', '_'}}, false);
      case 'W': return add({{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'_', '_'}}, true);
      case 's': return add({{' ', ' '}, {'\t', '\r'}}, false);
      case 'S': return add({{' ', ' '}, {'\t', '\r'}}, true);
      case 'n': return add({{'\n', '\n'}}, false);
      case 't': return add({{'\t', '\t'}}, false);
      case 'r': return add({{'\r', '\r'}}, false);
      case 'f': return add({{'\f', '\f'}}, false);
      case 'v': return add({{'\v', '\v'}}, false);
      case 'u': {
        if (pos_ + 4 > s_.size()) return fail("short \\u escape"), false;
        uint32_t v = 0;
        for (int i = 0; i < 4; ++i) {
          const char h = s_[pos_++];
          const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
          if (d < 0) return fail("bad \\u escape"), false;
          v = v * 16 + uint32_t(d);
        }
        return add({{v, v}}, false);
      }
      case 'b':
        if (in_class) return add({{'\b', '\b'}}, false);
        return fail("word boundaries (\\b) are not supported"), false;
      default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
          return fail(std::string("the escape \\") + e + " is not supported"), false;
        return add({{uint32_t(uint8_t(e)), uint32_t(uint8_t(e))}}, false);
    }
  }

  CharSet bracket() {
    ++pos_;  // '['
    const bool negated = peek() == '^';
    if (negated) ++pos_;
    Ranges r;
    bool first = true;
    while (!error_) {
      if (at_end()) return fail("unterminated '['"), CharSet{};
      if (peek() == ']' && !first) break;
      first = false;
      Ranges one;
      const bool escaped_class = peek() == '\\' && pos_ + 1 < s_.size() && std::string_view("dDwWsS").find(s_[pos_ + 1]) != std::string_view::npos;
      if (!escape_or_char(one, true)) return CharSet{};
      if (!escaped_class && one.size() == 1 && peek() == '-' && pos_ + 1 < s_.size() && s_[pos_ + 1] != ']') {
        ++pos_;
        Ranges hi;
        if (!escape_or_char(hi, true)) return CharSet{};
        if (hi.size() != 1 || hi[0].first < one[0].first) return fail("bad range in '[...]'"), CharSet{};
        one[0].second = hi[0].first;
      }
      r.insert(r.end(), one.begin(), one.end());
    }
    ++pos_;  // ']'
    CharSet set = CharSet::of(std::move(r), negated);
    if (set.ranges.empty()) fail("a class that matches nothing");
    return set;
  }

  std::string_view s_;
  size_t pos_ = 0;
  std::optional<std::string> error_;
};

}  // namespace

Result<std::string> regex_to_gbnf(std::string_view pattern) {
  if (pattern.size() > 4096) return Error{"pattern: longer than 4096 bytes", ErrorCode::invalid_argument};
  return RegexParser(pattern).run();
}

}  // namespace kvasir::grammar
