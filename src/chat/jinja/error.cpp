#include "chat/jinja/error.h"

namespace kvasir::jinja {

void fail(std::string type, std::string message) { throw JinjaError{std::move(type), std::move(message), 0, 0}; }

std::string JinjaError::to_string() const {
  std::string s = type + ": " + message;
  if (line > 0) s += " (line " + std::to_string(line) + ", column " + std::to_string(column) + ")";
  return s;
}

}  // namespace kvasir::jinja
