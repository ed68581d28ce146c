// Jinja2's lexer with the Hugging Face settings: trim_blocks, lstrip_blocks, "-"/"+" whitespace
// control, comments and raw blocks, newlines normalized to "\n" and one trailing newline dropped
// (keep_trailing_newline=False).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir::jinja {

enum class Tok : uint8_t {
  kData,           // text: template data (raw blocks included)
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,           // text
  kString,         // text: the unescaped value
  kInteger,        // int_value
  kFloat,          // float_value
  kOperator,       // text: + - * / // % ** ~ [ ] ( ) { } == != < > <= >= = . : | , ;
  kEof,
};

struct Token {
  Tok type = Tok::kEof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
  int column = 1;  // code points, 1-based

  bool is_op(std::string_view op) const { return type == Tok::kOperator && text == op; }
  bool is_name(std::string_view name) const { return type == Tok::kName && text == name; }
};

// Throws JinjaError (TemplateSyntaxError) with the position of the offending text.
std::vector<Token> tokenize(std::string_view source);

}  // namespace kvasir::jinja
