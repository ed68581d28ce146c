#include "chat/jinja/operators.h"

#include <cmath>
#include <limits>

#include "chat/jinja/error.h"
#include "chat/jinja/pyformat.h"
#include "chat/jinja/unicode.h"

namespace kvasir::jinja {

namespace {

const char* symbol(BinOp op) {
  switch (op) {
    case BinOp::kAdd: return "+";
    case BinOp::kSub: return "-";
    case BinOp::kMul: return "*";
    case BinOp::kDiv: return "/";
    case BinOp::kFloorDiv: return "//";
    case BinOp::kMod: return "%";
    case BinOp::kPow: return "** or pow()";
  }
  return "?";
}

[[noreturn]] void unsupported(BinOp op, const Value& a, const Value& b) {
  type_error(std::string("unsupported operand type(s) for ") + symbol(op) + ": '" + type_name(a) + "' and '" +
             type_name(b) + "'");
}

[[noreturn]] void overflow() { fail("OverflowError", "integer result out of range (integers are limited to 64 bits)"); }

void check_bytes(size_t n, size_t max_bytes) {
  if (n > max_bytes) fail("OutputLimitError", "a string or list would exceed the limit of " + std::to_string(max_bytes) + " bytes");
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == -1) {
    if (a == std::numeric_limits<int64_t>::min()) overflow();
    return -a;
  }
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t py_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

Value int_pow(int64_t base, int64_t exp) {
  if (exp < 0) {
    if (base == 0) fail("ZeroDivisionError", "0.0 cannot be raised to a negative power");
    return Value::number(std::pow(static_cast<double>(base), static_cast<double>(exp)));
  }
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) {
      if (__builtin_mul_overflow(result, base, &result)) overflow();
    }
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) {
      // base overflowed but may not be needed if the remaining exponent bits are zero: they are not here
      overflow();
    }
  }
  return Value::integer(result);
}

Value repeat(const Value& seq, int64_t n, size_t max_bytes) {
  if (n <= 0) {
    if (seq.is_string()) return Value::string("");
    return Value::array(std::vector<Value>{}, seq.as_array().kind);
  }
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && static_cast<uint64_t>(n) > max_bytes / s.size()) check_bytes(max_bytes + 1, max_bytes);
    std::string out;
    out.reserve(s.size() * n);
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value::string(std::move(out));
  }
  const auto& items = seq.as_array().items;
  // a list element costs at least one pointer-sized slot
  if (!items.empty() && static_cast<uint64_t>(n) > max_bytes / (items.size() * sizeof(Value))) {
    check_bytes(max_bytes + 1, max_bytes);
  }
  std::vector<Value> out;
  out.reserve(items.size() * n);
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::array(std::move(out), seq.as_array().kind);
}

bool is_plain_sequence(const Value& v) { return v.is_array_of(ArrayKind::kList) || v.is_array_of(ArrayKind::kTuple); }

Value numeric(BinOp op, const Value& a, const Value& b) {
  if (a.is_integral() && b.is_integral() && op != BinOp::kDiv) {
    int64_t x = a.as_int(), y = b.as_int(), r = 0;
    switch (op) {
      case BinOp::kAdd: if (__builtin_add_overflow(x, y, &r)) overflow(); return Value::integer(r);
      case BinOp::kSub: if (__builtin_sub_overflow(x, y, &r)) overflow(); return Value::integer(r);
      case BinOp::kMul: if (__builtin_mul_overflow(x, y, &r)) overflow(); return Value::integer(r);
      case BinOp::kFloorDiv:
        if (y == 0) fail("ZeroDivisionError", "integer division or modulo by zero");
        return Value::integer(floor_div(x, y));
      case BinOp::kMod:
        if (y == 0) fail("ZeroDivisionError", "integer modulo by zero");
        return Value::integer(py_mod(x, y));
      case BinOp::kPow: return int_pow(x, y);
      default: break;
    }
  }
  double x = a.as_double(), y = b.as_double();
  switch (op) {
    case BinOp::kAdd: return Value::number(x + y);
    case BinOp::kSub: return Value::number(x - y);
    case BinOp::kMul: return Value::number(x * y);
    case BinOp::kDiv:
      if (y == 0) fail("ZeroDivisionError", a.is_integral() && b.is_integral() ? "division by zero" : "float division by zero");
      return Value::number(x / y);
    case BinOp::kFloorDiv: {
      if (y == 0) fail("ZeroDivisionError", "float floor division by zero");
      double m = std::fmod(x, y);
      double d = (x - m) / y;
      if (m != 0 && ((y < 0) != (m < 0))) d -= 1.0;
      double f = std::floor(d);
      if (d - f > 0.5) f += 1.0;
      return Value::number(d == 0 ? std::copysign(0.0, x / y) : f);
    }
    case BinOp::kMod: {
      if (y == 0) fail("ZeroDivisionError", "float modulo");
      double m = std::fmod(x, y);
      if (m != 0) {
        if ((y < 0) != (m < 0)) m += y;
      } else {
        m = std::copysign(0.0, y);
      }
      return Value::number(m);
    }
    case BinOp::kPow: {
      if (x == 0 && y < 0) fail("ZeroDivisionError", "0.0 cannot be raised to a negative power");
      if (x < 0 && std::isfinite(y) && y != std::floor(y)) {
        value_error("a negative number raised to a fractional power gives a complex number, which is not supported");
      }
      double r = std::pow(x, y);
      if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) fail("OverflowError", "(34, 'Numerical result out of range')");
      return Value::number(r);
    }
  }
  return Value::none();
}

}  // namespace

Value binary_op(BinOp op, const Value& a, const Value& b, size_t max_bytes) {
  // str % x formats first: an Undefined argument only fails if a conversion uses it as a number
  if (op == BinOp::kMod && a.is_string()) return Value::string(percent_format(a.as_string(), b, max_bytes));
  if (a.is_undefined()) raise_undefined(a);
  if (b.is_undefined()) raise_undefined(b);
  if (a.is_number() && b.is_number()) return numeric(op, a, b);
  switch (op) {
    case BinOp::kAdd:
      if (a.is_string()) {
        if (!b.is_string()) type_error("can only concatenate str (not \"" + type_name(b) + "\") to str");
        check_bytes(a.as_string().size() + b.as_string().size(), max_bytes);
        return Value::string(a.as_string() + b.as_string());
      }
      if (is_plain_sequence(a)) {
        if (!b.is_array() || b.as_array().kind != a.as_array().kind) {
          type_error("can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
        }
        const auto& x = a.as_array().items;
        const auto& y = b.as_array().items;
        check_bytes((x.size() + y.size()) * sizeof(Value), max_bytes);
        std::vector<Value> out;
        out.reserve(x.size() + y.size());
        out.insert(out.end(), x.begin(), x.end());
        out.insert(out.end(), y.begin(), y.end());
        return Value::array(std::move(out), a.as_array().kind);
      }
      break;
    case BinOp::kMul:
      if ((a.is_string() || is_plain_sequence(a)) && b.is_integral()) return repeat(a, b.as_int(), max_bytes);
      if ((b.is_string() || is_plain_sequence(b)) && a.is_integral()) return repeat(b, a.as_int(), max_bytes);
      if (a.is_string() || b.is_string() || is_plain_sequence(a) || is_plain_sequence(b)) {
        const Value& other = (a.is_string() || is_plain_sequence(a)) ? b : a;
        type_error("can't multiply sequence by non-int of type '" + type_name(other) + "'");
      }
      break;
    case BinOp::kMod:
      if (a.is_string()) return Value::string(percent_format(a.as_string(), b, max_bytes));
      break;
    default: break;
  }
  unsupported(op, a, b);
}

Value negate(const Value& v) {
  if (v.is_undefined()) raise_undefined(v);
  if (v.is_integral()) {
    if (v.as_int() == std::numeric_limits<int64_t>::min()) overflow();
    return Value::integer(-v.as_int());
  }
  if (v.is_float()) return Value::number(-v.as_double());
  type_error("bad operand type for unary -: '" + type_name(v) + "'");
}

Value unary_plus(const Value& v) {
  if (v.is_undefined()) raise_undefined(v);
  if (v.is_integral()) return Value::integer(v.as_int());
  if (v.is_float()) return v;
  type_error("bad operand type for unary +: '" + type_name(v) + "'");
}

bool compare(CmpOp op, const Value& a, const Value& b) {
  switch (op) {
    case CmpOp::kEq: return py_equal(a, b);
    case CmpOp::kNe: return !py_equal(a, b);
    case CmpOp::kLt: return py_compare(a, b, "<") < 0 && !(a.is_float() && std::isnan(a.as_double())) && !(b.is_float() && std::isnan(b.as_double()));
    case CmpOp::kLe: return py_compare(a, b, "<=") <= 0 && !(a.is_float() && std::isnan(a.as_double())) && !(b.is_float() && std::isnan(b.as_double()));
    case CmpOp::kGt: return py_compare(a, b, ">") > 0;
    case CmpOp::kGe: return py_compare(a, b, ">=") >= 0 && !(a.is_float() && std::isnan(a.as_double())) && !(b.is_float() && std::isnan(b.as_double()));
    case CmpOp::kIn: return py_contains(b, a);
    case CmpOp::kNotIn: return !py_contains(b, a);
  }
  return false;
}

std::optional<Value> index(const Value& obj, int64_t i) {
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    if (uni::is_ascii(s)) {
      int64_t n = static_cast<int64_t>(s.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return std::nullopt;
      return Value::string(std::string(1, s[i]));
    }
    auto cps = uni::decode(s);
    int64_t n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return std::nullopt;
    return Value::string(uni::encode(cps, i, i + 1));
  }
  if (obj.is_sequence()) {
    const auto& items = obj.as_array().items;
    int64_t n = static_cast<int64_t>(items.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return std::nullopt;
    return items[i];
  }
  return std::nullopt;
}

Value slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  // Jinja2 compiles slices to plain Python subscripts (no sandbox fallback to Undefined).
  if (obj.is_undefined()) raise_undefined(obj);
  if (obj.is_map()) type_error("unhashable type: 'slice'");
  if (!obj.is_string() && !obj.is_sequence()) type_error("'" + type_name(obj) + "' object is not subscriptable");
  auto as_index = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    if (!v.is_integral()) type_error("slice indices must be integers or None or have an __index__ method");
    return v.as_int();
  };
  auto start = as_index(start_v), stop = as_index(stop_v), step_o = as_index(step_v);
  int64_t step = step_o.value_or(1);
  if (step == 0) value_error("slice step cannot be zero");

  std::vector<char32_t> cps;
  bool ascii = obj.is_string() && uni::is_ascii(obj.as_string());
  if (obj.is_string() && !ascii) cps = uni::decode(obj.as_string());
  int64_t n = obj.is_string() ? (ascii ? static_cast<int64_t>(obj.as_string().size()) : static_cast<int64_t>(cps.size()))
                              : static_cast<int64_t>(obj.as_array().items.size());
  // PySlice_AdjustIndices
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt) -> int64_t {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    return x;
  };
  int64_t lo = adjust(start, step < 0 ? n - 1 : 0);
  int64_t hi = adjust(stop, step < 0 ? -1 : n);
  std::vector<int64_t> picks;
  if (step > 0) {
    for (int64_t i = lo; i < hi; i += step) picks.push_back(i);
  } else {
    for (int64_t i = lo; i > hi; i += step) picks.push_back(i);
  }
  if (obj.is_array_of(ArrayKind::kRange)) {
    // a slice of a range is a range: range(start + lo*step, start + hi*step, step*k)
    const Array& r = obj.as_array();
    auto a = std::make_shared<Array>();
    a->kind = ArrayKind::kRange;
    a->range_start = r.range_start + lo * r.range_step;
    a->range_stop = r.range_start + hi * r.range_step;
    a->range_step = r.range_step * step;
    for (int64_t i : picks) a->items.push_back(r.items[i]);
    return Value::array(std::shared_ptr<const Array>(std::move(a)));
  }
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    if (ascii && step == 1) return Value::string(picks.empty() ? std::string() : s.substr(lo, hi - lo));
    std::string out;
    for (int64_t i : picks) {
      if (ascii) out += s[i];
      else uni::append(out, cps[i]);
    }
    return Value::string(std::move(out));
  }
  const auto& items = obj.as_array().items;
  std::vector<Value> out;
  out.reserve(picks.size());
  for (int64_t i : picks) out.push_back(items[i]);
  ArrayKind kind = obj.as_array().kind == ArrayKind::kTuple ? ArrayKind::kTuple : ArrayKind::kList;
  return Value::array(std::move(out), kind);
}

}  // namespace kvasir::jinja
