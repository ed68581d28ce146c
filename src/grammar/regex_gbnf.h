// A JSON Schema `pattern` -> a GBNF expression for the body of a JSON string whose text matches
// it whole (a string that matches whole also contains a match, so the output validates).
// Characters that JSON must escape come out escaped (a '"' in the pattern is \" in the string).
// Supported: literals, escapes (\d \w \s \D \W \S, \. and other punctuation, \n \t \r \f \v,
// \uXXXX), classes with ranges and negation, '.', groups ((...), (?:...), named), alternation,
// * + ? {m} {m,} {m,n} (lazy forms matched as greedy), ^ at the start and $ at the end.
// Anything else (backreferences, lookaround, \b, \p{...}) is refused by name.
#pragma once
#include <string>
#include <string_view>

#include "core/status.h"

namespace kvasir::grammar {

Result<std::string> regex_to_gbnf(std::string_view pattern);

}  // namespace kvasir::grammar
