#include "grammar/gbnf.h"

#include <optional>

#include "grammar/utf8_decode.h"

namespace kvasir::grammar {
namespace {

constexpr int kMaxNesting = 64;
constexpr uint32_t kMaxRepeat = 10000;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Result<Grammar> run() {
    skip_space(true);
    while (!failed_ && pos_ < s_.size()) {
      parse_rule();
      skip_space(true);
    }
    if (failed_) return Error{error_, ErrorCode::invalid_argument};
    return b_.build("root");
  }

 private:
  void fail(const std::string& what) {
    if (failed_) return;
    failed_ = true;
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') ++line, col = 1;
      else ++col;
    }
    error_ = "grammar: " + what + " at line " + std::to_string(line) + ", column " + std::to_string(col);
  }
  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }

  void skip_space(bool newline_ok) {
    while (!at_end()) {
      const char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\r') ++pos_;
      else if (c == '#') while (!at_end() && s_[pos_] != '\n') ++pos_;
      else if (c == '\n' && newline_ok) ++pos_;
      else break;
    }
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(s_[pos_])) ++pos_;
    if (pos_ == start) fail("expected a rule name");
    return std::string(s_.substr(start, pos_ - start));
  }

  void parse_rule() {
    const std::string name = parse_name();
    if (failed_) return;
    skip_space(false);
    if (s_.substr(pos_, 3) != "::=") return fail("expected '::=' after '" + name + "'");
    pos_ += 3;
    skip_space(true);
    const uint32_t r = b_.rule(name);
    if (b_.defined(r)) return fail("rule '" + name + "' is defined twice");
    parse_alternatives(r, 0);
    if (!failed_ && !at_end() && peek() != '\n') fail("unexpected '" + std::string(1, peek()) + "'");
  }

  // alternatives of rule r, until ')' (nested) or the end of the line (top level).
  void parse_alternatives(uint32_t r, int depth) {
    while (!failed_) {
      std::vector<Symbol> seq = parse_sequence(depth);
      if (failed_) return;
      b_.add_alternative(r, seq);
      if (peek() != '|') return;
      ++pos_;
      skip_space(true);
    }
  }

  std::vector<Symbol> parse_sequence(int depth) {
    std::vector<Symbol> seq;
    while (!failed_ && !at_end()) {
      const char c = peek();
      if (c == '|' || c == ')' || c == '\n') break;
      const size_t item_start = seq.size();
      if (!parse_atom(seq, depth)) break;
      skip_space(depth > 0);
      parse_repetitions(seq, item_start);
      skip_space(depth > 0);
    }
    return seq;
  }

  // One atom appended to seq; false when nothing atom-like is here.
  bool parse_atom(std::vector<Symbol>& seq, int depth) {
    const char c = peek();
    if (c == '"') {
      ++pos_;
      while (!failed_ && peek() != '"') {
        if (at_end() || peek() == '\n') return fail("unterminated string literal"), false;
        if (auto cp = parse_char()) seq.push_back(b_.chars(CharSet::single(*cp)));
      }
      ++pos_;
      return true;
    }
    if (c == '[') {
      ++pos_;
      const bool negated = peek() == '^';
      if (negated) ++pos_;
      std::vector<std::pair<uint32_t, uint32_t>> ranges;
      while (!failed_ && peek() != ']') {
        if (at_end() || peek() == '\n') return fail("unterminated character class"), false;
        auto lo = parse_char();
        if (!lo) return false;
        uint32_t hi = *lo;
        if (peek() == '-' && pos_ + 1 < s_.size() && s_[pos_ + 1] != ']') {
          ++pos_;
          auto h = parse_char();
          if (!h) return false;
          hi = *h;
          if (hi < *lo) return fail("character range out of order"), false;
        }
        ranges.push_back({*lo, hi});
      }
      ++pos_;
      const CharSet set = CharSet::of(std::move(ranges), negated);
      if (set.ranges.empty()) return fail("character class matches nothing"), false;
      seq.push_back(b_.chars(set));
      return true;
    }
    if (c == '.') {
      ++pos_;
      seq.push_back(b_.chars(CharSet::of({}, true)));
      return true;
    }
    if (c == '(') {
      if (depth >= kMaxNesting) return fail("groups nested too deeply"), false;
      ++pos_;
      skip_space(true);
      const uint32_t group = b_.fresh_rule("group");
      parse_alternatives(group, depth + 1);
      if (failed_) return false;
      skip_space(true);
      if (peek() != ')') return fail("expected ')'"), false;
      ++pos_;
      seq.push_back(Builder::ref(group));
      return true;
    }
    if (is_name_char(c)) {
      // A name followed by '::=' starts the next rule (only possible after a newline, so this is
      // a missing newline): refuse rather than misparse.
      const size_t save = pos_;
      const std::string name = parse_name();
      size_t p = pos_;
      while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t')) ++p;
      if (s_.substr(p, 3) == "::=") {
        pos_ = save;
        return fail("expected a newline before rule '" + name + "'"), false;
      }
      seq.push_back(Builder::ref(b_.rule(name)));
      return true;
    }
    return fail("unexpected '" + std::string(1, c) + "'"), false;
  }

  // *, +, ?, {m}, {m,}, {m,n} after the atom that starts at seq[start].
  void parse_repetitions(std::vector<Symbol>& seq, size_t start) {
    while (!failed_) {
      const char c = peek();
      uint32_t min = 0, max = 0;
      bool unbounded = false;
      if (c == '*') unbounded = true, ++pos_;
      else if (c == '+') min = 1, unbounded = true, ++pos_;
      else if (c == '?') max = 1, ++pos_;
      else if (c == '{') {
        ++pos_;
        skip_space(false);
        auto m = parse_int();
        if (!m) return;
        min = max = *m;
        skip_space(false);
        if (peek() == ',') {
          ++pos_;
          skip_space(false);
          if (peek() == '}') unbounded = true;
          else if (auto n = parse_int()) max = *n;
          else return;
          skip_space(false);
        }
        if (peek() != '}') return fail("expected '}'");
        ++pos_;
        if (!unbounded && max < min) return fail("repetition {m,n} with n < m");
      } else {
        return;
      }
      std::vector<Symbol> atom(seq.begin() + ptrdiff_t(start), seq.end());
      seq.resize(start);
      repeat(seq, atom, min, max, unbounded);
      skip_space(false);
    }
  }

  void repeat(std::vector<Symbol>& seq, const std::vector<Symbol>& atom, uint32_t min, uint32_t max, bool unbounded) {
    const uint64_t copies = uint64_t(min) + (unbounded ? 1 : max - min);
    if (copies * (atom.size() + 2) > Grammar::kMaxSymbols) return fail("repetition too large");
    for (uint32_t i = 0; i < min; ++i) seq.insert(seq.end(), atom.begin(), atom.end());
    if (unbounded) {
      if (atom.size() == 1 && atom[0].kind == Symbol::Kind::Chars) {
        seq.push_back({Symbol::Kind::Star, atom[0].index});
        return;
      }
      const uint32_t r = b_.fresh_rule("star");  // r ::= atom r | (empty): a tail call, no stack growth
      std::vector<Symbol> loop = atom;
      loop.push_back(Builder::ref(r));
      b_.add_alternative(r, loop);
      b_.add_alternative(r, {});
      seq.push_back(Builder::ref(r));
      return;
    }
    // Up to (max - min) more, each optional after the previous: o_1 ::= atom o_2 | (empty) ...
    uint32_t next = 0;
    bool have_next = false;
    for (uint32_t i = 0; i < max - min; ++i) {
      const uint32_t r = b_.fresh_rule("opt");
      std::vector<Symbol> alt = atom;
      if (have_next) alt.push_back(Builder::ref(next));
      b_.add_alternative(r, alt);
      b_.add_alternative(r, {});
      next = r;
      have_next = true;
    }
    if (have_next) seq.push_back(Builder::ref(next));
  }

  std::optional<uint32_t> parse_int() {
    const size_t start = pos_;
    uint64_t v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + uint64_t(peek() - '0');
      if (v > kMaxRepeat) return fail("repetition count over " + std::to_string(kMaxRepeat)), std::nullopt;
      ++pos_;
    }
    if (pos_ == start) return fail("expected a number"), std::nullopt;
    return uint32_t(v);
  }

  std::optional<uint32_t> parse_hex(size_t digits) {
    uint32_t v = 0;
    for (size_t i = 0; i < digits; ++i) {
      const char c = peek();
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) return fail("bad hex escape"), std::nullopt;
      v = v * 16 + uint32_t(d);
      ++pos_;
    }
    if (v > 0x10FFFF) return fail("code point out of range"), std::nullopt;
    return v;
  }

  // One character of a literal or class, escapes decoded.
  std::optional<uint32_t> parse_char() {
    if (peek() == '\\') {
      ++pos_;
      const char e = peek();
      ++pos_;
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '[': case ']': case '-': case '^': case '\'': return uint32_t(e);
        case 'x': return parse_hex(2);
        case 'u': return parse_hex(4);
        case 'U': return parse_hex(8);
        default: return fail("unknown escape '\\" + std::string(1, e) + "'"), std::nullopt;
      }
    }
    uint32_t cp = 0;
    const size_t n = decode_utf8(s_.substr(pos_), cp);
    if (n == 0) return fail("invalid UTF-8"), std::nullopt;
    pos_ += n;
    return cp;
  }

  std::string_view s_;
  size_t pos_ = 0;
  Builder b_;
  bool failed_ = false;
  std::string error_;
};

}  // namespace

Result<Grammar> parse_gbnf(std::string_view text) {
  if (text.size() > kMaxGbnfBytes) return Error{"grammar: text over 1 MiB", ErrorCode::too_large};
  return Parser(text).run();
}

}  // namespace kvasir::grammar
