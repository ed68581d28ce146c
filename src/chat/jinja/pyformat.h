// Python's text formatting of values: float repr, json.dumps, printf-style `%` and str.format.
#pragma once
#include <functional>
#include <optional>
#include <string>

#include "chat/jinja/value.h"

namespace kvasir::jinja {

std::string float_repr(double d);  // repr(float): shortest round-trip digits, Python's notation rules

struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: one line
  std::string item_separator = ", ";  // json.dumps picks "," when an indent is given and separators are not
  std::string key_separator = ": ";
  bool sort_keys = false;
};
// json.dumps(v, ...): TypeError for values JSON cannot hold (Undefined, generators, objects).
void json_dump(Printer& p, const Value& v, const JsonOptions& options, int level = 0);

// `fmt % args` for strings (printf-style); `args` is a tuple, a dict (for %(name)s) or one value.
std::string percent_format(std::string_view fmt, const Value& args, size_t max_bytes);

// str.format(*args, **kwargs). Field names may use .attr and [key]; `get_attr`/`get_item` resolve them
// the sandboxed way.
struct FormatHooks {
  std::function<Value(const Value&, const std::string&)> get_attr;
  std::function<Value(const Value&, const Value&)> get_item;
};
std::string str_format(std::string_view fmt, const CallArgs& args, const FormatHooks& hooks, size_t max_bytes);

// Formats one value with a format-spec mini-language string (the part after ':' in str.format).
std::string format_with_spec(const Value& v, std::string_view spec, size_t max_bytes);

}  // namespace kvasir::jinja
