// Checks over a parsed tree.
#pragma once
#include <string_view>

#include "chat/jinja/ast.h"

namespace kvasir::jinja {

// Whether any expression in `body` (nested blocks included) names `name`; macros use it to find out
// whether they take varargs, kwargs or a caller.
bool body_uses_name(const Body& body, std::string_view name);

// Jinja2 rejects an unknown filter or test when it compiles the template, except inside an `if`
// statement or an inline if-expression of the same scope, where the error waits until it runs.
// Throws TemplateAssertionError.
void check_filter_and_test_names(const Body& body);

}  // namespace kvasir::jinja
