#include "chat/chat_format.h"

#include <fstream>
#include <sstream>

#include "chat/chat_template.h"
#include "chat/builtin_templates.h"

namespace kvasir::chat {

ChatFormatter::ChatFormatter(std::string template_source, std::string bos_token, std::string eos_token)
    : source_(std::move(template_source)), bos_(std::move(bos_token)), eos_(std::move(eos_token)) {}

Result<std::string> chat_template_override(const std::string& file_or_name) {
  if (file_or_name.empty() || chat::find_builtin_template(file_or_name)) return file_or_name;
  std::ifstream in(file_or_name, std::ios::binary);
  if (!in) return Error{"cannot read " + file_or_name};
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const BuiltinTemplate& ChatFormatter::family_template(const gguf::File& file, const Tokenizer& tokenizer) {
  auto arch = file.get_string("general.architecture");
  return chat::choose_builtin_template(arch ? *arch : "", [&](std::string_view text) {
    const int32_t id = tokenizer.token_to_id(text);
    return id >= 0 && tokenizer.is_special(id);
  });
}

Result<ChatFormatter> ChatFormatter::for_model(const gguf::File& file, const Tokenizer& tokenizer,
                                               std::string override_template) {
  std::string source, origin;
  if (const auto* named = chat::find_builtin_template(override_template)) {
    source = std::string(named->source);
    origin = "built-in " + std::string(named->name) + " (requested)";
  } else if (!override_template.empty()) {
    source = std::move(override_template);
    origin = "given file";
  } else if (file.find("tokenizer.chat_template")) {
    auto t = file.get_string("tokenizer.chat_template");
    if (!t) return Error{t.error()};
    source = std::move(*t);
    origin = "the model's own";
  }
  if (source.empty()) {
    const auto& chosen = family_template(file, tokenizer);
    source = std::string(chosen.source);
    origin = "built-in " + std::string(chosen.name) + " (the model has none)";
  }
  const std::string bos = tokenizer.bos() >= 0 ? tokenizer.token_text(tokenizer.bos()) : std::string();
  const std::string eos = tokenizer.eos() >= 0 ? tokenizer.token_text(tokenizer.eos()) : std::string();
  ChatFormatter f(std::move(source), bos, eos);
  f.origin_ = std::move(origin);
  return f;
}

Result<std::string> ChatFormatter::render(const nlohmann::ordered_json& messages,
                                          const ChatRenderOptions& options) const {
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  // Extra variables first, so that the ones we set cannot be overridden by a request.
  for (const auto& [k, v] : options.extra.items()) context[k] = v;
  context["messages"] = messages;
  context["add_generation_prompt"] = options.add_generation_prompt;
  context["bos_token"] = bos_;
  context["eos_token"] = eos_;
  context["tools"] = options.tools;
  auto text = chat::render_chat_template(source_, context);
  if (!text) return Error{text.error()};
  if (!options.continue_final_message) return text;
  // Cut after the final message's content, dropping the end-of-turn the template closed it with.
  const auto& last = messages.back();
  const std::string content = last.contains("content") && last["content"].is_string() ? last["content"].get<std::string>() : "";
  const size_t at = content.empty() ? std::string::npos : text->rfind(content);
  if (at == std::string::npos) return Error{"continue_final_message: the final message does not appear in the rendered prompt"};
  return text->substr(0, at + content.size());
}

std::vector<int32_t> ChatFormatter::tokenize(const Tokenizer& tokenizer, const std::string& rendered) const {
  // BOS only (never an EOS a vocabulary may ask for: the answer follows the prompt).
  const bool has_bos = !bos_.empty() && rendered.compare(0, bos_.size(), bos_) == 0;
  std::vector<int32_t> ids = tokenizer.encode(rendered, EncodeOptions{.add_special = false, .parse_special = true});
  if (!has_bos && tokenizer.add_bos() && tokenizer.bos() >= 0) ids.insert(ids.begin(), tokenizer.bos());
  return ids;
}

}  // namespace kvasir::chat
