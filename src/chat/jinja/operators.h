// Python's arithmetic, comparison and slicing on values. Integers are 64-bit: a result that Python
// would carry into a big integer is an OverflowError here.
#pragma once
#include <optional>

#include "chat/jinja/ast.h"
#include "chat/jinja/value.h"

namespace kvasir::jinja {

// `max_bytes` bounds strings and lists built by +, * and %.
Value binary_op(BinOp op, const Value& a, const Value& b, size_t max_bytes);
Value negate(const Value& v);
Value unary_plus(const Value& v);
bool compare(CmpOp op, const Value& a, const Value& b);

// obj[start:stop:step] for str, list, tuple and range, with Python's errors for anything else (Jinja2
// compiles slices to plain subscripts, without the sandbox's fallback to Undefined).
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// obj[index] for str, list, tuple, range; nullopt when out of range or not indexable.
std::optional<Value> index(const Value& obj, int64_t i);

}  // namespace kvasir::jinja
