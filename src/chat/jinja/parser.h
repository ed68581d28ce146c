// Jinja2's grammar (statements, expressions, precedence) over the lexer's tokens.
#pragma once
#include <string_view>

#include "chat/jinja/ast.h"

namespace kvasir::jinja {

// Parses a whole template. Throws JinjaError (TemplateSyntaxError, or TemplateAssertionError for an
// unknown filter or test outside an if) naming the line and column. `max_nesting` bounds both the
// nesting of blocks and brackets and the height of expression trees, so that neither the parser nor
// the interpreter can run out of stack.
Body parse(std::string_view source, int max_nesting);

}  // namespace kvasir::jinja
