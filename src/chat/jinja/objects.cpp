#include "chat/jinja/objects.h"

#include <cstring>
#include <ctime>

#include "chat/jinja/error.h"
#include "chat/jinja/methods.h"

namespace kvasir::jinja {

// ----- Namespace -----

void Namespace::repr(Printer& p, int depth) const {
  p.raw("<Namespace {");
  bool first = true;
  for (const auto& [k, v] : attrs_) {
    if (!first) p.raw(", ");
    first = false;
    p.repr_string(k);
    p.raw(": ");
    p.repr(v, depth + 1);
  }
  p.raw("}>");
}

std::optional<Value> Namespace::get_attr(Interpreter&, std::string_view name) {
  for (const auto& [k, v] : attrs_) {
    if (k == name) return v;
  }
  return std::nullopt;
}

void Namespace::set_attr(std::string_view name, Value v) {
  for (auto& [k, old] : attrs_) {
    if (k == name) { old = std::move(v); return; }
  }
  attrs_.emplace_back(std::string(name), std::move(v));
}

// ----- LoopContext -----

void LoopContext::repr(Printer& p, int) const {
  p.raw("<LoopContext " + std::to_string(index0_ + 1) + "/" + std::to_string(items_->size()) + ">");
}

std::optional<Value> LoopContext::get_attr(Interpreter& in, std::string_view name) {
  const auto n = static_cast<int64_t>(items_->size());
  const auto i = static_cast<int64_t>(index0_);
  if (name == "index0") return Value::integer(i);
  if (name == "index") return Value::integer(i + 1);
  if (name == "revindex") return Value::integer(n - i);
  if (name == "revindex0") return Value::integer(n - i - 1);
  if (name == "first") return Value::boolean(i == 0);
  if (name == "last") return Value::boolean(i + 1 == n);
  if (name == "length") return Value::integer(n);
  if (name == "depth") return Value::integer(depth0_ + 1);
  if (name == "depth0") return Value::integer(depth0_);
  if (name == "previtem") return i > 0 ? (*items_)[i - 1] : Value::undefined("there is no previous item");
  if (name == "nextitem") return i + 1 < n ? (*items_)[i + 1] : Value::undefined("there is no next item");
  if (name == "cycle" || name == "changed") return Value::object(in.make<BoundMethod>(Value::object(this), std::string(name)));
  return std::nullopt;
}

std::optional<Value> LoopContext::call_method(Interpreter&, std::string_view name, CallArgs& args) {
  if (name == "cycle") {
    if (!args.kwargs.empty()) type_error("cycle() takes no keyword arguments");
    if (args.args.empty()) type_error("no items for cycling given");
    return args.args[index0_ % args.args.size()];
  }
  if (name == "changed") {
    if (!args.kwargs.empty()) type_error("changed() takes no keyword arguments");
    Value now = Value::tuple(args.args);
    if (last_changed_ && py_equal(*last_changed_, now)) return Value::boolean(false);
    last_changed_ = std::move(now);
    return Value::boolean(true);
  }
  return std::nullopt;
}

Value LoopContext::call(Interpreter& in, CallArgs& args) {
  if (!loop_->recursive) type_error("The loop must have the 'recursive' marker to be called recursively.");
  if (args.args.size() != 1 || !args.kwargs.empty()) type_error("loop() takes exactly one argument");
  return in.call_loop(*loop_, scope_, args.args[0], depth0_ + 1);
}

// ----- Macro -----

void Macro::repr(Printer& p, int) const { p.raw("<Macro '" + name_ + "'>"); }

std::optional<Value> Macro::get_attr(Interpreter&, std::string_view name) {
  if (name == "name") return Value::string(name_);
  if (name == "arguments") {
    std::vector<Value> names;
    for (const auto& param : def_->params) names.push_back(Value::string(param));
    return Value::tuple(std::move(names));
  }
  if (name == "catch_kwargs") return Value::boolean(def_->uses_kwargs);
  if (name == "catch_varargs") return Value::boolean(def_->uses_varargs);
  if (name == "caller") return Value::boolean(def_->uses_caller);
  return std::nullopt;
}

Value Macro::call(Interpreter& in, CallArgs& args) { return in.call_macro(*this, args); }

// ----- BoundMethod, BuiltinFunction -----

void BoundMethod::repr(Printer& p, int) const {
  p.raw("<built-in method " + name_ + " of " + type_name_of_self() + " object>");
}

std::string BoundMethod::type_name_of_self() const { return jinja::type_name(self_); }

Value BoundMethod::call(Interpreter& in, CallArgs& args) {
  if (self_.is_object()) {
    if (auto r = self_.as_object()->call_method(in, name_, args)) return *r;
    type_error("'" + self_.as_object()->type_name() + "' object has no method '" + name_ + "'");
  }
  return jinja::call_method(in, self_, name_, args);
}

void BuiltinFunction::repr(Printer& p, int) const { p.raw("<function " + name_ + ">"); }

// ----- cycler() and joiner() -----

namespace {

class Cycler : public Object {
 public:
  explicit Cycler(std::vector<Value> items) : items_(std::move(items)) {}
  std::string type_name() const override { return "Cycler"; }
  std::optional<Value> get_attr(Interpreter& in, std::string_view name) override {
    if (name == "current") return items_[pos_];
    if (name == "items") return Value::array(items_);
    if (name == "next" || name == "reset") return Value::object(in.make<BoundMethod>(Value::object(this), std::string(name)));
    return std::nullopt;
  }
  std::optional<Value> call_method(Interpreter&, std::string_view name, CallArgs&) override {
    if (name == "next") {
      Value v = items_[pos_];
      pos_ = (pos_ + 1) % items_.size();
      return v;
    }
    if (name == "reset") {
      pos_ = 0;
      return Value::none();
    }
    return std::nullopt;
  }

 private:
  std::vector<Value> items_;
  size_t pos_ = 0;
};

class Joiner : public Object {
 public:
  explicit Joiner(std::string sep) : sep_(std::move(sep)) {}
  std::string type_name() const override { return "Joiner"; }
  bool callable() const override { return true; }
  Value call(Interpreter&, CallArgs&) override {
    if (!used_) {
      used_ = true;
      return Value::string("");
    }
    return Value::string(sep_);
  }

 private:
  std::string sep_;
  bool used_ = false;
};

int64_t range_arg(const Value& v) {
  if (!v.is_integral()) type_error("'" + type_name(v) + "' object cannot be interpreted as an integer");
  return v.as_int();
}

Value builtin_range(Interpreter& in, CallArgs& args) {
  if (!args.kwargs.empty()) type_error("range() takes no keyword arguments");
  if (args.args.empty() || args.args.size() > 3) {
    type_error("range expected at least 1 argument, got " + std::to_string(args.args.size()));
  }
  int64_t start = 0, stop, step = 1;
  if (args.args.size() == 1) {
    stop = range_arg(args.args[0]);
  } else {
    start = range_arg(args.args[0]);
    stop = range_arg(args.args[1]);
    if (args.args.size() == 3) step = range_arg(args.args[2]);
  }
  if (step == 0) value_error("range() arg 3 must not be zero");
  constexpr int64_t kMaxRange = 100000;  // the sandbox's MAX_RANGE
  __int128 count = 0;
  if (step > 0 && stop > start) count = ((__int128)stop - start + step - 1) / step;
  if (step < 0 && stop < start) count = ((__int128)start - stop - step - 1) / -step;
  if (count > kMaxRange) {
    fail("OverflowError", "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  in.charge(static_cast<uint64_t>(count));
  auto a = std::make_shared<Array>();
  a->kind = ArrayKind::kRange;
  a->range_start = start;
  a->range_stop = stop;
  a->range_step = step;
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) a->items.push_back(Value::integer(start + i * step));
  return Value::array(std::shared_ptr<const Array>(std::move(a)));
}

void add_pairs(MapBuilder& b, const Value& source) {
  if (source.is_map()) {
    for (const auto& [k, v] : source.as_map().items) b.set(k, v);
    return;
  }
  for (const auto& item : iterate(source)) {
    std::vector<Value> pair = iterate(item);
    if (pair.size() != 2) {
      value_error("dictionary update sequence element has length " + std::to_string(pair.size()) + "; 2 is required");
    }
    b.set(pair[0], pair[1]);
  }
}

Value builtin_dict(Interpreter&, CallArgs& args) {
  if (args.args.size() > 1) type_error("dict expected at most 1 argument, got " + std::to_string(args.args.size()));
  MapBuilder b;
  if (!args.args.empty()) add_pairs(b, args.args[0]);
  for (const auto& [k, v] : args.kwargs) b.set(Value::string(k), v);
  return b.build();
}

Value builtin_namespace(Interpreter& in, CallArgs& args) {
  Value init = builtin_dict(in, args);
  auto* ns = in.make<Namespace>();
  for (const auto& [k, v] : init.as_map().items) {
    ns->set_attr(k.is_string() ? std::string_view(k.as_string()) : std::string_view(in.str(k)), v);
  }
  return Value::object(ns);
}

Value builtin_cycler(Interpreter& in, CallArgs& args) {
  if (args.args.empty()) type_error("at least one item has to be provided");
  return Value::object(in.make<Cycler>(args.args));
}

Value builtin_joiner(Interpreter& in, CallArgs& args) {
  auto a = bind_args(args, "joiner", {"sep"});
  return Value::object(in.make<Joiner>(a[0] ? in.str(*a[0]) : std::string(", ")));
}

Value builtin_raise_exception(Interpreter& in, CallArgs& args) {
  auto a = bind_args(args, "raise_exception", {"message"});
  if (!a[0]) type_error("raise_exception() missing 1 required positional argument: 'message'");
  fail("TemplateError", in.str(*a[0]));
}

std::tm system_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  return tm;
}

Value builtin_strftime_now(Interpreter& in, CallArgs& args) {
  auto a = bind_args(args, "strftime_now", {"format"});
  if (!a[0]) type_error("strftime_now() missing 1 required positional argument: 'format'");
  if (!a[0]->is_string()) type_error("strftime() argument 1 must be str, not " + type_name(*a[0]));
  std::tm tm = in.config().now ? in.config().now() : system_now();
  // datetime.strftime handles %f, %z and %Z itself (a naive datetime has no zone) and hands the rest to C.
  std::string fmt;
  const std::string& src = a[0]->as_string();
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '%' && i + 1 < src.size()) {
      char c = src[i + 1];
      if (c == 'f') { fmt += "000000"; ++i; continue; }
      if (c == 'z' || c == 'Z') { ++i; continue; }
      if (c == '%') { fmt += "%%"; ++i; continue; }
    }
    fmt += src[i];
  }
  if (fmt.empty()) return Value::string("");
  size_t cap = 256 + fmt.size() * 64;
  in.check_size(cap / 2);
  std::string buf(cap, '\0');
  size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
  buf.resize(n);
  return in.make_string(std::move(buf));
}

}  // namespace

std::vector<std::pair<std::string, Value>> make_builtins(Interpreter& in) {
  std::vector<std::pair<std::string, Value>> out;
  auto add = [&](const char* name, BuiltinFunction::Fn fn) {
    out.emplace_back(name, Value::object(in.make<BuiltinFunction>(name, fn)));
  };
  add("range", builtin_range);
  add("dict", builtin_dict);
  add("namespace", builtin_namespace);
  add("cycler", builtin_cycler);
  add("joiner", builtin_joiner);
  add("raise_exception", builtin_raise_exception);
  add("strftime_now", builtin_strftime_now);
  return out;
}

}  // namespace kvasir::jinja
