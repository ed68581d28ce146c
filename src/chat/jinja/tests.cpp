// Jinja2's builtin tests: `x is defined`, `x is divisibleby 3`, ...
#include <algorithm>
#include <array>
#include <cmath>

#include "chat/jinja/error.h"
#include "chat/jinja/filters.h"
#include "chat/jinja/interpreter.h"
#include "chat/jinja/operators.h"
#include "chat/jinja/unicode.h"

namespace kvasir::jinja {

namespace {

const Value& one_arg(CallArgs& args, const char* test) {
  if (args.args.size() != 1 || !args.kwargs.empty()) {
    type_error(std::string(test) + "() takes exactly one argument (" + std::to_string(args.args.size()) + " given)");
  }
  return args.args[0];
}

void no_args(CallArgs& args, const char* test) {
  if (!args.args.empty() || !args.kwargs.empty()) {
    type_error(std::string(test) + "() takes 1 positional argument but " + std::to_string(args.args.size() + 1) +
               " were given");
  }
}

bool mod_equals(const Value& v, const Value& m, int64_t r) {
  Value x = binary_op(BinOp::kMod, v, m, 1 << 20);
  return py_equal(x, Value::integer(r));
}

bool t_defined(Interpreter&, const Value& v, CallArgs& a) { no_args(a, "defined"); return !v.is_undefined(); }
bool t_undefined(Interpreter&, const Value& v, CallArgs& a) { no_args(a, "undefined"); return v.is_undefined(); }
bool t_none(Interpreter&, const Value& v, CallArgs& a) { no_args(a, "none"); return v.is_none(); }
bool t_boolean(Interpreter&, const Value& v, CallArgs& a) { no_args(a, "boolean"); return v.is_bool(); }
bool t_true(Interpreter&, const Value& v, CallArgs& a) { no_args(a, "true"); return v.is_bool() && v.as_bool(); }
bool t_false(Interpreter&, const Value& v, CallArgs& a) { no_args(a, "false"); return v.is_bool() && !v.as_bool(); }
bool t_integer(Interpreter&, const Value& v, CallArgs& a) { no_args(a, "integer"); return v.is_int(); }
bool t_float(Interpreter&, const Value& v, CallArgs& a) { no_args(a, "float"); return v.is_float(); }
bool t_number(Interpreter&, const Value& v, CallArgs& a) { no_args(a, "number"); return v.is_number(); }
bool t_string(Interpreter&, const Value& v, CallArgs& a) { no_args(a, "string"); return v.is_string(); }
bool t_mapping(Interpreter&, const Value& v, CallArgs& a) { no_args(a, "mapping"); return v.is_map(); }
bool t_escaped(Interpreter&, const Value&, CallArgs& a) { no_args(a, "escaped"); return false; }

bool t_sequence(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "sequence");
  return v.is_undefined() || v.is_string() || v.is_map() || v.is_sequence();
}

bool t_iterable(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "iterable");
  if (v.is_object()) return v.as_object()->type_name() == "LoopContext";
  return v.is_undefined() || v.is_string() || v.is_map() || v.is_array();
}

bool t_callable(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "callable");
  return v.is_undefined() || (v.is_object() && v.as_object()->callable());
}

bool t_odd(Interpreter&, const Value& v, CallArgs& a) { no_args(a, "odd"); return mod_equals(v, Value::integer(2), 1); }
bool t_even(Interpreter&, const Value& v, CallArgs& a) { no_args(a, "even"); return mod_equals(v, Value::integer(2), 0); }
bool t_divisibleby(Interpreter&, const Value& v, CallArgs& a) { return mod_equals(v, one_arg(a, "divisibleby"), 0); }

bool t_lower(Interpreter& in, const Value& v, CallArgs& a) {
  no_args(a, "lower");
  auto cps = uni::decode(in.str(v));
  return std::any_of(cps.begin(), cps.end(), uni::is_cased) && std::none_of(cps.begin(), cps.end(), uni::is_upper);
}

bool t_upper(Interpreter& in, const Value& v, CallArgs& a) {
  no_args(a, "upper");
  auto cps = uni::decode(in.str(v));
  return std::any_of(cps.begin(), cps.end(), uni::is_cased) && std::none_of(cps.begin(), cps.end(), uni::is_lower);
}

bool t_in(Interpreter&, const Value& v, CallArgs& a) { return py_contains(one_arg(a, "in"), v); }
bool t_eq(Interpreter&, const Value& v, CallArgs& a) { return compare(CmpOp::kEq, v, one_arg(a, "eq")); }
bool t_ne(Interpreter&, const Value& v, CallArgs& a) { return compare(CmpOp::kNe, v, one_arg(a, "ne")); }
bool t_lt(Interpreter&, const Value& v, CallArgs& a) { return compare(CmpOp::kLt, v, one_arg(a, "lt")); }
bool t_le(Interpreter&, const Value& v, CallArgs& a) { return compare(CmpOp::kLe, v, one_arg(a, "le")); }
bool t_gt(Interpreter&, const Value& v, CallArgs& a) { return compare(CmpOp::kGt, v, one_arg(a, "gt")); }
bool t_ge(Interpreter&, const Value& v, CallArgs& a) { return compare(CmpOp::kGe, v, one_arg(a, "ge")); }

// `is` in Python: identity. Values here have no identity of their own, so this compares what CPython
// would share: None/True/False, small integers, and the same container or object.
bool t_sameas(Interpreter&, const Value& v, CallArgs& a) {
  const Value& o = one_arg(a, "sameas");
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Kind::kUndefined: return false;
    case Kind::kNone: return true;
    case Kind::kBool: return v.as_bool() == o.as_bool();
    case Kind::kInt: return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    case Kind::kFloat: return false;
    case Kind::kString: return v.string_ptr() == o.string_ptr();
    case Kind::kArray: return v.array_ptr() == o.array_ptr();
    case Kind::kMap: return v.map_ptr() == o.map_ptr();
    case Kind::kObject: return v.as_object() == o.as_object();
  }
  return false;
}

bool t_filter(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "filter");
  return v.is_string() && find_filter(v.as_string()) != nullptr;
}

bool t_test(Interpreter&, const Value& v, CallArgs& a) {
  no_args(a, "test");
  return v.is_string() && find_test(v.as_string()) != nullptr;
}

struct Entry {
  std::string_view name;
  TestFn fn;
};

constexpr Entry kTests[] = {
    {"defined", t_defined}, {"undefined", t_undefined}, {"none", t_none}, {"boolean", t_boolean},
    {"true", t_true}, {"false", t_false}, {"integer", t_integer}, {"float", t_float}, {"number", t_number},
    {"string", t_string}, {"mapping", t_mapping}, {"sequence", t_sequence}, {"iterable", t_iterable},
    {"callable", t_callable}, {"escaped", t_escaped}, {"odd", t_odd}, {"even", t_even},
    {"divisibleby", t_divisibleby}, {"lower", t_lower}, {"upper", t_upper}, {"in", t_in},
    {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq}, {"ne", t_ne}, {"!=", t_ne},
    {"lt", t_lt}, {"lessthan", t_lt}, {"<", t_lt}, {"le", t_le}, {"<=", t_le},
    {"gt", t_gt}, {"greaterthan", t_gt}, {">", t_gt}, {"ge", t_ge}, {">=", t_ge},
    {"sameas", t_sameas}, {"filter", t_filter}, {"test", t_test},
};

}  // namespace

TestFn find_test(std::string_view name) {
  for (const auto& e : kTests) {
    if (e.name == name) return e.fn;
  }
  return nullptr;
}

}  // namespace kvasir::jinja
