// Python methods of str, dict and list as the immutable sandbox allows them.
#pragma once
#include <string_view>

#include "chat/jinja/interpreter.h"
#include "chat/jinja/value.h"

namespace kvasir::jinja {

enum class MethodKind {
  kNone,    // no such method: attribute lookup falls back to items (dict keys)
  kSafe,    // callable
  kUnsafe,  // exists but would mutate (list.append, dict.update): a SecurityError when used
};

MethodKind find_method(const Value& self, std::string_view name);
// Calls a kSafe method; TypeError/ValueError for bad arguments.
Value call_method(Interpreter& in, const Value& self, std::string_view name, CallArgs& args);

}  // namespace kvasir::jinja
