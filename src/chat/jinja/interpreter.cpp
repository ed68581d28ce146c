#include "chat/jinja/interpreter.h"

#include "chat/jinja/error.h"
#include "chat/jinja/filters.h"
#include "chat/jinja/methods.h"
#include "chat/jinja/objects.h"
#include "chat/jinja/operators.h"

namespace kvasir::jinja {

// ----- Scope -----

const Value* Scope::find(std::string_view name) const {
  for (const Scope* s = this; s; s = s->parent_.get()) {
    for (auto it = s->vars_.rbegin(); it != s->vars_.rend(); ++it) {
      if (it->first == name) return &it->second;
    }
  }
  return nullptr;
}

void Scope::set(std::string_view name, Value v) {
  for (auto& [k, old] : vars_) {
    if (k == name) { old = std::move(v); return; }
  }
  if (vars_.empty()) vars_.reserve(4);
  vars_.emplace_back(std::string(name), std::move(v));
}

// ----- Interpreter -----

struct Interpreter::DepthGuard {
  Interpreter& in;
  explicit DepthGuard(Interpreter& i) : in(i) {
    if (++in.depth_ > in.limits().max_render_depth) {
      fail("RecursionError", "maximum render depth exceeded (" + std::to_string(in.limits().max_render_depth) + ")");
    }
  }
  ~DepthGuard() { --in.depth_; }
};

Interpreter::Interpreter(const RenderConfig& config) : config_(config) { builtins_ = make_builtins(*this); }
Interpreter::~Interpreter() = default;

void Interpreter::adopt(std::unique_ptr<Object> obj) {
  charge(1);
  arena_.push_back(std::move(obj));
}

void Interpreter::charge(uint64_t steps) {
  steps_ += steps;
  if (steps_ > limits().max_steps) {
    fail("StepLimitError", "the template ran past its budget of " + std::to_string(limits().max_steps) +
                               " steps (a loop that runs too long?)");
  }
}

void Interpreter::check_size(size_t n) const {
  if (n > limits().max_output_bytes) {
    fail("OutputLimitError", "output would exceed the limit of " + std::to_string(limits().max_output_bytes) + " bytes");
  }
}

Value Interpreter::make_string(std::string s) {
  check_size(s.size());
  charge_bytes(s.size());
  return Value::string(std::move(s));
}

std::string Interpreter::str(const Value& v) {
  std::string s = to_str(v, limits().max_output_bytes);
  charge_bytes(s.size());
  return s;
}

std::string Interpreter::repr(const Value& v) {
  std::string s = to_repr(v, limits().max_output_bytes);
  charge_bytes(s.size());
  return s;
}

void Interpreter::emit(std::string& out, std::string_view s) {
  check_size(out.size() + s.size());
  charge_bytes(s.size());
  out += s;
}

std::string Interpreter::render(const Body& body, const ScopePtr& globals) {
  std::string out;
  exec_body(body, globals, out);
  return out;
}

// ----- statements -----

Interpreter::Flow Interpreter::exec_body(const Body& body, const ScopePtr& scope, std::string& out) {
  for (const auto& s : body) {
    Flow f = exec(*s, scope, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::capture(const Body& body, const ScopePtr& parent, std::string& out) {
  return exec_body(body, std::make_shared<Scope>(parent), out);
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
  DepthGuard guard(*this);
  charge(1);
  try {
    switch (s.kind) {
      case StmtKind::kData: emit(out, s.text); return Flow::kNormal;
      case StmtKind::kPrint: {
        Value v = eval(*s.expr, scope);
        if (v.is_string()) emit(out, v.as_string());
        else emit(out, to_str(v, limits().max_output_bytes));
        return Flow::kNormal;
      }
      case StmtKind::kIf:
        for (const auto& [cond, body] : s.branches) {
          if (truthy(eval(*cond, scope))) return exec_body(body, scope, out);
        }
        return exec_body(s.else_body, scope, out);
      case StmtKind::kFor: return exec_for(s, scope, out);
      case StmtKind::kSet: assign(*s.target, eval(*s.expr, scope), scope); return Flow::kNormal;
      case StmtKind::kSetBlock: {
        // a break/continue inside the block leaves the loop before anything is assigned, as in Python
        std::string text;
        if (Flow f = capture(s.body, scope, text); f != Flow::kNormal) return f;
        Value v = make_string(std::move(text));
        if (s.filter) v = eval_filter(*s.filter, scope, &v);
        assign(*s.target, v, scope);
        return Flow::kNormal;
      }
      case StmtKind::kMacro:
        scope->set(s.name, Value::object(make<Macro>(&s, scope, s.name)));
        return Flow::kNormal;
      case StmtKind::kCallBlock: exec_call_block(s, scope, out); return Flow::kNormal;
      case StmtKind::kFilterBlock: {
        std::string text;
        if (Flow f = capture(s.body, scope, text); f != Flow::kNormal) return f;
        Value body = make_string(std::move(text));
        Value v = eval_filter(*s.filter, scope, &body);
        emit(out, str(v));
        return Flow::kNormal;
      }
      case StmtKind::kWith: {
        auto inner = std::make_shared<Scope>(scope);
        std::vector<Value> values;
        for (const auto& e : s.values) values.push_back(eval(*e, scope));
        for (size_t i = 0; i < s.targets.size(); ++i) assign(*s.targets[i], values[i], inner);
        return exec_body(s.body, inner, out);
      }
      case StmtKind::kBreak: return Flow::kBreak;
      case StmtKind::kContinue: return Flow::kContinue;
      case StmtKind::kBody: exec_body(s.body, std::make_shared<Scope>(scope), out); return Flow::kNormal;
    }
  } catch (JinjaError& e) {
    if (e.line == 0) {
      e.line = s.line;
      e.column = s.column;
    }
    throw;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
  Value iterable = eval(*s.expr, scope);
  std::vector<Value> items = iterate(iterable);
  charge(items.size());
  if (s.cond) {
    std::vector<Value> kept;
    for (auto& item : items) {
      auto test_scope = std::make_shared<Scope>(scope);
      assign(*s.target, item, test_scope);
      if (truthy(eval(*s.cond, test_scope))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  return run_loop(s, scope, std::move(items), 0, out);
}

Interpreter::Flow Interpreter::run_loop(const Stmt& s, const ScopePtr& scope, std::vector<Value> items, int depth0,
                                        std::string& out) {
  auto shared = std::make_shared<const std::vector<Value>>(std::move(items));
  auto* loop = make<LoopContext>(shared, depth0, &s, scope);
  Value loop_value = Value::object(loop);
  ScopePtr iter_scope;
  bool completed_one = false;
  for (size_t i = 0; i < shared->size(); ++i) {
    charge(1);
    loop->advance(i);
    // Each iteration starts with fresh variables; reuse the frame unless something (a macro) kept it.
    if (iter_scope && iter_scope.use_count() == 1) {
      iter_scope->clear();
    } else {
      iter_scope = std::make_shared<Scope>(scope);
    }
    iter_scope->set("loop", loop_value);
    assign(*s.target, (*shared)[i], iter_scope);
    Flow f = exec_body(s.body, iter_scope, out);
    if (f == Flow::kBreak) break;
    if (f == Flow::kNormal) completed_one = true;
  }
  // Jinja2 marks the loop as iterated at the end of the body, so `else` runs unless some iteration
  // got there: an empty loop, or one whose every iteration ended in break or continue.
  // The else block sits outside this loop: a break or continue there belongs to an enclosing loop.
  if (!completed_one) return exec_body(s.else_body, std::make_shared<Scope>(scope), out);
  return Flow::kNormal;
}

Value Interpreter::call_loop(const Stmt& loop, const ScopePtr& scope, const Value& iterable, int depth0) {
  if (++call_depth_ > limits().max_call_depth) {
    --call_depth_;
    fail("RecursionError", "maximum recursion depth exceeded (" + std::to_string(limits().max_call_depth) + " nested calls)");
  }
  std::string out;
  try {
    std::vector<Value> items = iterate(iterable);
    if (loop.cond) {
      std::vector<Value> kept;
      for (auto& item : items) {
        auto test_scope = std::make_shared<Scope>(scope);
        assign(*loop.target, item, test_scope);
        if (truthy(eval(*loop.cond, test_scope))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    run_loop(loop, scope, std::move(items), depth0, out);
  } catch (...) {
    --call_depth_;
    throw;
  }
  --call_depth_;
  return Value::string(std::move(out));
}

void Interpreter::exec_call_block(const Stmt& s, const ScopePtr& scope, std::string& out) {
  const Expr& call = *s.expr;
  auto* caller = make<Macro>(&s, scope, "caller");
  Value callee = eval(*call.a, scope);
  CallArgs args;
  eval_args(call, scope, args);
  args.kwargs.emplace_back("caller", Value::object(caller));
  Value result = this->call(callee, args);
  emit(out, str(result));
}

void Interpreter::assign(const Expr& target, const Value& v, const ScopePtr& scope) {
  switch (target.kind) {
    case ExprKind::kName: scope->set(target.name, v); return;
    case ExprKind::kTuple: {
      if (!v.is_undefined() && !v.is_string() && !v.is_array() && !v.is_map()) {
        type_error("cannot unpack non-iterable " + type_name(v) + " object");
      }
      std::vector<Value> items = iterate(v);
      size_t n = target.items.size();
      if (items.size() > n) value_error("too many values to unpack (expected " + std::to_string(n) + ")");
      if (items.size() < n) {
        value_error("not enough values to unpack (expected " + std::to_string(n) + ", got " +
                    std::to_string(items.size()) + ")");
      }
      for (size_t i = 0; i < n; ++i) assign(*target.items[i], items[i], scope);
      return;
    }
    case ExprKind::kGetattr: {
      const Value* ns = scope->find(target.a->name);
      if (!ns || !ns->is_object() || !ns->as_object()->is_namespace()) {
        fail("TemplateRuntimeError", "cannot assign attribute on non-namespace object");
      }
      ns->as_object()->set_attr(target.name, v);
      return;
    }
    default: fail("TemplateSyntaxError", "cannot assign to this expression");
  }
}

// ----- macros -----

Value Interpreter::call_macro(const Macro& macro, CallArgs& args) {
  const Stmt& def = macro.def();
  if (call_depth_ + 1 > limits().max_call_depth) {
    fail("RecursionError", "maximum recursion depth exceeded (" + std::to_string(limits().max_call_depth) + " nested calls)");
  }
  auto frame = std::make_shared<Scope>(macro.closure());
  size_t n = def.params.size();
  std::vector<bool> given(n, false);
  std::vector<Value> extra;
  for (size_t i = 0; i < args.args.size(); ++i) {
    if (i < n) {
      frame->set(def.params[i], args.args[i]);
      given[i] = true;
    } else if (def.uses_varargs) {
      extra.push_back(args.args[i]);
    } else {
      type_error("macro '" + macro.name() + "' takes not more than " + std::to_string(n) + " argument(s)");
    }
  }
  MapBuilder kwargs;
  Value caller = Value::undefined("No caller defined");
  for (auto& [key, value] : args.kwargs) {
    size_t idx = 0;
    while (idx < n && def.params[idx] != key) ++idx;
    if (idx < n) {
      if (given[idx]) type_error("macro '" + macro.name() + "' got multiple values for argument '" + key + "'");
      frame->set(key, value);
      given[idx] = true;
    } else if (key == "caller" && def.uses_caller) {
      caller = value;
    } else if (def.uses_kwargs) {
      kwargs.set(Value::string(key), value);
    } else {
      type_error("macro '" + macro.name() + "' takes no keyword argument '" + key + "'");
    }
  }
  size_t first_default = n - def.defaults.size();
  for (size_t i = 0; i < n; ++i) {
    if (given[i]) continue;
    if (i >= first_default) {
      frame->set(def.params[i], eval(*def.defaults[i - first_default], frame));
    } else {
      frame->set(def.params[i], Value::undefined("parameter '" + def.params[i] + "' was not provided"));
    }
  }
  if (def.uses_varargs) frame->set("varargs", Value::tuple(std::move(extra)));
  if (def.uses_kwargs) frame->set("kwargs", kwargs.build());
  if (def.uses_caller) frame->set("caller", caller);
  ++call_depth_;
  std::string out;
  try {
    exec_body(def.body, frame, out);
  } catch (...) {
    --call_depth_;
    throw;
  }
  --call_depth_;
  return Value::string(std::move(out));
}

// ----- expressions -----

Value Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  DepthGuard guard(*this);
  charge(1);
  try {
    return eval_inner(e, scope);
  } catch (JinjaError& err) {
    if (err.line == 0) {
      err.line = e.line;
      err.column = e.column;
    }
    throw;
  }
}

Value Interpreter::eval_inner(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case ExprKind::kConst: return e.value;
    case ExprKind::kName: return eval_name(e, scope);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.items.size());
      for (const auto& x : e.items) items.push_back(eval(*x, scope));
      return Value::array(std::move(items), e.kind == ExprKind::kList ? ArrayKind::kList : ArrayKind::kTuple);
    }
    case ExprKind::kDict: {
      MapBuilder b;
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        Value k = eval(*e.items[i], scope);
        b.set(std::move(k), eval(*e.items[i + 1], scope));
      }
      return b.build();
    }
    case ExprKind::kGetattr: return get_attr(eval(*e.a, scope), e.name);
    case ExprKind::kGetitem: {
      Value obj = eval(*e.a, scope);
      if (e.b->kind == ExprKind::kSlice) return eval_slice(obj, *e.b, scope);
      return get_item(obj, eval(*e.b, scope));
    }
    case ExprKind::kSlice: fail("TemplateSyntaxError", "slice outside of a subscript");
    case ExprKind::kCall: return eval_call(e, scope);
    case ExprKind::kFilter: return eval_filter(e, scope, nullptr);
    case ExprKind::kTest: return eval_test(e, scope);
    case ExprKind::kNeg: return negate(eval(*e.a, scope));
    case ExprKind::kPos: return unary_plus(eval(*e.a, scope));
    case ExprKind::kNot: return Value::boolean(!truthy(eval(*e.a, scope)));
    case ExprKind::kAnd: {
      Value l = eval(*e.a, scope);
      return truthy(l) ? eval(*e.b, scope) : l;
    }
    case ExprKind::kOr: {
      Value l = eval(*e.a, scope);
      return truthy(l) ? l : eval(*e.b, scope);
    }
    case ExprKind::kBinary: {
      Value l = eval(*e.a, scope);
      Value r = eval(*e.b, scope);
      Value v = binary_op(e.op, l, r, limits().max_output_bytes);
      if (v.is_string()) charge_bytes(v.as_string().size());
      else if (v.is_array()) charge(v.as_array().items.size());
      return v;
    }
    case ExprKind::kConcat: {
      std::string s;
      for (const auto& x : e.items) {
        Value v = eval(*x, scope);
        std::string part = v.is_string() ? v.as_string() : str(v);
        check_size(s.size() + part.size());
        s += part;
      }
      return make_string(std::move(s));
    }
    case ExprKind::kCompare: return eval_compare(e, scope);
    case ExprKind::kCondExpr:
      if (truthy(eval(*e.b, scope))) return eval(*e.a, scope);
      if (e.c) return eval(*e.c, scope);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
  }
  return Value();
}

Value Interpreter::eval_name(const Expr& e, const ScopePtr& scope) {
  if (const Value* v = scope->find(e.name)) return *v;
  for (const auto& [name, v] : builtins_) {
    if (name == e.name) return v;
  }
  return Value::undefined("'" + e.name + "' is undefined");
}

Value Interpreter::eval_compare(const Expr& e, const ScopePtr& scope) {
  Value left = eval(*e.a, scope);
  for (const auto& [op, rhs] : e.comparisons) {
    Value right = eval(*rhs, scope);
    if (!compare(op, left, right)) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Interpreter::eval_slice(const Value& obj, const Expr& s, const ScopePtr& scope) {
  Value start = s.a ? eval(*s.a, scope) : Value::none();
  Value stop = s.b ? eval(*s.b, scope) : Value::none();
  Value step = s.c ? eval(*s.c, scope) : Value::none();
  Value v = slice(obj, start, stop, step);
  if (v.is_string()) charge_bytes(v.as_string().size());
  else if (v.is_array()) charge(v.as_array().items.size());
  return v;
}

void Interpreter::eval_args(const Expr& e, const ScopePtr& scope, CallArgs& out) {
  for (const auto& x : e.items) out.args.push_back(eval(*x, scope));
  for (const auto& [k, x] : e.kwargs) out.kwargs.emplace_back(k, eval(*x, scope));
  if (e.dyn_args) {
    for (auto& v : iterate(eval(*e.dyn_args, scope))) out.args.push_back(std::move(v));
  }
  if (e.dyn_kwargs) {
    Value m = eval(*e.dyn_kwargs, scope);
    if (!m.is_map()) type_error("argument after ** must be a mapping, not " + type_name(m));
    for (const auto& [k, v] : m.as_map().items) {
      if (!k.is_string()) type_error("keywords must be strings");
      out.kwargs.emplace_back(k.as_string(), v);
    }
  }
}

Value Interpreter::eval_call(const Expr& e, const ScopePtr& scope) {
  const Expr& callee = *e.a;
  if (callee.kind == ExprKind::kGetattr) {
    // obj.method(...): call methods of plain values directly, without a bound-method object
    Value obj = eval(*callee.a, scope);
    if (!obj.is_undefined() && !obj.is_object() && !callee.name.starts_with("__")) {
      MethodKind kind = find_method(obj, callee.name);
      if (kind == MethodKind::kSafe) {
        CallArgs args;
        eval_args(e, scope, args);
        return call_method(*this, obj, callee.name, args);
      }
    }
    if (obj.is_object()) {
      CallArgs args;
      eval_args(e, scope, args);
      if (auto r = obj.as_object()->call_method(*this, callee.name, args)) return *r;
      return call(get_attr(obj, callee.name), args);
    }
    Value fn = get_attr(obj, callee.name);
    CallArgs args;
    eval_args(e, scope, args);
    return call(fn, args);
  }
  Value fn = eval(callee, scope);
  CallArgs args;
  eval_args(e, scope, args);
  return call(fn, args);
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) raise_undefined(callee);
  if (!callee.is_object() || !callee.as_object()->callable()) {
    type_error("'" + type_name(callee) + "' object is not callable");
  }
  DepthGuard guard(*this);
  return callee.as_object()->call(*this, args);
}

Value Interpreter::eval_filter(const Expr& e, const ScopePtr& scope, const Value* block_subject) {
  Value subject;
  if (e.a) {
    subject = e.a->kind == ExprKind::kFilter && !block_subject ? eval(*e.a, scope)
              : e.a->kind == ExprKind::kFilter                  ? eval_filter(*e.a, scope, block_subject)
                                                                : eval(*e.a, scope);
  } else if (block_subject) {
    subject = *block_subject;
  }
  CallArgs args;
  eval_args(e, scope, args);
  if (!e.filter) fail("TemplateRuntimeError", "No filter named '" + e.name + "' found.");
  return e.filter(*this, subject, args);
}

Value Interpreter::eval_test(const Expr& e, const ScopePtr& scope) {
  Value subject = eval(*e.a, scope);
  CallArgs args;
  eval_args(e, scope, args);
  if (!e.test) fail("TemplateRuntimeError", "No test named '" + e.name + "' found.");
  return Value::boolean(e.test(*this, subject, args));
}

Value Interpreter::call_filter(const std::string& name, const Value& subject, CallArgs& args) {
  FilterFn fn = find_filter(name);
  if (!fn) fail("TemplateRuntimeError", "No filter named '" + name + "' found.");
  return fn(*this, subject, args);
}

bool Interpreter::call_test(const std::string& name, const Value& subject, CallArgs& args) {
  TestFn fn = find_test(name);
  if (!fn) fail("TemplateRuntimeError", "No test named '" + name + "' found.");
  return fn(*this, subject, args);
}

// ----- attribute and item access (the sandbox's getattr/getitem) -----

namespace {

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

Value missing_attr(const Value& obj, std::string_view name) {
  return Value::undefined("'" + object_type_repr(obj) + "' has no attribute '" + std::string(name) + "'");
}

Value unsafe_attr(const Value& obj, std::string_view name) {
  return Value::undefined("access to attribute '" + std::string(name) + "' of '" + type_name(obj) + "' object is unsafe.",
                          true);
}

}  // namespace

Value Interpreter::get_attr(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) raise_undefined(obj);
  if (name.starts_with("__")) return unsafe_attr(obj, name);
  if (obj.is_object()) {
    if (auto v = obj.as_object()->get_attr(*this, name)) return *v;
    return missing_attr(obj, name);
  }
  switch (find_method(obj, name)) {
    case MethodKind::kSafe: return Value::object(make<BoundMethod>(obj, std::string(name)));
    case MethodKind::kUnsafe: return unsafe_attr(obj, name);
    case MethodKind::kNone: break;
  }
  if (obj.is_map()) {
    if (const Value* v = obj.as_map().find(name)) return *v;
  }
  return missing_attr(obj, name);
}

Value Interpreter::get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) raise_undefined(obj);
  if (obj.is_map()) {
    bool hashable = true;
    try {
      check_hashable(key);
    } catch (const JinjaError&) {
      hashable = false;
    }
    if (hashable) {
      if (const Value* v = obj.as_map().find(key)) return *v;
    }
  } else if (key.is_integral()) {
    if (auto v = index(obj, key.as_int())) return *v;
  }
  if (key.is_string()) {
    const std::string& name = key.as_string();
    if (obj.is_object()) {
      if (auto v = obj.as_object()->get_attr(*this, name)) return *v;
    } else if (!name.starts_with("__")) {
      switch (find_method(obj, name)) {
        case MethodKind::kSafe: return Value::object(make<BoundMethod>(obj, name));
        case MethodKind::kUnsafe: return unsafe_attr(obj, name);
        case MethodKind::kNone: break;
      }
    } else {
      return unsafe_attr(obj, name);
    }
    return missing_attr(obj, name);
  }
  return Value::undefined(object_type_repr(obj) + " has no element " + to_repr(key, 1024));
}

}  // namespace kvasir::jinja
