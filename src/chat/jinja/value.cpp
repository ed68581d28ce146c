#include "chat/jinja/value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "chat/jinja/error.h"
#include "chat/jinja/pyformat.h"
#include "chat/jinja/unicode.h"

namespace kvasir::jinja {

namespace {

const std::string& empty_string() {
  static const std::string s;
  return s;
}

int container_depth(const std::vector<Value>& items) {
  int d = 0;
  for (const auto& v : items) d = std::max(d, v.depth());
  if (d + 1 > kMaxValueDepth) fail("RecursionError", "values nested more than " + std::to_string(kMaxValueDepth) + " deep");
  return d + 1;
}

bool is_hashable(const Value& v) {
  switch (v.kind()) {
    case Kind::kMap: return false;
    case Kind::kArray: {
      const Array& a = v.as_array();
      if (a.kind == ArrayKind::kTuple) {
        return std::all_of(a.items.begin(), a.items.end(), is_hashable);
      }
      return a.one_shot() || a.kind == ArrayKind::kRange;
    }
    default: return true;
  }
}

bool numeric_equal(const Value& a, const Value& b) {
  if (a.is_float() || b.is_float()) {
    if (a.is_float() && b.is_float()) return a.as_double() == b.as_double();
    const Value& f = a.is_float() ? a : b;
    const Value& i = a.is_float() ? b : a;
    return static_cast<long double>(f.as_double()) == static_cast<long double>(i.as_int());
  }
  return a.as_int() == b.as_int();
}

}  // namespace

// ----- Value -----

Value Value::undefined(std::string hint, bool unsafe) {
  Value v;
  v.s_ = std::make_shared<const std::string>(std::move(hint));
  v.i_ = unsafe ? 1 : 0;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::string(std::shared_ptr<const std::string> s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::move(s);
  return v;
}

Value Value::array(std::shared_ptr<const Array> a) {
  Value v;
  v.kind_ = Kind::kArray;
  v.a_ = std::move(a);
  return v;
}

Value Value::array(std::vector<Value> items, ArrayKind kind) {
  auto a = std::make_shared<Array>();
  a->kind = kind;
  a->depth = container_depth(items);
  a->items = std::move(items);
  return array(std::shared_ptr<const Array>(std::move(a)));
}

Value Value::map(std::shared_ptr<const Map> m) {
  Value v;
  v.kind_ = Kind::kMap;
  v.m_ = std::move(m);
  return v;
}

bool Value::is_array_of(ArrayKind k) const { return kind_ == Kind::kArray && a_->kind == k; }

bool Value::is_sequence() const {
  return kind_ == Kind::kArray &&
         (a_->kind == ArrayKind::kList || a_->kind == ArrayKind::kTuple || a_->kind == ArrayKind::kRange);
}

const std::string& Value::undefined_hint() const { return s_ ? *s_ : empty_string(); }

int Value::depth() const {
  if (kind_ == Kind::kArray) return a_->depth;
  if (kind_ == Kind::kMap) return m_->depth;
  return 0;
}

// ----- Map -----

const Value* Map::find(std::string_view key) const {
  if (!index.empty()) {
    auto it = index.find(key);
    return it == index.end() ? nullptr : &items[it->second].second;
  }
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

const Value* Map::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.as_string()));
  for (const auto& [k, v] : items) {
    if (py_equal(k, key)) return &v;
  }
  return nullptr;
}

void MapBuilder::set(Value key, Value value) {
  check_hashable(key);
  auto& items = map_->items;
  if (key.is_string() && !map_->index.empty()) {
    auto it = map_->index.find(std::string_view(key.as_string()));
    if (it != map_->index.end()) { items[it->second].second = std::move(value); return; }
  } else {
    for (auto& [k, v] : items) {
      if (py_equal(k, key)) { v = std::move(value); return; }
    }
  }
  items.emplace_back(std::move(key), std::move(value));
  // Large maps get an index over their string keys (the strings are shared and never move).
  constexpr size_t kIndexFrom = 16;
  if (items.size() == kIndexFrom) {
    for (size_t i = 0; i < items.size(); ++i) {
      if (items[i].first.is_string()) map_->index.emplace(std::string_view(items[i].first.as_string()), i);
    }
  } else if (items.size() > kIndexFrom && items.back().first.is_string()) {
    map_->index.emplace(std::string_view(items.back().first.as_string()), items.size() - 1);
  }
}

Value MapBuilder::build() {
  int d = 0;
  for (const auto& [k, v] : map_->items) d = std::max({d, k.depth(), v.depth()});
  if (d + 1 > kMaxValueDepth) fail("RecursionError", "values nested more than " + std::to_string(kMaxValueDepth) + " deep");
  map_->depth = d + 1;
  auto m = std::move(map_);
  map_ = std::make_shared<Map>();
  return Value::map(std::shared_ptr<const Map>(std::move(m)));
}

// ----- arguments -----

std::vector<std::optional<Value>> bind_args(const CallArgs& call, std::string_view fn,
                                            std::initializer_list<std::string_view> params) {
  std::vector<std::optional<Value>> out(params.size());
  if (call.args.size() > params.size()) {
    type_error(std::string(fn) + "() takes at most " + std::to_string(params.size()) + " argument(s) (" +
               std::to_string(call.args.size()) + " given)");
  }
  for (size_t i = 0; i < call.args.size(); ++i) out[i] = call.args[i];
  for (const auto& [name, value] : call.kwargs) {
    size_t idx = 0;
    for (auto p : params) {
      if (p == name) break;
      ++idx;
    }
    if (idx == params.size()) type_error(std::string(fn) + "() got an unexpected keyword argument '" + name + "'");
    if (out[idx]) type_error(std::string(fn) + "() got multiple values for argument '" + name + "'");
    out[idx] = value;
  }
  return out;
}

// ----- Object -----

void Object::repr(Printer& p, int) const { p.raw("<" + type_name() + " object>"); }
std::optional<Value> Object::get_attr(Interpreter&, std::string_view) { return std::nullopt; }
void Object::set_attr(std::string_view, Value) { type_error("cannot assign attribute on non-namespace object"); }
Value Object::call(Interpreter&, CallArgs&) { type_error("'" + type_name() + "' object is not callable"); }
std::optional<Value> Object::call_method(Interpreter&, std::string_view, CallArgs&) { return std::nullopt; }

// ----- Python semantics -----

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: case Kind::kNone: return false;
    case Kind::kBool: case Kind::kInt: return v.as_int() != 0;
    case Kind::kFloat: return v.as_double() != 0.0;
    case Kind::kString: return !v.as_string().empty();
    case Kind::kArray: return v.as_array().one_shot() || !v.as_array().items.empty();
    case Kind::kMap: return !v.as_map().items.empty();
    case Kind::kObject: return true;
  }
  return false;
}

bool py_equal(const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth) fail("RecursionError", "maximum recursion depth exceeded in comparison");
  if (a.is_number() && b.is_number()) return numeric_equal(a, b);
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined: case Kind::kNone: return true;
    case Kind::kString: return a.as_string() == b.as_string();
    case Kind::kArray: {
      const Array& x = a.as_array();
      const Array& y = b.as_array();
      if (&x == &y) return true;
      if (x.one_shot() || y.one_shot() || x.kind != y.kind || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!py_equal(x.items[i], y.items[i], depth + 1)) return false;
      }
      return true;
    }
    case Kind::kMap: {
      const Map& x = a.as_map();
      const Map& y = b.as_map();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find(k);
        if (!other || !py_equal(v, *other, depth + 1)) return false;
      }
      return true;
    }
    case Kind::kObject: return a.as_object() == b.as_object();
    default: return false;
  }
}

int py_compare(const Value& a, const Value& b, std::string_view op, int depth) {
  if (depth > kMaxValueDepth) fail("RecursionError", "maximum recursion depth exceeded in comparison");
  if (a.is_undefined()) raise_undefined(a);
  if (b.is_undefined()) raise_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    long double x = a.is_float() ? a.as_double() : static_cast<long double>(a.as_int());
    long double y = b.is_float() ? b.as_double() : static_cast<long double>(b.as_int());
    return x < y ? -1 : x > y ? 1 : 0;  // NaN compares as equal here; <, > then both read false
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_array() && b.is_array() && a.as_array().kind == b.as_array().kind &&
      (a.as_array().kind == ArrayKind::kList || a.as_array().kind == ArrayKind::kTuple)) {
    const auto& x = a.as_array().items;
    const auto& y = b.as_array().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!py_equal(x[i], y[i], depth + 1)) return py_compare(x[i], y[i], op, depth + 1);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  type_error("'" + std::string(op) + "' not supported between instances of '" + type_name(a) + "' and '" +
             type_name(b) + "'");
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kMap: return "dict";
    case Kind::kObject: return v.as_object()->type_name();
    case Kind::kArray:
      switch (v.as_array().kind) {
        case ArrayKind::kList: return "list";
        case ArrayKind::kTuple: return "tuple";
        case ArrayKind::kGenerator: return "generator";
        case ArrayKind::kIterator: return "list_reverseiterator";
        case ArrayKind::kRange: return "range";
        case ArrayKind::kDictKeys: return "dict_keys";
        case ArrayKind::kDictValues: return "dict_values";
        case ArrayKind::kDictItems: return "dict_items";
      }
  }
  return "object";
}

void check_hashable(const Value& v) {
  if (!is_hashable(v)) type_error("unhashable type: '" + type_name(v) + "'");
}

int64_t py_len(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return 0;
    case Kind::kString: return static_cast<int64_t>(uni::length(v.as_string()));
    case Kind::kMap: return static_cast<int64_t>(v.as_map().items.size());
    case Kind::kArray:
      if (!v.as_array().one_shot()) return static_cast<int64_t>(v.as_array().items.size());
      break;
    default: break;
  }
  type_error("object of type '" + type_name(v) + "' has no len()");
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return {};
    case Kind::kString: {
      const std::string& s = v.as_string();
      std::vector<Value> out;
      if (uni::is_ascii(s)) {
        out.reserve(s.size());
        for (char c : s) out.push_back(Value::string(std::string(1, c)));
      } else {
        for (char32_t c : uni::decode(s)) {
          std::string one;
          uni::append(one, c);
          out.push_back(Value::string(std::move(one)));
        }
      }
      return out;
    }
    case Kind::kArray: {
      const Array& a = v.as_array();
      if (a.one_shot()) {
        if (a.consumed) return {};
        a.consumed = true;
      }
      return a.items;
    }
    case Kind::kMap: {
      std::vector<Value> out;
      out.reserve(v.as_map().items.size());
      for (const auto& kv : v.as_map().items) out.push_back(kv.first);
      return out;
    }
    default: type_error("'" + type_name(v) + "' object is not iterable");
  }
}

bool py_contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kUndefined: return false;
    case Kind::kString:
      if (!item.is_string()) {
        type_error("'in <string>' requires string as left operand, not " + type_name(item));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Kind::kMap:
      check_hashable(item);
      return container.as_map().find(item) != nullptr;
    case Kind::kArray:
      for (const auto& x : iterate(container)) {
        if (py_equal(x, item)) return true;
      }
      return false;
    default: type_error("argument of type '" + type_name(container) + "' is not iterable");
  }
}

void raise_undefined(const Value& v) {
  fail(v.undefined_is_unsafe() ? "SecurityError" : "UndefinedError", v.undefined_hint());
}

// ----- printing -----

void Printer::raw(std::string_view s) {
  if (out_.size() + s.size() > max_) {
    fail("OutputLimitError", "output would exceed the limit of " + std::to_string(max_) + " bytes");
  }
  out_ += s;
}

void Printer::repr_string(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string o;
  o.reserve(s.size() + 2);
  o += quote;
  for (char32_t c : uni::decode(s)) {
    if (c == '\\') { o += "\\\\"; continue; }
    if (c == static_cast<char32_t>(quote)) { o += '\\'; o += quote; continue; }
    if (c == '\n') { o += "\\n"; continue; }
    if (c == '\r') { o += "\\r"; continue; }
    if (c == '\t') { o += "\\t"; continue; }
    if (uni::is_printable(c)) { uni::append(o, c); continue; }
    char buf[16];
    if (c < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
    else if (c < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
    else std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
    o += buf;
  }
  o += quote;
  raw(o);
}

void Printer::str(const Value& v, int depth) {
  switch (v.kind()) {
    case Kind::kUndefined: return;
    case Kind::kString: raw(v.as_string()); return;
    default: repr(v, depth);
  }
}

void Printer::repr(const Value& v, int depth) {
  if (depth > kMaxValueDepth) fail("RecursionError", "maximum recursion depth exceeded while getting the repr of an object");
  switch (v.kind()) {
    case Kind::kUndefined: raw("Undefined"); return;
    case Kind::kNone: raw("None"); return;
    case Kind::kBool: raw(v.as_bool() ? "True" : "False"); return;
    case Kind::kInt: raw(std::to_string(v.as_int())); return;
    case Kind::kFloat: raw(float_repr(v.as_double())); return;
    case Kind::kString: repr_string(v.as_string()); return;
    case Kind::kObject: v.as_object()->repr(*this, depth + 1); return;
    case Kind::kMap: {
      raw("{");
      bool first = true;
      for (const auto& [k, x] : v.as_map().items) {
        if (!first) raw(", ");
        first = false;
        repr(k, depth + 1);
        raw(": ");
        repr(x, depth + 1);
      }
      raw("}");
      return;
    }
    case Kind::kArray: break;
  }
  const Array& a = v.as_array();
  auto list = [&](const char* open, const char* close) {
    raw(open);
    for (size_t i = 0; i < a.items.size(); ++i) {
      if (i) raw(", ");
      repr(a.items[i], depth + 1);
    }
    raw(close);
  };
  switch (a.kind) {
    case ArrayKind::kList: list("[", "]"); return;
    case ArrayKind::kTuple:
      list("(", a.items.size() == 1 ? ",)" : ")");
      return;
    case ArrayKind::kGenerator: raw("<generator object>"); return;
    case ArrayKind::kIterator: raw("<list_reverseiterator object>"); return;
    case ArrayKind::kRange:
      raw("range(" + std::to_string(a.range_start) + ", " + std::to_string(a.range_stop) +
          (a.range_step != 1 ? ", " + std::to_string(a.range_step) : std::string()) + ")");
      return;
    case ArrayKind::kDictKeys: list("dict_keys([", "])"); return;
    case ArrayKind::kDictValues: list("dict_values([", "])"); return;
    case ArrayKind::kDictItems: list("dict_items([", "])"); return;
  }
}

std::string to_str(const Value& v, size_t max_bytes) {
  if (v.is_string()) {
    if (v.as_string().size() > max_bytes) Printer(max_bytes).raw(v.as_string());
    return v.as_string();
  }
  Printer p(max_bytes);
  p.str(v);
  return p.take();
}

std::string to_repr(const Value& v, size_t max_bytes) {
  Printer p(max_bytes);
  p.repr(v);
  return p.take();
}

}  // namespace kvasir::jinja
