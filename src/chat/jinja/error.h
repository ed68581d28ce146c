// The one exception type of the jinja interpreter. It is thrown only inside the interpreter and
// caught at the API boundary (jinja.h), which turns it into an Error; nothing throws out of the API.
#pragma once
#include <string>

namespace kvasir::jinja {

struct JinjaError {
  std::string type;     // the Python exception it stands for: TemplateSyntaxError, UndefinedError, TypeError, ...
  std::string message;
  int line = 0;         // 1-based; 0 until the innermost template node that saw it fills it in
  int column = 0;       // 1-based, in code points

  std::string to_string() const;  // "TypeError: message (line 3, column 7)"
};

[[noreturn]] void fail(std::string type, std::string message);
[[noreturn]] inline void type_error(std::string message) { fail("TypeError", std::move(message)); }
[[noreturn]] inline void value_error(std::string message) { fail("ValueError", std::move(message)); }

}  // namespace kvasir::jinja
