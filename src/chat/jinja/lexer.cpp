#include "chat/jinja/lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "chat/jinja/error.h"
#include "chat/jinja/unicode.h"

namespace kvasir::jinja {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Python's str.isspace over UTF-8: length in bytes of the whitespace character at s[i], 0 if none.
size_t space_at(std::string_view s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return uni::is_space(c) ? 1 : 0;
  size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  if (i + n > s.size()) return 0;
  auto cps = uni::decode(s.substr(i, n));
  return cps.size() == 1 && uni::is_space(cps[0]) ? n : 0;
}

size_t skip_space(std::string_view s, size_t i) {
  while (i < s.size()) {
    size_t n = space_at(s, i);
    if (!n) break;
    i += n;
  }
  return i;
}

std::string_view rstrip(std::string_view s) {
  // Whitespace characters are ASCII or end in a continuation byte; walk code points from the end.
  while (!s.empty()) {
    size_t start = s.size() - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    if (space_at(s, start) != s.size() - start) break;
    s.remove_suffix(s.size() - start);
  }
  return s;
}

bool all_space(std::string_view s) { return !s.empty() && skip_space(s, 0) == s.size(); }

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) lex_root();
    Token eof;
    eof.type = Tok::kEof;
    locate(eof, src_.size());
    out_.push_back(std::move(eof));
    return std::move(out_);
  }

 private:
  void locate(Token& t, size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line = static_cast<size_t>(it - line_starts_.begin());
    size_t start = line_starts_[line - 1];
    t.line = static_cast<int>(line);
    t.column = static_cast<int>(uni::length(std::string_view(src_).substr(start, offset - start))) + 1;
  }

  [[noreturn]] void error_at(size_t offset, std::string msg) const {
    Token t;
    locate(t, offset);
    throw JinjaError{"TemplateSyntaxError", std::move(msg), t.line, t.column};
  }

  void emit(Tok type, size_t offset, std::string text = {}) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    locate(t, offset);
    out_.push_back(std::move(t));
  }

  // Text before a tag, with "-" stripping or lstrip_blocks applied. `lstrip_ok`: the tag is not {{ }}.
  void emit_data(size_t begin, size_t end, char sign, bool lstrip_ok) {
    std::string_view text = std::string_view(src_).substr(begin, end - begin);
    if (sign == '-') {
      text = rstrip(text);
    } else if (sign != '+' && lstrip_ok) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && all_space(text.substr(l_pos))) text = text.substr(0, l_pos);
    }
    if (!text.empty()) emit(Tok::kData, begin, std::string(text));
  }

  // {% raw %} with optional signs: returns the offset after the match, or 0.
  size_t match_raw_begin(size_t i) const {
    std::string_view s(src_);
    size_t p = i + 2;
    if (p < s.size() && (s[p] == '-' || s[p] == '+')) ++p;
    p = skip_space(s, p);
    if (s.substr(p, 3) != "raw") return 0;
    p = skip_space(s, p + 3);
    if (s.substr(p, 3) == "-%}") return skip_space(s, p + 3);
    if (s.substr(p, 2) == "%}") return p + 2;
    return 0;
  }

  void lex_root() {
    std::string_view s(src_);
    size_t i = pos_;
    while (true) {
      i = s.find('{', i);
      if (i == std::string_view::npos || i + 1 >= s.size()) {
        emit_data(pos_, s.size(), 0, false);
        pos_ = s.size();
        return;
      }
      char c = s[i + 1];
      if (c == '{' || c == '%' || c == '#') break;
      ++i;
    }
    char kind = s[i + 1];
    char sign = (i + 2 < s.size() && (s[i + 2] == '-' || s[i + 2] == '+')) ? s[i + 2] : 0;
    if (kind == '%') {
      if (size_t after = match_raw_begin(i)) {
        emit_data(pos_, i, sign, true);
        line_starting_ = s[after - 1] == '\n';
        pos_ = after;
        lex_raw(i);
        return;
      }
    }
    emit_data(pos_, i, sign, kind != '{');
    line_starting_ = false;
    size_t body = i + 2 + (sign ? 1 : 0);
    if (kind == '#') {
      lex_comment(i, body);
    } else {
      emit(kind == '{' ? Tok::kVariableBegin : Tok::kBlockBegin, i);
      pos_ = body;
      lex_tag(kind == '%');
    }
  }

  void lex_comment(size_t start, size_t body) {
    std::string_view s(src_);
    size_t k = s.find("#}", body);
    if (k == std::string_view::npos) error_at(start, "Missing end of comment tag");
    size_t end = k + 2;
    if (k > body && s[k - 1] == '-') {
      end = skip_space(s, end);
    } else if (k > body && s[k - 1] == '+') {
      // no trimming
    } else if (end < s.size() && s[end] == '\n') {
      ++end;  // trim_blocks
    }
    line_starting_ = s[end - 1] == '\n';
    pos_ = end;
  }

  void lex_raw(size_t start) {
    std::string_view s(src_);
    size_t i = pos_;
    while (true) {
      i = s.find("{%", i);
      if (i == std::string_view::npos) error_at(start, "Missing end of raw directive");
      size_t p = i + 2;
      char sign = (p < s.size() && (s[p] == '-' || s[p] == '+')) ? s[p] : 0;
      if (sign) ++p;
      p = skip_space(s, p);
      if (s.substr(p, 6) == "endraw") {
        p = skip_space(s, p + 6);
        size_t end = 0;
        if (s.substr(p, 3) == "+%}") end = p + 3;
        else if (s.substr(p, 3) == "-%}") end = skip_space(s, p + 3);
        else if (s.substr(p, 2) == "%}") end = p + 2 + (p + 2 < s.size() && s[p + 2] == '\n' ? 1 : 0);
        if (end) {
          emit_data(pos_, i, sign, true);
          line_starting_ = s[end - 1] == '\n';
          pos_ = end;
          return;
        }
      }
      i += 2;
    }
  }

  // Inside {{ }} or {% %}: tokens until the end delimiter (only recognized with brackets balanced).
  void lex_tag(bool block) {
    std::string_view s(src_);
    std::vector<char> balance;
    while (true) {
      if (pos_ >= s.size()) return;  // the parser reports the missing end
      if (balance.empty()) {
        size_t end = 0;
        if (block) {
          if (s.substr(pos_, 3) == "+%}") end = pos_ + 3;
          else if (s.substr(pos_, 3) == "-%}") end = skip_space(s, pos_ + 3);
          else if (s.substr(pos_, 2) == "%}") end = pos_ + 2 + (pos_ + 2 < s.size() && s[pos_ + 2] == '\n' ? 1 : 0);
        } else {
          if (s.substr(pos_, 3) == "-}}") end = skip_space(s, pos_ + 3);
          else if (s.substr(pos_, 2) == "}}") end = pos_ + 2;
        }
        if (end) {
          emit(block ? Tok::kBlockEnd : Tok::kVariableEnd, pos_);
          line_starting_ = s[end - 1] == '\n';
          pos_ = end;
          return;
        }
      }
      if (size_t n = space_at(s, pos_)) {
        pos_ = skip_space(s, pos_ + n);
        continue;
      }
      char c = s[pos_];
      if (is_digit(c)) { lex_number(); continue; }
      if (is_name_start(c)) {
        size_t e = pos_;
        while (e < s.size() && is_name_char(s[e])) ++e;
        emit(Tok::kName, pos_, std::string(s.substr(pos_, e - pos_)));
        pos_ = e;
        continue;
      }
      if (c == '\'' || c == '"') { lex_string(); continue; }
      lex_operator(balance);
    }
  }

  // (\d+_)*\d+ starting at i; returns the end, or i when there is no digit.
  size_t scan_digits(size_t i, bool (*ok)(char)) const {
    std::string_view s(src_);
    size_t e = i;
    while (e < s.size() && ok(s[e])) {
      ++e;
      if (e + 1 < s.size() && s[e] == '_' && ok(s[e + 1])) ++e;
    }
    return e;
  }

  void lex_number() {
    std::string_view s(src_);
    size_t start = pos_;
    bool after_dot = start > 0 && s[start - 1] == '.';
    size_t int_end = scan_digits(start, is_digit);
    // float: digits, then a fraction and/or an exponent
    if (!after_dot) {
      size_t e = int_end;
      bool has_fraction = false;
      if (e + 1 < s.size() && s[e] == '.' && is_digit(s[e + 1])) {
        e = scan_digits(e + 1, is_digit);
        has_fraction = true;
      }
      size_t x = e;
      bool has_exp = false;
      if (x < s.size() && (s[x] == 'e' || s[x] == 'E')) {
        size_t y = x + 1;
        if (y < s.size() && (s[y] == '+' || s[y] == '-')) ++y;
        if (y < s.size() && is_digit(s[y])) {
          e = scan_digits(y, is_digit);
          has_exp = true;
        }
      }
      if (has_fraction || has_exp) {
        std::string text;
        for (char ch : s.substr(start, e - start)) {
          if (ch != '_') text += ch;
        }
        Token t;
        t.type = Tok::kFloat;
        t.float_value = std::strtod(text.c_str(), nullptr);
        locate(t, start);
        out_.push_back(std::move(t));
        pos_ = e;
        return;
      }
    }
    // integer: 0b.., 0o.., 0x.., [1-9](_?\d)*, 0(_?0)*
    int base = 10;
    size_t digits_begin = start, end = int_end;
    if (s[start] == '0' && start + 1 < s.size()) {
      char p = static_cast<char>(s[start + 1] | 0x20);
      auto bin = [](char ch) { return ch == '0' || ch == '1'; };
      auto oct = [](char ch) { return ch >= '0' && ch <= '7'; };
      auto hex = [](char ch) { return is_digit(ch) || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f'); };
      bool (*pred)(char) = p == 'b' ? +bin : p == 'o' ? +oct : p == 'x' ? +hex : nullptr;
      if (pred) {
        size_t q = start + 2;
        if (q < s.size() && s[q] == '_') ++q;
        if (q < s.size() && pred(s[q])) {
          base = p == 'b' ? 2 : p == 'o' ? 8 : 16;
          digits_begin = start + 2;
          end = q;
          while (end < s.size() && pred(s[end])) {
            ++end;
            if (end + 1 < s.size() && s[end] == '_' && pred(s[end + 1])) ++end;
          }
        }
      }
    }
    if (base == 10 && s[start] == '0') {
      auto zero = [](char ch) { return ch == '0'; };
      end = scan_digits(start, +zero);
    }
    std::string text;
    for (char ch : s.substr(digits_begin, end - digits_begin)) {
      if (ch != '_') text += ch;
    }
    errno = 0;
    unsigned long long v = std::strtoull(text.c_str(), nullptr, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX)) {
      error_at(start, "integer literal too large (integers are limited to 64 bits)");
    }
    Token t;
    t.type = Tok::kInteger;
    t.int_value = static_cast<int64_t>(v);
    locate(t, start);
    out_.push_back(std::move(t));
    pos_ = end;
  }

  void lex_string() {
    std::string_view s(src_);
    char quote = s[pos_];
    size_t i = pos_ + 1;
    while (i < s.size() && s[i] != quote) {
      if (s[i] == '\\') ++i;
      ++i;
    }
    if (i >= s.size()) error_at(pos_, quote == '\'' ? "unexpected char \"'\"" : "unexpected char '\"'");
    std::string value = unescape(s.substr(pos_ + 1, i - pos_ - 1), pos_);
    emit(Tok::kString, pos_, std::move(value));
    pos_ = i + 1;
  }

  // Python's "unicode-escape" decoding, as Jinja2 applies it to string literals.
  std::string unescape(std::string_view in, size_t where) const {
    std::string out;
    out.reserve(in.size());
    auto hex_value = [&](size_t at, int n, const char* what) -> uint32_t {
      uint32_t v = 0;
      for (int k = 0; k < n; ++k) {
        char ch = at + k < in.size() ? in[at + k] : 0;
        int d = is_digit(ch) ? ch - '0' : ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f') ? (ch | 0x20) - 'a' + 10 : -1;
        if (d < 0) error_at(where, std::string("truncated ") + what + " escape");
        v = v * 16 + static_cast<uint32_t>(d);
      }
      return v;
    };
    for (size_t i = 0; i < in.size(); ++i) {
      char c = in[i];
      if (c != '\\') { out += c; continue; }
      char n = in[++i];  // the lexer guarantees a character after a backslash
      switch (n) {
        case '\n': break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x': uni::append(out, hex_value(i + 1, 2, "\\xXX")); i += 2; break;
        case 'u': uni::append(out, hex_value(i + 1, 4, "\\uXXXX")); i += 4; break;
        case 'U': {
          uint32_t v = hex_value(i + 1, 8, "\\UXXXXXXXX");
          if (v > 0x10FFFF) error_at(where, "illegal Unicode character");
          uni::append(out, v);
          i += 8;
          break;
        }
        case 'N': error_at(where, "\\N{...} escapes are not supported");
        default:
          if (n >= '0' && n <= '7') {
            uint32_t v = static_cast<uint32_t>(n - '0');
            for (int k = 0; k < 2 && i + 1 < in.size() && in[i + 1] >= '0' && in[i + 1] <= '7'; ++k) {
              v = v * 8 + static_cast<uint32_t>(in[++i] - '0');
            }
            uni::append(out, v);
          } else if (static_cast<unsigned char>(n) >= 0x80) {
            // Jinja2 first turns non-ASCII characters into \xNN / \uNNNN / \UNNNNNNNN text, so a backslash
            // before one escapes only the backslash of that text.
            size_t len = 1;
            while (i + len < in.size() && (static_cast<unsigned char>(in[i + len]) & 0xC0) == 0x80) ++len;
            auto cps = uni::decode(in.substr(i, len));
            char buf[16];
            uint32_t cp = cps.empty() ? 0xFFFD : cps[0];
            if (cp <= 0xFF) std::snprintf(buf, sizeof buf, "\\x%02x", cp);
            else if (cp <= 0xFFFF) std::snprintf(buf, sizeof buf, "\\u%04x", cp);
            else std::snprintf(buf, sizeof buf, "\\U%08x", cp);
            out += buf;
            i += len - 1;
          } else {
            out += '\\';
            out += n;
          }
      }
    }
    return out;
  }

  void lex_operator(std::vector<char>& balance) {
    std::string_view s(src_);
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (auto op : kTwo) {
      if (s.substr(pos_, 2) == op) {
        emit(Tok::kOperator, pos_, std::string(op));
        pos_ += 2;
        return;
      }
    }
    char c = s[pos_];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      std::string shown;
      if (static_cast<unsigned char>(c) >= 0x80) {
        auto cps = uni::decode(s.substr(pos_, 4));
        uni::append(shown, cps.empty() ? 0xFFFD : cps[0]);
      } else {
        shown = std::string(1, c);
      }
      error_at(pos_, "unexpected char '" + shown + "'");
    }
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) error_at(pos_, std::string("unexpected '") + c + "'");
      char expected = balance.back();
      balance.pop_back();
      if (expected != c) error_at(pos_, std::string("unexpected '") + c + "', expected '" + expected + "'");
    }
    emit(Tok::kOperator, pos_, std::string(1, c));
    ++pos_;
  }

  std::string src_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<size_t> line_starts_;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace kvasir::jinja
