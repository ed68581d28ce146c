// Jinja2's builtin filters, as the Hugging Face environment has them (tojson is json.dumps with
// ensure_ascii=False, no HTML escaping). Filters that return generators in Python (map, select,
// unique, items, batch, reverse of a list) return one-shot generator values here too.
#include "chat/jinja/filters.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "chat/jinja/error.h"
#include "chat/jinja/interpreter.h"
#include "chat/jinja/methods.h"
#include "chat/jinja/objects.h"
#include "chat/jinja/operators.h"
#include "chat/jinja/pyformat.h"
#include "chat/jinja/strings.h"
#include "chat/jinja/unicode.h"

namespace kvasir::jinja {

namespace {

using Args = std::vector<std::optional<Value>>;

[[noreturn]] void filter_error(std::string msg) { fail("FilterArgumentError", std::move(msg)); }

bool flag(const std::optional<Value>& v, bool dflt = false) { return v ? truthy(*v) : dflt; }

Value generator(std::vector<Value> items) { return Value::array(std::move(items), ArrayKind::kGenerator); }

// make_attrgetter: "a.b.0" looks up a, then b, then item 0.
std::vector<Value> attribute_parts(const Value& attribute) {
  std::vector<Value> parts;
  if (attribute.is_none()) return parts;
  if (!attribute.is_string()) {
    parts.push_back(attribute);
    return parts;
  }
  for (const auto& p : pystr::split(attribute.as_string(), std::string("."), -1)) {
    bool digits = !p.empty() && p.size() < 19 && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
    parts.push_back(digits ? Value::integer(std::stoll(p)) : Value::string(p));
  }
  return parts;
}

Value lookup_path(Interpreter& in, Value item, const std::vector<Value>& parts) {
  for (const auto& part : parts) item = in.get_item(item, part);
  return item;
}

Value ignore_case(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(uni::lower(v.as_string()));
  return v;
}

// make_multi_attrgetter: "age,name" → a list of keys.
Value sort_key(Interpreter& in, const Value& item, const std::optional<Value>& attribute, bool case_sensitive) {
  if (!attribute || attribute->is_none()) return ignore_case(item, case_sensitive);
  std::vector<Value> keys;
  std::vector<Value> specs;
  if (attribute->is_string()) {
    for (const auto& s : pystr::split(attribute->as_string(), std::string(","), -1)) specs.push_back(Value::string(s));
  } else {
    specs.push_back(*attribute);
  }
  for (const auto& spec : specs) keys.push_back(ignore_case(lookup_path(in, item, attribute_parts(spec)), case_sensitive));
  return Value::array(std::move(keys));
}

void sort_values(std::vector<std::pair<Value, Value>>& keyed, bool reverse) {
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& x, const auto& y) {
    return reverse ? py_compare(y.first, x.first, "<") < 0 : py_compare(x.first, y.first, "<") < 0;
  });
}

// ----- string filters -----

Value f_upper(Interpreter& in, const Value& v, CallArgs& a) { bind_args(a, "upper", {}); return in.make_string(uni::upper(in.str(v))); }
Value f_lower(Interpreter& in, const Value& v, CallArgs& a) { bind_args(a, "lower", {}); return in.make_string(uni::lower(in.str(v))); }
Value f_capitalize(Interpreter& in, const Value& v, CallArgs& a) { bind_args(a, "capitalize", {}); return in.make_string(pystr::capitalize(in.str(v))); }

// Jinja's title: words start after runs of "-", whitespace, "(", "{", "[" and "<".
Value f_title(Interpreter& in, const Value& v, CallArgs& a) {
  bind_args(a, "title", {});
  std::string out;
  bool word_start = true;
  for (char32_t c : uni::decode(in.str(v))) {
    bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || uni::is_space(c);
    if (sep) {
      uni::append(out, c);
      word_start = true;
    } else if (word_start) {
      uni::append_upper(out, c);
      word_start = false;
    } else {
      uni::append_lower(out, c);
    }
  }
  return in.make_string(std::move(out));
}

Value f_trim(Interpreter& in, const Value& v, CallArgs& a) {
  Args p = bind_args(a, "trim", {"chars"});
  std::optional<std::string> chars;
  if (p[0] && !p[0]->is_none()) chars = in.str(*p[0]);
  return in.make_string(pystr::strip(in.str(v), chars, true, true));
}

Value f_replace(Interpreter& in, const Value& v, CallArgs& a) {
  Args p = bind_args(a, "replace", {"old", "new", "count"});
  if (!p[0] || !p[1]) type_error("do_replace() missing required arguments 'old' and 'new'");
  int64_t count = -1;
  if (p[2] && !p[2]->is_none()) {
    if (!p[2]->is_integral()) type_error("'" + type_name(*p[2]) + "' object cannot be interpreted as an integer");
    count = p[2]->as_int();
  }
  auto r = pystr::replace(in.str(v), in.str(*p[0]), in.str(*p[1]), count, in.limits().max_output_bytes);
  if (!r) in.check_size(in.limits().max_output_bytes + 1);
  return in.make_string(std::move(*r));
}

Value f_string(Interpreter& in, const Value& v, CallArgs& a) { bind_args(a, "string", {}); return in.make_string(in.str(v)); }
Value f_safe(Interpreter& in, const Value& v, CallArgs& a) { bind_args(a, "safe", {}); return in.make_string(in.str(v)); }

Value f_escape(Interpreter& in, const Value& v, CallArgs& a) {
  bind_args(a, "escape", {});
  std::string out;
  for (char c : in.str(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return in.make_string(std::move(out));
}

Value f_indent(Interpreter& in, const Value& v, CallArgs& a) {
  Args p = bind_args(a, "indent", {"width", "first", "blank"});
  std::string indention;
  if (p[0] && p[0]->is_string()) {
    indention = p[0]->as_string();
  } else {
    int64_t w = 4;
    if (p[0]) {
      if (!p[0]->is_integral()) type_error("can't multiply sequence by non-int of type '" + type_name(*p[0]) + "'");
      w = p[0]->as_int();
    }
    in.check_size(static_cast<size_t>(std::max<int64_t>(w, 0)));
    indention = std::string(static_cast<size_t>(std::max<int64_t>(w, 0)), ' ');
  }
  // Jinja does `s += "\n"` and then s.splitlines(): anything but a string fails the way Python does.
  if (v.is_undefined()) raise_undefined(v);
  if (v.is_array_of(ArrayKind::kList)) fail("AttributeError", "'list' object has no attribute 'splitlines'");
  if (!v.is_string()) {
    if (v.is_array_of(ArrayKind::kTuple)) type_error("can only concatenate tuple (not \"str\") to tuple");
    type_error("unsupported operand type(s) for +=: '" + type_name(v) + "' and 'str'");
  }
  std::string s = v.as_string() + "\n";
  std::vector<std::string> lines = pystr::splitlines(s, false);
  std::string rv;
  auto add = [&](std::string_view piece) {
    in.check_size(rv.size() + piece.size());
    rv += piece;
  };
  if (flag(p[2])) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) { add("\n"); add(indention); }
      add(lines[i]);
    }
  } else {
    add(lines.empty() ? std::string() : lines[0]);
    for (size_t i = 1; i < lines.size(); ++i) {
      add("\n");
      if (!lines[i].empty()) add(indention);
      add(lines[i]);
    }
  }
  if (flag(p[1])) rv = indention + rv;
  return in.make_string(std::move(rv));
}

Value f_center(Interpreter& in, const Value& v, CallArgs& a) {
  Args p = bind_args(a, "center", {"width"});
  CallArgs m;
  m.args.push_back(p[0] ? *p[0] : Value::integer(80));
  return call_method(in, Value::string(in.str(v)), "center", m);
}

Value f_wordcount(Interpreter& in, const Value& v, CallArgs& a) {
  bind_args(a, "wordcount", {});
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : uni::decode(in.str(v))) {
    bool w = uni::is_word(c);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

Value f_truncate(Interpreter& in, const Value& v, CallArgs& a) {
  Args p = bind_args(a, "truncate", {"length", "killwords", "end", "leeway"});
  int64_t length = p[0] && p[0]->is_integral() ? p[0]->as_int() : 255;
  std::string end = p[2] ? in.str(*p[2]) : std::string("...");
  int64_t leeway = p[3] && p[3]->is_integral() ? p[3]->as_int() : 5;
  auto end_len = static_cast<int64_t>(uni::length(end));
  if (length < end_len) fail("AssertionError", "expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
  if (leeway < 0) fail("AssertionError", "expected leeway >= 0, got " + std::to_string(leeway));
  if (!v.is_string()) {
    // Jinja applies len() and slicing to the value itself: other sequences pass through when short enough
    if (py_len(v) <= length + leeway) return v;
    type_error("can only truncate strings (got " + type_name(v) + ")");
  }
  auto cps = uni::decode(v.as_string());
  if (static_cast<int64_t>(cps.size()) <= length + leeway) return v;
  std::string head = uni::encode(cps, 0, static_cast<size_t>(length - end_len));
  if (flag(p[1])) return in.make_string(head + end);
  return in.make_string(pystr::rsplit(head, std::string(" "), 1)[0] + end);
}

Value f_format(Interpreter& in, const Value& v, CallArgs& a) {
  if (!a.args.empty() && !a.kwargs.empty()) filter_error("can't handle positional and keyword arguments at the same time");
  Value args;
  if (!a.kwargs.empty()) {
    MapBuilder b;
    for (const auto& [k, x] : a.kwargs) b.set(Value::string(k), x);
    args = b.build();
  } else {
    args = Value::tuple(a.args);
  }
  return in.make_string(percent_format(in.str(v), args, in.limits().max_output_bytes));
}

// ----- tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -----

Value f_tojson(Interpreter& in, const Value& v, CallArgs& a) {
  Args p = bind_args(a, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = flag(p[0]);
  if (p[1] && !p[1]->is_none()) {
    if (p[1]->is_string()) {
      o.indent = p[1]->as_string();
    } else if (p[1]->is_integral()) {
      int64_t n = std::max<int64_t>(0, p[1]->as_int());
      in.check_size(static_cast<size_t>(n));
      o.indent = std::string(static_cast<size_t>(n), ' ');
    } else {
      type_error("can't multiply sequence by non-int of type '" + type_name(*p[1]) + "'");
    }
    o.item_separator = ",";
  }
  if (p[2] && !p[2]->is_none()) {
    std::vector<Value> seps = iterate(*p[2]);
    if (seps.size() != 2) value_error("too many values to unpack (expected 2)");
    if (!seps[0].is_string() || !seps[1].is_string()) type_error("separators must be strings");
    o.item_separator = seps[0].as_string();
    o.key_separator = seps[1].as_string();
  }
  o.sort_keys = flag(p[3]);
  Printer printer(in.limits().max_output_bytes);
  json_dump(printer, v, o);
  return in.make_string(printer.take());
}

// ----- numbers -----

Value f_abs(Interpreter&, const Value& v, CallArgs& a) {
  bind_args(a, "abs", {});
  if (v.is_integral()) {
    if (v.as_int() == INT64_MIN) fail("OverflowError", "integer result out of range (integers are limited to 64 bits)");
    return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  if (v.is_float()) return Value::number(std::fabs(v.as_double()));
  type_error("bad operand type for abs(): '" + type_name(v) + "'");
}

// Python's int(str, base): whitespace, a sign, digits with single underscores, base prefixes.
std::optional<int64_t> parse_int(std::string_view s, int64_t base) {
  std::string t = pystr::strip(s, std::nullopt, true, true);
  size_t i = 0;
  bool neg = false;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) neg = t[i++] == '-';
  auto prefix = [&](char c) { return i + 1 < t.size() && t[i] == '0' && (t[i + 1] | 0x20) == c; };
  if (base == 0) {
    base = prefix('x') ? 16 : prefix('o') ? 8 : prefix('b') ? 2 : 10;
    if (base != 10) i += 2;
    else if (t.size() - i > 1 && t[i] == '0' && t.find_first_not_of("0_", i) != std::string::npos) return std::nullopt;
  } else if ((base == 16 && prefix('x')) || (base == 8 && prefix('o')) || (base == 2 && prefix('b'))) {
    i += 2;
  }
  if (base < 2 || base > 36) value_error("int() base must be >= 2 and <= 36, or 0");
  if (i < t.size() && t[i] == '_' && i >= 2 && (t[i - 1] | 0x20) >= 'a') ++i;  // 0x_1f
  if (i >= t.size()) return std::nullopt;
  __int128 v = 0;
  bool last_digit = false;
  for (; i < t.size(); ++i) {
    char c = t[i];
    if (c == '_') {
      if (!last_digit) return std::nullopt;
      last_digit = false;
      continue;
    }
    int d = (c >= '0' && c <= '9') ? c - '0' : ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ? (c | 0x20) - 'a' + 10 : 99;
    if (d >= base) return std::nullopt;
    v = v * base + d;
    if (v > static_cast<__int128>(INT64_MAX) + 1) fail("OverflowError", "integer too large (integers are limited to 64 bits)");
    last_digit = true;
  }
  if (!last_digit) return std::nullopt;
  if (neg) v = -v;
  if (v > INT64_MAX) fail("OverflowError", "integer too large (integers are limited to 64 bits)");
  return static_cast<int64_t>(v);
}

// Python's float(str).
std::optional<double> parse_float(std::string_view s) {
  std::string t = pystr::strip(s, std::nullopt, true, true);
  std::string clean;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '_') {
      bool ok = i > 0 && i + 1 < t.size() && std::isdigit(static_cast<unsigned char>(t[i - 1])) &&
                std::isdigit(static_cast<unsigned char>(t[i + 1]));
      if (!ok) return std::nullopt;
      continue;
    }
    clean += t[i];
  }
  if (clean.empty()) return std::nullopt;
  std::string lower = uni::lower(clean);
  size_t sign = (lower[0] == '+' || lower[0] == '-') ? 1 : 0;
  std::string body = lower.substr(sign);
  if (body == "inf" || body == "infinity" || body == "nan") {
    double d = body == "nan" ? NAN : INFINITY;
    return lower[0] == '-' ? -d : d;
  }
  if (body.empty() || body.find_first_not_of("0123456789.e+-") != std::string::npos) return std::nullopt;
  if (body.find('x') != std::string::npos) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return d;
}

std::optional<int64_t> float_to_int(double d) {
  if (std::isnan(d)) return std::nullopt;
  if (std::isinf(d)) fail("OverflowError", "cannot convert float infinity to integer");
  double t = std::trunc(d);
  if (t >= 9223372036854775808.0 || t < -9223372036854775808.0) fail("OverflowError", "integer too large (integers are limited to 64 bits)");
  return static_cast<int64_t>(t);
}

Value f_int(Interpreter&, const Value& v, CallArgs& a) {
  Args p = bind_args(a, "int", {"default", "base"});
  Value dflt = p[0] ? *p[0] : Value::integer(0);
  int64_t base = p[1] && p[1]->is_integral() ? p[1]->as_int() : 10;
  if (v.is_undefined()) raise_undefined(v);
  if (v.is_integral()) return Value::integer(v.as_int());
  if (v.is_float()) {
    if (std::isinf(v.as_double())) fail("OverflowError", "cannot convert float infinity to integer");
    if (auto i = float_to_int(v.as_double())) return Value::integer(*i);
    return dflt;
  }
  if (v.is_string()) {
    if (auto i = parse_int(v.as_string(), base)) return Value::integer(*i);
    if (auto d = parse_float(v.as_string())) {
      if (std::isinf(*d)) return dflt;  // the fallback's OverflowError is caught
      if (auto i = float_to_int(*d)) return Value::integer(*i);
    }
  }
  return dflt;
}

Value f_float(Interpreter&, const Value& v, CallArgs& a) {
  Args p = bind_args(a, "float", {"default"});
  Value dflt = p[0] ? *p[0] : Value::number(0.0);
  if (v.is_undefined()) raise_undefined(v);
  if (v.is_number()) return Value::number(v.as_double());
  if (v.is_string()) {
    if (auto d = parse_float(v.as_string())) return Value::number(*d);
  }
  return dflt;
}

double round_half_even(double x) { return std::nearbyint(x); }

Value f_round(Interpreter&, const Value& v, CallArgs& a) {
  Args p = bind_args(a, "round", {"precision", "method"});
  int64_t precision = 0;
  if (p[0]) {
    if (!p[0]->is_integral()) type_error("'" + type_name(*p[0]) + "' object cannot be interpreted as an integer");
    precision = p[0]->as_int();
  }
  std::string method = p[1] && p[1]->is_string() ? p[1]->as_string() : "common";
  if (p[1] && !p[1]->is_string()) filter_error("method must be common, ceil or floor");
  if (method != "common" && method != "ceil" && method != "floor") filter_error("method must be common, ceil or floor");
  if (!v.is_number()) type_error("type " + type_name(v) + " doesn't define __round__ method");
  if (method == "common") {
    if (v.is_integral()) {
      if (precision >= 0) return Value::integer(v.as_int());
      if (precision < -18) return Value::integer(0);
      int64_t m = 1;
      for (int64_t i = 0; i < -precision; ++i) m *= 10;
      int64_t x = v.as_int(), q = x / m, r = x % m;
      if (r < 0) { r += m; --q; }
      if (2 * r > m || (2 * r == m && (q % 2 != 0))) ++q;
      int64_t out;
      if (__builtin_mul_overflow(q, m, &out)) fail("OverflowError", "integer result out of range");
      return Value::integer(out);
    }
    double x = v.as_double();
    if (!std::isfinite(x)) return Value::number(x);
    if (precision > 300) return Value::number(x);
    if (precision >= 0) {
      char buf[512];
      std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), x);
      return Value::number(std::strtod(buf, nullptr));
    }
    if (precision < -308) return Value::number(std::copysign(0.0, x));
    double m = std::pow(10.0, static_cast<double>(-precision));
    return Value::number(round_half_even(x / m) * m);
  }
  double m = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_double() * m;
  return Value::number((method == "ceil" ? std::ceil(x) : std::floor(x)) / m);
}

// ----- sequences -----

Value f_length(Interpreter&, const Value& v, CallArgs& a) { bind_args(a, "length", {}); return Value::integer(py_len(v)); }

Value f_list(Interpreter& in, const Value& v, CallArgs& a) {
  bind_args(a, "list", {});
  std::vector<Value> items = iterate(v);
  in.charge(items.size());
  return Value::array(std::move(items));
}

Value f_first(Interpreter&, const Value& v, CallArgs& a) {
  bind_args(a, "first", {});
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Interpreter&, const Value& v, CallArgs& a) {
  bind_args(a, "last", {});
  if (v.is_array() && v.as_array().one_shot()) type_error("'" + type_name(v) + "' object is not reversible");
  if (!v.is_undefined() && !v.is_string() && !v.is_array() && !v.is_map()) {
    type_error("'" + type_name(v) + "' object is not reversible");
  }
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_reverse(Interpreter& in, const Value& v, CallArgs& a) {
  bind_args(a, "reverse", {});
  if (v.is_string()) {
    auto cps = uni::decode(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return in.make_string(uni::encode(cps));
  }
  bool reversible = v.is_undefined() || v.is_map() || (v.is_array() && !v.as_array().one_shot());
  if (!reversible && !(v.is_array())) filter_error("argument must be iterable");
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  in.charge(items.size());
  return Value::array(std::move(items), reversible ? ArrayKind::kIterator : ArrayKind::kList);
}

Value f_join(Interpreter& in, const Value& v, CallArgs& a) {
  Args p = bind_args(a, "join", {"d", "attribute"});
  std::string sep = p[0] ? in.str(*p[0]) : std::string();
  std::vector<Value> parts_path;
  bool by_attr = p[1] && !p[1]->is_none();
  if (by_attr) parts_path = attribute_parts(*p[1]);
  std::string out;
  bool first = true;
  for (const auto& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += in.str(by_attr ? lookup_path(in, item, parts_path) : item);
    in.check_size(out.size());
  }
  return in.make_string(std::move(out));
}

Value f_default(Interpreter&, const Value& v, CallArgs& a) {
  Args p = bind_args(a, "default", {"default_value", "boolean"});
  if (v.is_undefined() || (flag(p[1]) && !truthy(v))) return p[0] ? *p[0] : Value::string("");
  return v;
}

Value f_items(Interpreter& in, const Value& v, CallArgs& a) {
  bind_args(a, "items", {});
  if (v.is_undefined()) return generator({});
  if (!v.is_map()) type_error("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, x] : v.as_map().items) out.push_back(Value::tuple({k, x}));
  in.charge(out.size());
  return generator(std::move(out));
}

Value f_dictsort(Interpreter& in, const Value& v, CallArgs& a) {
  Args p = bind_args(a, "dictsort", {"case_sensitive", "by", "reverse"});
  bool cs = flag(p[0]);
  std::string by = p[1] && p[1]->is_string() ? p[1]->as_string() : "key";
  if (by != "key" && by != "value") filter_error("You can only sort by either \"key\" or \"value\"");
  if (v.is_undefined()) raise_undefined(v);
  if (!v.is_map()) fail("AttributeError", "'" + type_name(v) + "' object has no attribute 'items'");
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& [k, x] : v.as_map().items) {
    keyed.emplace_back(ignore_case(by == "key" ? k : x, cs), Value::tuple({k, x}));
  }
  in.charge(keyed.size() * 4);
  sort_values(keyed, flag(p[2]));
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::array(std::move(out));
}

Value f_sort(Interpreter& in, const Value& v, CallArgs& a) {
  Args p = bind_args(a, "sort", {"reverse", "case_sensitive", "attribute"});
  bool cs = flag(p[1]);
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : iterate(v)) keyed.emplace_back(sort_key(in, item, p[2], cs), std::move(item));
  in.charge(keyed.size() * 4);
  sort_values(keyed, flag(p[0]));
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::array(std::move(out));
}

Value f_unique(Interpreter& in, const Value& v, CallArgs& a) {
  Args p = bind_args(a, "unique", {"case_sensitive", "attribute"});
  bool cs = flag(p[0]);
  std::vector<Value> path;
  if (p[1] && !p[1]->is_none()) path = attribute_parts(*p[1]);
  std::vector<Value> seen, out;
  for (auto& item : iterate(v)) {
    Value key = ignore_case(lookup_path(in, item, path), cs);
    check_hashable(key);
    in.charge(seen.size() / 8 + 1);
    bool dup = std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return py_equal(s, key); });
    if (!dup) {
      seen.push_back(std::move(key));
      out.push_back(std::move(item));
    }
  }
  return generator(std::move(out));
}

Value min_max(Interpreter& in, const Value& v, CallArgs& a, bool want_max) {
  Args p = bind_args(a, want_max ? "max" : "min", {"case_sensitive", "attribute"});
  bool cs = flag(p[0]);
  std::vector<Value> path;
  if (p[1] && !p[1]->is_none()) path = attribute_parts(*p[1]);
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = ignore_case(lookup_path(in, items[0], path), cs);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = ignore_case(lookup_path(in, items[i], path), cs);
    int c = py_compare(key, best_key, want_max ? ">" : "<");
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

Value f_min(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, false); }
Value f_max(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, true); }

Value f_sum(Interpreter& in, const Value& v, CallArgs& a) {
  Args p = bind_args(a, "sum", {"attribute", "start"});
  std::vector<Value> path;
  if (p[0] && !p[0]->is_none()) path = attribute_parts(*p[0]);
  Value total = p[1] ? *p[1] : Value::integer(0);
  for (const auto& item : iterate(v)) {
    total = binary_op(BinOp::kAdd, total, lookup_path(in, item, path), in.limits().max_output_bytes);
    in.charge(1);
  }
  return total;
}

Value f_batch(Interpreter& in, const Value& v, CallArgs& a) {
  Args p = bind_args(a, "batch", {"linecount", "fill_with"});
  if (!p[0] || !p[0]->is_integral()) type_error("batch() needs an integer line count");
  int64_t n = p[0]->as_int();
  std::vector<Value> out, tmp;
  for (auto& item : iterate(v)) {
    if (static_cast<int64_t>(tmp.size()) == n) {
      out.push_back(Value::array(std::move(tmp)));
      tmp.clear();
    }
    tmp.push_back(std::move(item));
    in.charge(1);
  }
  if (!tmp.empty()) {
    if (p[1] && !p[1]->is_none()) {
      while (static_cast<int64_t>(tmp.size()) < n) {
        tmp.push_back(*p[1]);
        in.charge(1);
      }
    }
    out.push_back(Value::array(std::move(tmp)));
  }
  return generator(std::move(out));
}

Value f_attr(Interpreter& in, const Value& v, CallArgs& a) {
  Args p = bind_args(a, "attr", {"name"});
  if (!p[0] || !p[0]->is_string()) type_error("attribute name must be string");
  const std::string& name = p[0]->as_string();
  if (v.is_object()) return in.get_attr(v, name);
  if (v.is_undefined() || find_method(v, name) != MethodKind::kNone || name.starts_with("__")) return in.get_attr(v, name);
  return Value::undefined("'" + type_name(v) + " object' has no attribute '" + name + "'");
}

// map(filter, *args) or map(attribute=..., default=...)
Value f_map(Interpreter& in, const Value& v, CallArgs& a) {
  std::vector<Value> out;
  if (!truthy(v)) return generator({});  // Jinja's map starts with `if value:`
  const Value* attribute = nullptr;
  const Value* dflt = nullptr;
  for (const auto& [k, x] : a.kwargs) {
    if (k == "attribute") attribute = &x;
    else if (k == "default") dflt = &x;
  }
  if (a.args.empty() && attribute) {
    for (const auto& [k, x] : a.kwargs) {
      if (k != "attribute" && k != "default") filter_error("Unexpected keyword argument '" + k + "'");
    }
    std::vector<Value> path = attribute_parts(*attribute);
    for (const auto& item : iterate(v)) {
      Value x = lookup_path(in, item, path);
      if (dflt && !dflt->is_none() && x.is_undefined()) x = *dflt;
      out.push_back(std::move(x));
    }
    return generator(std::move(out));
  }
  if (a.args.empty()) filter_error("map requires a filter argument");
  if (!a.args[0].is_string()) type_error("filter name must be a string");
  std::string name = a.args[0].as_string();
  CallArgs rest;
  rest.args.assign(a.args.begin() + 1, a.args.end());
  rest.kwargs = a.kwargs;
  for (const auto& item : iterate(v)) {
    CallArgs call = rest;
    out.push_back(in.call_filter(name, item, call));
  }
  return generator(std::move(out));
}

Value select_or_reject(Interpreter& in, const Value& v, CallArgs& a, bool by_attr, bool select) {
  if (!truthy(v)) return generator({});
  size_t off = 0;
  std::vector<Value> path;
  if (by_attr) {
    if (a.args.empty()) filter_error("Missing parameter for attribute name");
    path = attribute_parts(a.args[0]);
    off = 1;
  }
  bool has_test = a.args.size() > off;
  std::string test;
  if (has_test) {
    if (!a.args[off].is_string()) type_error("test name must be a string");
    test = a.args[off].as_string();
  }
  CallArgs rest;
  if (has_test) rest.args.assign(a.args.begin() + off + 1, a.args.end());
  rest.kwargs = a.kwargs;
  std::vector<Value> out;
  for (auto& item : iterate(v)) {
    Value subject = lookup_path(in, item, path);
    bool ok;
    if (has_test) {
      CallArgs call = rest;
      ok = in.call_test(test, subject, call);
    } else {
      ok = truthy(subject);
    }
    if (ok == select) out.push_back(std::move(item));
    in.charge(1);
  }
  return generator(std::move(out));
}

Value f_select(Interpreter& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, false, true); }
Value f_reject(Interpreter& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, true, false); }

struct Entry {
  std::string_view name;
  FilterFn fn;
};

constexpr Entry kFilters[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize}, {"center", f_center},
    {"count", f_length}, {"d", f_default}, {"default", f_default}, {"dictsort", f_dictsort}, {"e", f_escape},
    {"escape", f_escape}, {"first", f_first}, {"float", f_float}, {"forceescape", f_escape}, {"format", f_format},
    {"indent", f_indent}, {"int", f_int}, {"items", f_items}, {"join", f_join}, {"last", f_last},
    {"length", f_length}, {"list", f_list}, {"lower", f_lower}, {"map", f_map}, {"max", f_max}, {"min", f_min},
    {"reject", f_reject}, {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse},
    {"round", f_round}, {"safe", f_safe}, {"select", f_select}, {"selectattr", f_selectattr}, {"sort", f_sort},
    {"string", f_string}, {"sum", f_sum}, {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim},
    {"truncate", f_truncate}, {"unique", f_unique}, {"upper", f_upper}, {"wordcount", f_wordcount},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const auto& e : kFilters) {
    if (e.name == name) return e.fn;
  }
  return nullptr;
}

}  // namespace kvasir::jinja
