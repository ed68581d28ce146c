#include "chat/jinja/pyformat.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "chat/jinja/error.h"
#include "chat/jinja/unicode.h"

namespace kvasir::jinja {

namespace {

constexpr int kMaxPrecision = 200;

// ----- helpers shared by % and format() -----

std::string repeat(char32_t c, size_t n) {
  std::string one;
  uni::append(one, c);
  std::string out;
  out.reserve(one.size() * n);
  for (size_t i = 0; i < n; ++i) out += one;
  return out;
}

void check_width(size_t width, size_t max_bytes) {
  if (width > max_bytes) fail("OutputLimitError", "format width " + std::to_string(width) + " is over the output limit");
}

std::string digits_of(uint64_t v, int base, bool upper) {
  const char* d = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  std::string s;
  do {
    s += d[v % base];
    v /= base;
  } while (v);
  std::reverse(s.begin(), s.end());
  return s;
}

uint64_t magnitude(int64_t v) { return v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v); }

std::string group_digits(const std::string& digits, char sep) {
  std::string out;
  size_t n = digits.size();
  for (size_t i = 0; i < n; ++i) {
    out += digits[i];
    size_t left = n - 1 - i;
    if (left > 0 && left % 3 == 0) out += sep;
  }
  return out;
}

// snprintf for one double with a C format; Python's %-formatting of floats matches C's.
std::string c_format_double(const std::string& spec, double d) {
  char buf[512];
  int n = std::snprintf(buf, sizeof buf, spec.c_str(), d);
  if (n < 0) value_error("bad float format");
  if (static_cast<size_t>(n) < sizeof buf) return std::string(buf, n);
  std::string big(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(big.data(), big.size(), spec.c_str(), d);
  big.resize(n);
  return big;
}

// ----- printf-style -----

struct PercentSpec {
  bool left = false, plus = false, space = false, alt = false, zero = false;
  size_t width = 0;
  int precision = -1;
  char type = 's';
};

std::string pad(std::string body, size_t width, bool left, char fill = ' ') {
  size_t len = uni::length(body);
  if (len >= width) return body;
  std::string padding(width - len, fill);
  return left ? body + padding : padding + body;
}

std::string percent_int(const PercentSpec& s, int64_t v) {
  int base = (s.type == 'o') ? 8 : (s.type == 'x' || s.type == 'X') ? 16 : 10;
  std::string digits = digits_of(magnitude(v), base, s.type == 'X');
  if (s.precision > 0 && digits.size() < static_cast<size_t>(s.precision)) {
    digits.insert(0, static_cast<size_t>(s.precision) - digits.size(), '0');
  }
  std::string sign = v < 0 ? "-" : s.plus ? "+" : s.space ? " " : "";
  std::string prefix = !s.alt ? "" : base == 8 ? "0o" : s.type == 'x' ? "0x" : s.type == 'X' ? "0X" : "";
  size_t len = sign.size() + prefix.size() + digits.size();
  if (s.zero && !s.left && len < s.width) digits.insert(0, s.width - len, '0');
  return pad(sign + prefix + digits, s.width, s.left);
}

std::string percent_float(const PercentSpec& s, double d) {
  std::string spec = "%";
  if (s.left) spec += '-';
  if (s.plus) spec += '+';
  if (s.space) spec += ' ';
  if (s.alt) spec += '#';
  if (s.zero) spec += '0';
  if (s.width) spec += std::to_string(s.width);
  spec += '.' + std::to_string(s.precision < 0 ? 6 : s.precision);
  spec += s.type;
  return c_format_double(spec, d);
}

std::string percent_one(const PercentSpec& s, const Value& v, size_t max_bytes) {
  if (v.is_undefined() && s.type != 's' && s.type != 'r' && s.type != 'a') raise_undefined(v);
  switch (s.type) {
    case 's': case 'r': case 'a': {
      std::string body = s.type == 's' ? to_str(v, max_bytes) : to_repr(v, max_bytes);
      if (s.precision >= 0) {
        auto cps = uni::decode(body);
        if (cps.size() > static_cast<size_t>(s.precision)) body = uni::encode(cps, 0, s.precision);
      }
      return pad(body, s.width, s.left);
    }
    case 'd': case 'i': case 'u':
      if (v.is_integral()) return percent_int(s, v.as_int());
      if (v.is_float()) {
        double d = std::trunc(v.as_double());
        if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) fail("OverflowError", "cannot convert float to integer");
        return percent_int(s, static_cast<int64_t>(d));
      }
      type_error(std::string("%") + s.type + " format: a real number is required, not " + type_name(v));
    case 'o': case 'x': case 'X':
      if (v.is_integral()) return percent_int(s, v.as_int());
      type_error(std::string("%") + s.type + " format: an integer is required, not " + type_name(v));
    case 'e': case 'E': case 'f': case 'F': case 'g': case 'G':
      if (v.is_number()) return percent_float(s, v.as_double());
      type_error("must be real number, not " + type_name(v));
    case 'c':
      if (v.is_integral() && v.as_int() >= 0 && v.as_int() <= 0x10FFFF) {
        std::string one;
        uni::append(one, static_cast<char32_t>(v.as_int()));
        return pad(one, s.width, s.left);
      }
      if (v.is_string() && uni::length(v.as_string()) == 1) return pad(v.as_string(), s.width, s.left);
      type_error("%c requires an int or a unicode character");
    default: {
      value_error(std::string("unsupported format character '") + s.type + "'");
    }
  }
}

// ----- format() mini-language -----

struct FormatSpec {
  char32_t fill = ' ';
  char align = 0;  // < > ^ =
  char sign = 0;   // + - space
  bool alt = false;
  bool zero = false;
  size_t width = 0;
  char grouping = 0;
  int precision = -1;
  char type = 0;
};

FormatSpec parse_spec(std::string_view text) {
  FormatSpec s;
  auto cps = uni::decode(text);
  size_t i = 0;
  auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (cps.size() >= 2 && is_align(cps[1])) {
    s.fill = cps[0];
    s.align = static_cast<char>(cps[1]);
    i = 2;
  } else if (!cps.empty() && is_align(cps[0])) {
    s.align = static_cast<char>(cps[0]);
    i = 1;
  }
  if (i < cps.size() && (cps[i] == '+' || cps[i] == '-' || cps[i] == ' ')) s.sign = static_cast<char>(cps[i++]);
  if (i < cps.size() && cps[i] == '#') { s.alt = true; ++i; }
  if (i < cps.size() && cps[i] == '0') { s.zero = true; ++i; }
  while (i < cps.size() && cps[i] >= '0' && cps[i] <= '9') {
    s.width = s.width * 10 + (cps[i++] - '0');
    if (s.width > (1u << 30)) value_error("Too many decimal digits in format string");
  }
  if (i < cps.size() && (cps[i] == ',' || cps[i] == '_')) s.grouping = static_cast<char>(cps[i++]);
  if (i < cps.size() && cps[i] == '.') {
    ++i;
    if (i >= cps.size() || cps[i] < '0' || cps[i] > '9') value_error("Format specifier missing precision");
    s.precision = 0;
    while (i < cps.size() && cps[i] >= '0' && cps[i] <= '9') {
      s.precision = s.precision * 10 + static_cast<int>(cps[i++] - '0');
      if (s.precision > kMaxPrecision) value_error("precision too big");
    }
  }
  if (i < cps.size()) s.type = static_cast<char>(cps[i++]);
  if (i < cps.size()) value_error("Invalid format specifier");
  return s;
}

std::string align_text(const std::string& body, const FormatSpec& s, char default_align, size_t sign_len) {
  size_t len = uni::length(body);
  if (len >= s.width) return body;
  size_t n = s.width - len;
  char align = s.align ? s.align : default_align;
  switch (align) {
    case '<': return body + repeat(s.fill, n);
    case '^': return repeat(s.fill, n / 2) + body + repeat(s.fill, n - n / 2);
    case '=': return body.substr(0, sign_len) + repeat(s.fill, n) + body.substr(sign_len);
    default: return repeat(s.fill, n) + body;
  }
}

std::string format_number(const Value& v, FormatSpec s) {
  if (s.zero && !s.align) { s.fill = '0'; s.align = '='; }
  char type = s.type;
  bool is_int = v.is_integral();
  if (!type) type = is_int ? 'd' : 0;
  std::string sign, body;
  if (is_int && (type == 'd' || type == 'b' || type == 'o' || type == 'x' || type == 'X' || type == 'n' || type == 'c')) {
    if (s.precision >= 0) value_error("Precision not allowed in integer format specifier");
    int64_t x = v.as_int();
    if (type == 'c') {
      std::string one;
      uni::append(one, static_cast<char32_t>(x));
      return align_text(one, s, '<', 0);
    }
    int base = type == 'b' ? 2 : type == 'o' ? 8 : (type == 'x' || type == 'X') ? 16 : 10;
    body = digits_of(magnitude(x), base, type == 'X');
    if (s.grouping) body = group_digits(body, s.grouping);
    if (s.alt && base != 10) body = (base == 2 ? "0b" : base == 8 ? "0o" : type == 'X' ? "0X" : "0x") + body;
    sign = x < 0 ? "-" : s.sign == '+' ? "+" : s.sign == ' ' ? " " : "";
  } else {
    if (!is_int && !v.is_float()) type_error("unsupported format");
    if (type && std::string_view("eEfFgGn%").find(type) == std::string_view::npos) {
      value_error(std::string("Unknown format code '") + type + "' for object of type '" + type_name(v) + "'");
    }
    double d = v.as_double();
    bool neg = std::signbit(d) && !std::isnan(d);
    double a = std::fabs(d);
    if (!type) {
      if (s.precision < 0) {
        body = float_repr(a);
      } else {
        body = c_format_double("%." + std::to_string(std::max(s.precision, 1)) + "g", a);
        if (std::isfinite(a) && body.find_first_of(".e") == std::string::npos) body += ".0";
      }
    } else if (type == '%') {
      body = c_format_double("%." + std::to_string(s.precision < 0 ? 6 : s.precision) + "f", a * 100) + "%";
    } else {
      char t = type == 'n' ? 'g' : type;
      body = c_format_double(std::string("%") + (s.alt ? "#" : "") + "." + std::to_string(s.precision < 0 ? 6 : s.precision) + t, a);
    }
    if (s.grouping) {
      size_t end = body.find_first_not_of("0123456789");
      body = group_digits(body.substr(0, end), s.grouping) + (end == std::string::npos ? "" : body.substr(end));
    }
    sign = neg ? "-" : s.sign == '+' ? "+" : s.sign == ' ' ? " " : "";
  }
  return align_text(sign + body, s, '>', sign.size());
}

}  // namespace

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string s(buf, r.ptr);
  std::string out;
  if (s[0] == '-') { out += '-'; s.erase(0, 1); }
  size_t e = s.find('e');
  int exp = std::atoi(s.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (s[i] != '.') digits += s[i];
  }
  int decpt = exp + 1;  // the value is 0.DIGITS × 10^decpt
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(-decpt, '0') + digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits + std::string(decpt - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
  } else {
    out += digits[0];
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += exp < 0 ? "e-" : "e+";
    int ae = exp < 0 ? -exp : exp;
    if (ae < 10) out += '0';
    out += std::to_string(ae);
  }
  return out;
}

// ----- json.dumps -----

namespace {

void json_string(Printer& p, std::string_view s, bool ensure_ascii) {
  std::string o;
  o.reserve(s.size() + 2);
  o += '"';
  auto escape_u = [&o](unsigned c) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\u%04x", c);
    o += buf;
  };
  for (char32_t c : uni::decode(s)) {
    switch (c) {
      case '"': o += "\\\""; continue;
      case '\\': o += "\\\\"; continue;
      case '\n': o += "\\n"; continue;
      case '\r': o += "\\r"; continue;
      case '\t': o += "\\t"; continue;
      case '\b': o += "\\b"; continue;
      case '\f': o += "\\f"; continue;
      default: break;
    }
    if (c < 0x20) { escape_u(c); continue; }
    if (ensure_ascii && c >= 0x7F) {
      if (c >= 0x10000) {
        char32_t v = c - 0x10000;
        escape_u(0xD800 + (v >> 10));
        escape_u(0xDC00 + (v & 0x3FF));
      } else {
        escape_u(c);
      }
      continue;
    }
    uni::append(o, c);
  }
  o += '"';
  p.raw(o);
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return float_repr(d);
}

std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Kind::kString: return k.as_string();
    case Kind::kBool: return k.as_bool() ? "true" : "false";
    case Kind::kInt: return std::to_string(k.as_int());
    case Kind::kFloat: return json_float(k.as_double());
    case Kind::kNone: return "null";
    default: type_error("keys must be str, int, float, bool or None, not " + type_name(k));
  }
}

[[noreturn]] void not_serializable(const Value& v) {
  type_error("Object of type " + type_name(v) + " is not JSON serializable");
}

}  // namespace

void json_dump(Printer& p, const Value& v, const JsonOptions& o, int level) {
  if (level > kMaxValueDepth) fail("RecursionError", "maximum recursion depth exceeded while encoding a JSON object");
  auto newline = [&](int lvl) {
    if (!o.indent) return;
    p.raw("\n");
    for (int i = 0; i < lvl; ++i) p.raw(*o.indent);
  };
  switch (v.kind()) {
    case Kind::kNone: p.raw("null"); return;
    case Kind::kBool: p.raw(v.as_bool() ? "true" : "false"); return;
    case Kind::kInt: p.raw(std::to_string(v.as_int())); return;
    case Kind::kFloat: p.raw(json_float(v.as_double())); return;
    case Kind::kString: json_string(p, v.as_string(), o.ensure_ascii); return;
    case Kind::kArray: {
      const Array& a = v.as_array();
      if (a.kind != ArrayKind::kList && a.kind != ArrayKind::kTuple) not_serializable(v);
      if (a.items.empty()) { p.raw("[]"); return; }
      p.raw("[");
      for (size_t i = 0; i < a.items.size(); ++i) {
        if (i) p.raw(o.item_separator);
        newline(level + 1);
        json_dump(p, a.items[i], o, level + 1);
      }
      newline(level);
      p.raw("]");
      return;
    }
    case Kind::kMap: {
      const auto& items = v.as_map().items;
      if (items.empty()) { p.raw("{}"); return; }
      std::vector<const std::pair<Value, Value>*> order;
      for (const auto& kv : items) order.push_back(&kv);
      if (o.sort_keys) {
        std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return py_compare(a->first, b->first, "<") < 0; });
      }
      p.raw("{");
      bool first = true;
      for (const auto* kv : order) {
        if (!first) p.raw(o.item_separator);
        first = false;
        newline(level + 1);
        json_string(p, json_key(kv->first), o.ensure_ascii);
        p.raw(o.key_separator);
        json_dump(p, kv->second, o, level + 1);
      }
      newline(level);
      p.raw("}");
      return;
    }
    default: not_serializable(v);
  }
}

// ----- printf-style -----

std::string percent_format(std::string_view fmt, const Value& args, size_t max_bytes) {
  std::vector<Value> positional;
  const Map* mapping = nullptr;
  // Python accepts unused arguments when the right side is a tuple that gets consumed, or anything
  // subscriptable (a dict for %(name)s, but also a list).
  bool mapping_like = false;
  if (args.is_array_of(ArrayKind::kTuple)) {
    positional = args.as_array().items;
  } else {
    if (args.is_map()) mapping = &args.as_map();
    mapping_like = args.is_map() || args.is_undefined() || args.is_array_of(ArrayKind::kList) ||
                   args.is_array_of(ArrayKind::kRange);
    positional.push_back(args);
  }
  size_t next = 0;
  bool used_mapping = false;
  Printer out(max_bytes);
  auto next_arg = [&]() -> const Value& {
    if (next >= positional.size()) type_error("not enough arguments for format string");
    return positional[next++];
  };
  size_t i = 0;
  while (i < fmt.size()) {
    size_t pct = fmt.find('%', i);
    if (pct == std::string_view::npos) { out.raw(fmt.substr(i)); break; }
    out.raw(fmt.substr(i, pct - i));
    i = pct + 1;
    if (i >= fmt.size()) value_error("incomplete format");
    if (fmt[i] == '%') { out.raw("%"); ++i; continue; }
    const Value* arg = nullptr;
    if (fmt[i] == '(') {
      size_t close = fmt.find(')', i);
      if (close == std::string_view::npos) value_error("incomplete format key");
      if (!mapping) type_error("format requires a mapping");
      const Value* found = mapping->find(fmt.substr(i + 1, close - i - 1));
      if (!found) fail("KeyError", "'" + std::string(fmt.substr(i + 1, close - i - 1)) + "'");
      arg = found;
      used_mapping = true;
      i = close + 1;
    }
    PercentSpec s;
    for (; i < fmt.size(); ++i) {
      char c = fmt[i];
      if (c == '-') s.left = true;
      else if (c == '+') s.plus = true;
      else if (c == ' ') s.space = true;
      else if (c == '#') s.alt = true;
      else if (c == '0') s.zero = true;
      else break;
    }
    if (i < fmt.size() && fmt[i] == '*') {
      const Value& w = next_arg();
      if (!w.is_integral()) type_error("* wants int");
      int64_t wv = w.as_int();
      if (wv < 0) { s.left = true; wv = -wv; }
      s.width = static_cast<size_t>(wv);
      ++i;
    } else {
      while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') {
        s.width = s.width * 10 + (fmt[i++] - '0');
        if (s.width > max_bytes) check_width(s.width, max_bytes);
      }
    }
    check_width(s.width, max_bytes);
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      s.precision = 0;
      if (i < fmt.size() && fmt[i] == '*') {
        const Value& pv = next_arg();
        if (!pv.is_integral()) type_error("* wants int");
        s.precision = static_cast<int>(std::clamp<int64_t>(pv.as_int(), 0, kMaxPrecision));
        ++i;
      } else {
        while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') {
          s.precision = std::min(s.precision * 10 + (fmt[i++] - '0'), kMaxPrecision + 1);
        }
      }
      if (s.precision > kMaxPrecision) value_error("precision too big");
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) value_error("incomplete format");
    s.type = fmt[i++];
    if (!arg) arg = &next_arg();
    out.raw(percent_one(s, *arg, max_bytes));
  }
  if (!used_mapping && !mapping_like && next < positional.size()) {
    type_error("not all arguments converted during string formatting");
  }
  return out.take();
}

// ----- str.format -----

std::string format_with_spec(const Value& v, std::string_view spec, size_t max_bytes) {
  if (spec.empty()) return to_str(v, max_bytes);
  FormatSpec s = parse_spec(spec);
  check_width(s.width, max_bytes);
  if (v.is_number() && !(v.is_bool() && !s.type)) return format_number(v, s);
  if (v.is_string()) {
    if (s.type && s.type != 's') {
      value_error(std::string("Unknown format code '") + s.type + "' for object of type 'str'");
    }
    if (s.sign) value_error("Sign not allowed in string format specifier");
    if (s.align == '=') value_error("'=' alignment not allowed in string format specifier");
    std::string body = v.as_string();
    if (s.precision >= 0) {
      auto cps = uni::decode(body);
      if (cps.size() > static_cast<size_t>(s.precision)) body = uni::encode(cps, 0, s.precision);
    }
    if (s.zero && !s.align) { s.fill = '0'; }
    return align_text(body, s, '<', 0);
  }
  if (v.is_bool()) {
    FormatSpec t = s;
    return align_text(v.as_bool() ? "True" : "False", t, '<', 0);
  }
  type_error("unsupported format string passed to " + type_name(v) + ".__format__");
}

std::string str_format(std::string_view fmt, const CallArgs& args, const FormatHooks& hooks, size_t max_bytes) {
  Printer out(max_bytes);
  size_t auto_index = 0;
  bool used_auto = false, used_manual = false;
  size_t i = 0;
  while (i < fmt.size()) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') { out.raw("}"); i += 2; continue; }
      value_error("Single '}' encountered in format string");
    }
    if (c != '{') {
      size_t next = fmt.find_first_of("{}", i);
      if (next == std::string_view::npos) next = fmt.size();
      out.raw(fmt.substr(i, next - i));
      i = next;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') { out.raw("{"); i += 2; continue; }
    // a replacement field: {name.attr[key]!conv:spec}
    size_t j = i + 1;
    int depth = 1;
    while (j < fmt.size() && depth > 0) {
      if (fmt[j] == '{') ++depth;
      else if (fmt[j] == '}') --depth;
      if (depth > 0) ++j;
    }
    if (j >= fmt.size()) value_error("expected '}' before end of string");
    std::string_view field = fmt.substr(i + 1, j - i - 1);
    i = j + 1;
    if (field.find('{') != std::string_view::npos) value_error("nested replacement fields are not supported");
    std::string_view spec;
    size_t colon = field.find(':');
    if (colon != std::string_view::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    char conversion = 0;
    size_t bang = field.find('!');
    if (bang != std::string_view::npos) {
      if (bang + 2 != field.size()) value_error("expected ':' after conversion specifier");
      conversion = field[bang + 1];
      field = field.substr(0, bang);
    }
    size_t name_end = field.find_first_of(".[");
    std::string_view name = field.substr(0, name_end);
    Value value;
    if (name.empty() || std::all_of(name.begin(), name.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      size_t idx;
      if (name.empty()) {
        if (used_manual) value_error("cannot switch from manual field specification to automatic field numbering");
        used_auto = true;
        idx = auto_index++;
      } else {
        if (used_auto) value_error("cannot switch from automatic field numbering to manual field specification");
        used_manual = true;
        if (name.size() > 9) value_error("Too many decimal digits in format string");
        idx = std::stoul(std::string(name));
      }
      if (idx >= args.args.size()) {
        fail("IndexError", "tuple index out of range");
      }
      value = args.args[idx];
    } else {
      bool found = false;
      for (const auto& [k, v] : args.kwargs) {
        if (k == name) { value = v; found = true; }
      }
      if (!found) fail("KeyError", "'" + std::string(name) + "'");
    }
    size_t k = name_end == std::string_view::npos ? field.size() : name_end;
    while (k < field.size()) {
      if (field[k] == '.') {
        size_t e = field.find_first_of(".[", k + 1);
        if (e == std::string_view::npos) e = field.size();
        if (e == k + 1) value_error("Empty attribute in format string");
        value = hooks.get_attr(value, std::string(field.substr(k + 1, e - k - 1)));
        k = e;
      } else if (field[k] == '[') {
        size_t e = field.find(']', k);
        if (e == std::string_view::npos) value_error("Missing ']' in format string");
        std::string key(field.substr(k + 1, e - k - 1));
        bool numeric = !key.empty() && key.size() < 10 && std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
        value = hooks.get_item(value, numeric ? Value::integer(std::stoll(key)) : Value::string(key));
        k = e + 1;
      } else {
        value_error("Only '.' or '[' may follow ']' in format field specifier");
      }
    }
    if (conversion == 'r' || conversion == 'a') value = Value::string(to_repr(value, max_bytes));
    else if (conversion == 's') value = Value::string(to_str(value, max_bytes));
    else if (conversion) value_error(std::string("Unknown conversion specifier ") + conversion);
    if (value.is_undefined() && spec.empty()) {
      out.raw("");
    } else {
      out.raw(format_with_spec(value, spec, max_bytes));
    }
  }
  return out.take();
}

}  // namespace kvasir::jinja
