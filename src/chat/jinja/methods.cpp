#include "chat/jinja/methods.h"

#include <algorithm>
#include <array>

#include "chat/jinja/error.h"
#include "chat/jinja/operators.h"
#include "chat/jinja/pyformat.h"
#include "chat/jinja/strings.h"
#include "chat/jinja/unicode.h"

namespace kvasir::jinja {

namespace {

constexpr std::array<std::string_view, 38> kStrMethods = {
    "startswith", "endswith", "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "upper", "lower",
    "title", "capitalize", "swapcase", "casefold", "replace", "find", "rfind", "index", "rindex", "count",
    "join", "format", "isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower", "istitle", "isnumeric",
    "isdecimal", "zfill", "center", "ljust", "rjust", "partition", "rpartition", "removeprefix"};
constexpr std::array<std::string_view, 2> kStrMethodsMore = {"removesuffix", "format_map"};
constexpr std::array<std::string_view, 5> kDictSafe = {"items", "keys", "values", "get", "copy"};
constexpr std::array<std::string_view, 5> kDictUnsafe = {"pop", "popitem", "setdefault", "update", "clear"};
constexpr std::array<std::string_view, 3> kListSafe = {"index", "count", "copy"};
constexpr std::array<std::string_view, 8> kListUnsafe = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};

template <size_t N>
bool has(const std::array<std::string_view, N>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

const std::string& want_str(const Value& v, std::string_view what) {
  if (!v.is_string()) type_error(std::string(what) + " must be str, not " + type_name(v));
  return v.as_string();
}

std::optional<std::string> opt_str(const std::optional<Value>& v, std::string_view what) {
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string()) type_error(std::string(what) + " arg must be None or str");
  return v->as_string();
}

int64_t want_int(const std::optional<Value>& v, int64_t dflt, std::string_view what) {
  if (!v || v->is_none()) return dflt;
  if (!v->is_integral()) type_error("'" + type_name(*v) + "' object cannot be interpreted as an integer (" + std::string(what) + ")");
  return v->as_int();
}

Value str_list(Interpreter& in, const std::vector<std::string>& parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (const auto& p : parts) out.push_back(Value::string(p));
  in.charge(parts.size());
  return Value::array(std::move(out));
}

// s[start:end] for the optional start/end arguments of find/count/startswith.
std::string window(const std::string& s, const std::optional<Value>& start, const std::optional<Value>& end) {
  if (!start && !end) return s;
  Value sv = start ? *start : Value::none();
  Value ev = end ? *end : Value::none();
  return slice(Value::string(s), sv, ev, Value::none()).as_string();
}

int64_t window_offset(const std::string& s, const std::optional<Value>& start) {
  if (!start || start->is_none()) return 0;
  int64_t n = static_cast<int64_t>(uni::length(s));
  int64_t b = want_int(start, 0, "start");
  if (b < 0) b = std::max<int64_t>(0, b + n);
  return std::min(b, n);
}

bool affix_match(const std::string& s, CallArgs& args, bool prefix) {
  const char* fn = prefix ? "startswith" : "endswith";
  auto a = bind_args(args, fn, {"prefix", "start", "end"});
  if (!a[0]) type_error(std::string(fn) + "() takes at least 1 argument (0 given)");
  std::string w = window(s, a[1], a[2]);
  auto test = [&](const Value& p) {
    if (!p.is_string()) {
      type_error(std::string(fn) + " first arg must be str or a tuple of str, not " + type_name(p));
    }
    const std::string& x = p.as_string();
    if (x.size() > w.size()) return false;
    return prefix ? w.compare(0, x.size(), x) == 0 : w.compare(w.size() - x.size(), x.size(), x) == 0;
  };
  if (a[0]->is_array_of(ArrayKind::kTuple)) {
    for (const auto& p : a[0]->as_array().items) {
      if (test(p)) return true;
    }
    return false;
  }
  return test(*a[0]);
}

template <class Pred>
bool all_chars(const std::string& s, Pred pred) {
  if (s.empty()) return false;
  for (char32_t c : uni::decode(s)) {
    if (!pred(c)) return false;
  }
  return true;
}

Value pad_to(Interpreter& in, const std::string& s, CallArgs& args, const char* fn, int mode) {
  auto a = bind_args(args, fn, {"width", "fillchar"});
  if (!a[0]) type_error(std::string(fn) + "() takes at least 1 argument (0 given)");
  int64_t width = want_int(a[0], 0, "width");
  std::string fill = " ";
  if (a[1]) {
    fill = want_str(*a[1], "fill character");
    if (uni::length(fill) != 1) type_error("The fill character must be exactly one character long");
  }
  int64_t len = static_cast<int64_t>(uni::length(s));
  if (width <= len) return Value::string(s);
  in.check_size(static_cast<size_t>(width - len) * fill.size() + s.size());
  int64_t total = width - len;
  int64_t left = mode == 0 ? 0 : mode == 1 ? total : total / 2 + (total & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < total - left; ++i) out += fill;
  return in.make_string(std::move(out));
}

Value string_method(Interpreter& in, const std::string& s, std::string_view name, CallArgs& args) {
  const size_t max = in.limits().max_output_bytes;
  if (name == "startswith" || name == "endswith") return Value::boolean(affix_match(s, args, name == "startswith"));
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    auto a = bind_args(args, name, {"chars"});
    return Value::string(pystr::strip(s, opt_str(a[0], name), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    auto a = bind_args(args, name, {"sep", "maxsplit"});
    auto sep = opt_str(a[0], "sep");
    if (sep && sep->empty()) value_error("empty separator");
    int64_t maxsplit = want_int(a[1], -1, "maxsplit");
    return str_list(in, name == "split" ? pystr::split(s, sep, maxsplit) : pystr::rsplit(s, sep, maxsplit));
  }
  if (name == "splitlines") {
    auto a = bind_args(args, name, {"keepends"});
    return str_list(in, pystr::splitlines(s, a[0] && truthy(*a[0])));
  }
  if (name == "upper" || name == "lower" || name == "casefold" || name == "title" || name == "capitalize" ||
      name == "swapcase") {
    bind_args(args, name, {});
    if (name == "upper") return in.make_string(uni::upper(s));
    if (name == "lower") return in.make_string(uni::lower(s));
    if (name == "casefold") {  // lower(), plus the full folding of ß
      std::string folded = uni::lower(s);
      return in.make_string(*pystr::replace(folded, "\xC3\x9F", "ss", -1, in.limits().max_output_bytes + folded.size()));
    }
    if (name == "title") return in.make_string(pystr::title(s));
    if (name == "capitalize") return in.make_string(pystr::capitalize(s));
    return in.make_string(pystr::swapcase(s));
  }
  if (name == "replace") {
    auto a = bind_args(args, name, {"old", "new", "count"});
    if (!a[0] || !a[1]) type_error("replace expected at least 2 arguments");
    auto r = pystr::replace(s, want_str(*a[0], "replace() argument 1"), want_str(*a[1], "replace() argument 2"),
                            want_int(a[2], -1, "count"), max);
    if (!r) in.check_size(max + 1);
    return in.make_string(std::move(*r));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    auto a = bind_args(args, name, {"sub", "start", "end"});
    if (!a[0]) type_error(std::string(name) + "() takes at least 1 argument (0 given)");
    const std::string& sub = want_str(*a[0], "must be str");
    std::string w = window(s, a[1], a[2]);
    int64_t base = window_offset(s, a[1]);
    if (name == "count") {
      if (sub.empty()) return Value::integer(static_cast<int64_t>(uni::length(w)) + 1);
      int64_t n = 0;
      for (size_t p = w.find(sub); p != std::string::npos; p = w.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    }
    bool reverse = name == "rfind" || name == "rindex";
    size_t p = reverse ? w.rfind(sub) : w.find(sub);
    if (p == std::string::npos) {
      if (name == "index" || name == "rindex") value_error("substring not found");
      return Value::integer(-1);
    }
    return Value::integer(base + pystr::cp_index(w, p));
  }
  if (name == "join") {
    auto a = bind_args(args, name, {"iterable"});
    if (!a[0]) type_error("join() takes exactly one argument (0 given)");
    std::string out;
    size_t i = 0;
    for (const auto& item : iterate(*a[0])) {
      if (!item.is_string()) {
        type_error("sequence item " + std::to_string(i) + ": expected str instance, " + type_name(item) + " found");
      }
      if (i++) out += s;
      out += item.as_string();
      in.check_size(out.size());
    }
    return in.make_string(std::move(out));
  }
  if (name == "format" || name == "format_map") {
    FormatHooks hooks{[&in](const Value& v, const std::string& attr) {
                        if (attr.starts_with("_")) fail("SecurityError", "access to attribute '" + attr + "' is unsafe.");
                        return in.get_attr(v, attr);
                      },
                      [&in](const Value& v, const Value& key) { return in.get_item(v, key); }};
    if (name == "format_map") {
      auto a = bind_args(args, name, {"mapping"});
      if (!a[0] || !a[0]->is_map()) type_error("format_map() argument must be a mapping");
      CallArgs kw;
      for (const auto& [k, v] : a[0]->as_map().items) {
        if (k.is_string()) kw.kwargs.emplace_back(k.as_string(), v);
      }
      return in.make_string(str_format(s, kw, hooks, max));
    }
    return in.make_string(str_format(s, args, hooks, max));
  }
  if (name.starts_with("is")) {
    bind_args(args, name, {});
    if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") return Value::boolean(all_chars(s, uni::is_digit));
    if (name == "isalpha") return Value::boolean(all_chars(s, uni::is_alpha));
    if (name == "isalnum") return Value::boolean(all_chars(s, [](char32_t c) { return uni::is_alpha(c) || uni::is_digit(c); }));
    if (name == "isspace") return Value::boolean(all_chars(s, uni::is_space));
    auto cps = uni::decode(s);
    bool any_cased = std::any_of(cps.begin(), cps.end(), uni::is_cased);
    if (name == "isupper") return Value::boolean(any_cased && std::none_of(cps.begin(), cps.end(), uni::is_lower));
    if (name == "islower") return Value::boolean(any_cased && std::none_of(cps.begin(), cps.end(), uni::is_upper));
    if (name == "istitle") return Value::boolean(any_cased && pystr::title(s) == s);
  }
  if (name == "zfill") {
    auto a = bind_args(args, name, {"width"});
    int64_t width = want_int(a[0], 0, "width");
    int64_t len = static_cast<int64_t>(uni::length(s));
    if (width <= len) return Value::string(s);
    in.check_size(static_cast<size_t>(width));
    size_t sign = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
    std::string out = s.substr(0, sign) + std::string(width - len, '0') + s.substr(sign);
    return in.make_string(std::move(out));
  }
  if (name == "ljust") return pad_to(in, s, args, "ljust", 0);
  if (name == "rjust") return pad_to(in, s, args, "rjust", 1);
  if (name == "center") return pad_to(in, s, args, "center", 2);
  if (name == "partition" || name == "rpartition") {
    auto a = bind_args(args, name, {"sep"});
    if (!a[0]) type_error(std::string(name) + "() takes exactly one argument (0 given)");
    const std::string& sep = want_str(*a[0], "must be str");
    if (sep.empty()) value_error("empty separator");
    size_t p = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (p == std::string::npos) {
      if (name == "partition") return Value::tuple({Value::string(s), Value::string(""), Value::string("")});
      return Value::tuple({Value::string(""), Value::string(""), Value::string(s)});
    }
    return Value::tuple({Value::string(s.substr(0, p)), Value::string(sep), Value::string(s.substr(p + sep.size()))});
  }
  if (name == "removeprefix" || name == "removesuffix") {
    auto a = bind_args(args, name, {"affix"});
    if (!a[0]) type_error(std::string(name) + "() takes exactly one argument (0 given)");
    const std::string& x = want_str(*a[0], std::string(name) + "() argument");
    if (name == "removeprefix") return Value::string(s.compare(0, x.size(), x) == 0 ? s.substr(x.size()) : s);
    bool ends = x.size() <= s.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
    return Value::string(ends && !x.empty() ? s.substr(0, s.size() - x.size()) : s);
  }
  type_error("'str' object has no attribute '" + std::string(name) + "'");
}

Value dict_method(Interpreter& in, const Value& self, std::string_view name, CallArgs& args) {
  const Map& m = self.as_map();
  if (name == "get") {
    auto a = bind_args(args, "get", {"key", "default"});
    if (!a[0]) type_error("get expected at least 1 argument, got 0");
    check_hashable(*a[0]);
    if (const Value* v = m.find(*a[0])) return *v;
    return a[1] ? *a[1] : Value::none();
  }
  bind_args(args, name, {});
  if (name == "copy") return self;
  in.charge(m.items.size());
  std::vector<Value> out;
  out.reserve(m.items.size());
  for (const auto& [k, v] : m.items) {
    if (name == "items") out.push_back(Value::tuple({k, v}));
    else if (name == "keys") out.push_back(k);
    else out.push_back(v);
  }
  ArrayKind kind = name == "items" ? ArrayKind::kDictItems : name == "keys" ? ArrayKind::kDictKeys : ArrayKind::kDictValues;
  return Value::array(std::move(out), kind);
}

Value list_method(Interpreter& in, const Value& self, std::string_view name, CallArgs& args) {
  const auto& items = self.as_array().items;
  in.charge(items.size());
  if (name == "copy") {
    bind_args(args, name, {});
    return Value::array(items, ArrayKind::kList);
  }
  auto a = bind_args(args, name, {"value", "start", "stop"});
  if (!a[0]) type_error(std::string(name) + "() takes at least 1 argument (0 given)");
  if (name == "count") {
    if (a[1]) type_error("count() takes exactly one argument");
    return Value::integer(std::count_if(items.begin(), items.end(), [&](const Value& x) { return py_equal(x, *a[0]); }));
  }
  int64_t n = static_cast<int64_t>(items.size());
  auto clamp = [n](int64_t i) { return i < 0 ? std::max<int64_t>(0, i + n) : std::min(i, n); };
  int64_t b = clamp(want_int(a[1], 0, "start")), e = clamp(want_int(a[2], n, "stop"));
  for (int64_t i = b; i < e; ++i) {
    if (py_equal(items[i], *a[0])) return Value::integer(i);
  }
  value_error(in.repr(*a[0]) + " is not in " + type_name(self));
}

}  // namespace

MethodKind find_method(const Value& self, std::string_view name) {
  switch (self.kind()) {
    case Kind::kString:
      return has(kStrMethods, name) || has(kStrMethodsMore, name) ? MethodKind::kSafe : MethodKind::kNone;
    case Kind::kMap:
      if (has(kDictSafe, name)) return MethodKind::kSafe;
      return has(kDictUnsafe, name) ? MethodKind::kUnsafe : MethodKind::kNone;
    case Kind::kArray: {
      ArrayKind k = self.as_array().kind;
      if (k == ArrayKind::kList) {
        if (has(kListSafe, name)) return MethodKind::kSafe;
        return has(kListUnsafe, name) ? MethodKind::kUnsafe : MethodKind::kNone;
      }
      if (k == ArrayKind::kTuple || k == ArrayKind::kRange) {
        return name == "index" || name == "count" ? MethodKind::kSafe : MethodKind::kNone;
      }
      return MethodKind::kNone;
    }
    default: return MethodKind::kNone;
  }
}

Value call_method(Interpreter& in, const Value& self, std::string_view name, CallArgs& args) {
  switch (self.kind()) {
    case Kind::kString: return string_method(in, self.as_string(), name, args);
    case Kind::kMap: return dict_method(in, self, name, args);
    case Kind::kArray: return list_method(in, self, name, args);
    default: type_error("'" + type_name(self) + "' object has no attribute '" + std::string(name) + "'");
  }
}

}  // namespace kvasir::jinja
