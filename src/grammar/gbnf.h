// llama.cpp's GBNF grammar text -> Grammar.
//
//   root  ::= "{" ws pair ("," ws pair)* "}"     # rules end at a newline; `|` may continue one
//   pair  ::= [a-z]+ ":" ws ( "0" | [1-9] [0-9]* )
//   ws    ::= [ \t\n]{0,8}
// Literals "..." and classes [...] / [^...] with \n \r \t \\ \" \] \- \xHH \uHHHH \UHHHHHHHH
// escapes, `.` (any character), groups, `*` `+` `?` `{m}` `{m,}` `{m,n}`, `#` comments. The start
// rule is `root`. Errors name the line and column.
#pragma once
#include <string_view>

#include "grammar/grammar.h"

namespace kvasir::grammar {

constexpr size_t kMaxGbnfBytes = 1 << 20;

Result<Grammar> parse_gbnf(std::string_view text);

}  // namespace kvasir::grammar
