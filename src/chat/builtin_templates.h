// Chat templates of the common model families, for GGUF files that ship none (base models such
// as the default Gemma 3 270M, or files converted without tokenizer.chat_template). Each renders
// the family's published conversation format for plain text messages; tools are not rendered
// (a model's own template does that). Chosen from the architecture and from which of the
// family's markers are single special tokens in the vocabulary, so ChatML is never used where
// its markers would be split into plain text.
#pragma once
#include <functional>
#include <span>
#include <string_view>

namespace kvasir::chat {

struct BuiltinTemplate {
  std::string_view name;    // chatml, gemma, llama2, llama3, mistral, phi3, plain
  std::string_view source;  // Jinja
  std::string_view about;   // one line for --help and the start-up log
};

std::span<const BuiltinTemplate> builtin_templates();
const BuiltinTemplate* find_builtin_template(std::string_view name);

// The family template for a model without one. is_special_token(text) says whether `text` is a
// single special token of the model's vocabulary.
const BuiltinTemplate& choose_builtin_template(std::string_view arch,
                                               const std::function<bool(std::string_view)>& is_special_token);

}  // namespace kvasir::chat
