// Jinja2's builtin filters and tests (the ones chat templates use), looked up by name.
#pragma once
#include <string_view>

#include "chat/jinja/ast.h"

namespace kvasir::jinja {

FilterFn find_filter(std::string_view name);  // null if unknown
TestFn find_test(std::string_view name);      // null if unknown

}  // namespace kvasir::jinja
