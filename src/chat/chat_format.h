// Conversation -> prompt tokens: the model's chat template (tokenizer.chat_template; its family's
// built-in template when it has none; or a file / built-in name given on the command line)
// rendered with the vocabulary's BOS and EOS strings, then tokenized without adding a second BOS
// when the template wrote one.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/builtin_templates.h"
#include "core/status.h"
#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

namespace kvasir::chat {

struct ChatRenderOptions {
  bool add_generation_prompt = true;
  bool continue_final_message = false;       // end the prompt inside the last message (prefill an answer)
  nlohmann::ordered_json tools = nullptr;    // null: none
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // chat_template_kwargs
};

// What --chat-template names, as for_model's override_template: a built-in's name as it is, a
// file's contents, "" for none.
Result<std::string> chat_template_override(const std::string& file_or_name);

class ChatFormatter {
 public:
  ChatFormatter() = default;
  ChatFormatter(std::string template_source, std::string bos_token, std::string eos_token);
  // The model's template with its BOS/EOS token strings. `override_template` (when not empty)
  // is a built-in template's name (chat/builtin_templates.h) or a template's Jinja source.
  static Result<ChatFormatter> for_model(const gguf::File& file, const Tokenizer& tokenizer,
                                         std::string override_template = {});

  // The built-in template of the model's family (what for_model uses when the file has none).
  static const BuiltinTemplate& family_template(const gguf::File& file, const Tokenizer& tokenizer);

  // Template errors (raise_exception, undefined values, limits) come back as the message.
  Result<std::string> render(const nlohmann::ordered_json& messages, const ChatRenderOptions& options) const;
  // Tokenizes a rendering: special-token strings are parsed, and BOS is added (as the vocabulary
  // asks) only if the text does not start with the BOS string already.
  std::vector<int32_t> tokenize(const Tokenizer& tokenizer, const std::string& rendered) const;

  const std::string& source() const { return source_; }
  // Where the template came from, for the start-up log: "the model's own", "built-in gemma
  // (the model has none)", ...
  const std::string& origin() const { return origin_; }

 private:
  std::string source_, bos_, eos_;
  std::string origin_ = "given";
};

}  // namespace kvasir::chat
