#include "chat/jinja/strings.h"

#include <algorithm>

#include "chat/jinja/unicode.h"

namespace kvasir::jinja::pystr {

namespace {

bool in_set(char32_t c, const std::vector<char32_t>& set) { return std::find(set.begin(), set.end(), c) != set.end(); }

}  // namespace

namespace {

// Length in bytes of the code point starting at s[i] (invalid bytes count as one).
size_t cp_len(std::string_view s, size_t i) {
  auto b = static_cast<unsigned char>(s[i]);
  size_t n = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  }
  return n;
}

char32_t cp_at(std::string_view s, size_t i, size_t n) {
  auto cps = uni::decode(s.substr(i, n));
  return cps.size() == 1 ? cps[0] : 0xFFFD;
}

}  // namespace

// Walks in from both ends one code point at a time, so long strings are not decoded whole.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::vector<char32_t> set;
  if (chars) set = uni::decode(*chars);
  auto strippable = [&](char32_t c) { return chars ? in_set(c, set) : uni::is_space(c); };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      size_t n = cp_len(s, b);
      if (!strippable(static_cast<unsigned char>(s[b]) < 0x80 ? static_cast<char32_t>(s[b]) : cp_at(s, b, n))) break;
      b += n;
    }
  }
  if (right) {
    while (e > b) {
      size_t start = e - 1;
      while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && e - start < 4) --start;
      size_t n = cp_len(s, start);
      if (start + n != e) { start = e - 1; n = 1; }  // a stray continuation byte
      char32_t c = n == 1 ? static_cast<unsigned char>(s[start]) : cp_at(s, start, n);
      if (n == 1 && c >= 0x80) c = 0xDC00 + c;  // an invalid byte, as decode() sees it
      if (!strippable(c)) break;
      e = start;
    }
  }
  return std::string(s.substr(b, e - b));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t f = s.find(*sep, pos);
      if (f == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, f - pos));
      pos = f + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  auto cps = uni::decode(s);
  size_t i = 0, n = cps.size();
  while (true) {
    while (i < n && uni::is_space(cps[i])) ++i;
    if (i >= n) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      out.push_back(uni::encode(cps, i, n));  // the rest keeps its trailing whitespace
      break;
    }
    size_t j = i;
    while (j < n && !uni::is_space(cps[j])) ++j;
    out.push_back(uni::encode(cps, i, j));
    i = j;
  }
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t f = s.rfind(*sep, end - sep->size());
      if (f == std::string_view::npos) break;
      out.emplace_back(s.substr(f + sep->size(), end - f - sep->size()));
      end = f;
    }
    out.emplace_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  auto cps = uni::decode(s);
  size_t e = cps.size();
  while (true) {
    while (e > 0 && uni::is_space(cps[e - 1])) --e;
    if (e == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      out.push_back(uni::encode(cps, 0, e));  // the rest keeps its leading whitespace
      break;
    }
    size_t b = e;
    while (b > 0 && !uni::is_space(cps[b - 1])) --b;
    out.push_back(uni::encode(cps, b, e));
    e = b;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  auto cps = uni::decode(s);
  std::vector<std::string> out;
  size_t start = 0, i = 0, n = cps.size();
  auto is_break = [](char32_t c) {
    return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
           c == 0x2028 || c == 0x2029;
  };
  while (i < n) {
    if (!is_break(cps[i])) { ++i; continue; }
    size_t eol = i;
    size_t next = (cps[i] == '\r' && i + 1 < n && cps[i + 1] == '\n') ? i + 2 : i + 1;
    out.push_back(uni::encode(cps, start, keepends ? next : eol));
    start = i = next;
  }
  if (start < n) out.push_back(uni::encode(cps, start, n));
  return out;
}

std::optional<std::string> replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count,
                                   size_t max_bytes) {
  std::string out;
  if (old.empty()) {
    // inserts `repl` before every character and at the end
    auto cps = uni::decode(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        if (out.size() + repl.size() > max_bytes) return std::nullopt;
        out += repl;
        ++done;
      }
      if (i < cps.size()) uni::append(out, cps[i]);
    }
    return out.size() > max_bytes ? std::nullopt : std::optional<std::string>(std::move(out));
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t f = s.find(old, pos);
    if (f == std::string_view::npos) break;
    if (out.size() + (f - pos) + repl.size() > max_bytes) return std::nullopt;
    out.append(s.substr(pos, f - pos));
    out += repl;
    pos = f + old.size();
    ++done;
  }
  if (out.size() + (s.size() - pos) > max_bytes) return std::nullopt;
  out.append(s.substr(pos));
  return out;
}

std::string title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : uni::decode(s)) {
    if (prev_cased) uni::append_lower(out, c);
    else uni::append_title(out, c);
    prev_cased = uni::is_cased(c);
  }
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (char32_t c : uni::decode(s)) {
    if (first) uni::append_title(out, c);
    else uni::append_lower(out, c);
    first = false;
  }
  return out;
}

std::string swapcase(std::string_view s) {
  std::string out;
  for (char32_t c : uni::decode(s)) {
    if (uni::is_upper(c)) uni::append_lower(out, c);
    else if (uni::is_lower(c)) uni::append_upper(out, c);
    else uni::append(out, c);
  }
  return out;
}

int64_t cp_index(std::string_view s, size_t byte_offset) {
  int64_t n = 0;
  for (size_t i = 0; i < byte_offset && i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) ++n;
  }
  return n;
}

size_t byte_offset(std::string_view s, int64_t cp_index) {
  int64_t n = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (n == cp_index) return i;
      ++n;
    }
  }
  return s.size();
}

}  // namespace kvasir::jinja::pystr
