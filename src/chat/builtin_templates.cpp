#include "chat/builtin_templates.h"

#include <array>

#include "chat/default_template.h"

namespace kvasir::chat {
namespace {

// A leading system message is folded into the first user turn by the families whose format has
// no system role (Gemma, Mistral, Llama 2's <<SYS>> block).
constexpr std::string_view kGemma =
    "{{ bos_token }}"
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{% set first_prefix = messages[0]['content'] + '\n\n' %}{% set turns = messages[1:] %}"
    "{% else %}{% set first_prefix = '' %}{% set turns = messages %}{% endif %}"
    "{% for message in turns %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + (first_prefix if loop.first else '') + message['content'] | trim"
    " + '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}";

constexpr std::string_view kLlama3 =
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim"
    " + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

constexpr std::string_view kLlama2 =
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{% set sys = '<<SYS>>\n' + messages[0]['content'] | trim + '\n<</SYS>>\n\n' %}{% set turns = messages[1:] %}"
    "{% else %}{% set sys = '' %}{% set turns = messages %}{% endif %}"
    "{% for message in turns %}"
    "{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + (sys if loop.first else '') + message['content'] | trim + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}"
    "{{ ' ' + message['content'] | trim + ' ' + eos_token }}"
    "{% endif %}"
    "{% endfor %}";

constexpr std::string_view kMistral =
    "{{ bos_token }}"
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{% set first_prefix = messages[0]['content'] + '\n\n' %}{% set turns = messages[1:] %}"
    "{% else %}{% set first_prefix = '' %}{% set turns = messages %}{% endif %}"
    "{% for message in turns %}"
    "{% if message['role'] == 'user' %}"
    "{{ '[INST]' + (first_prefix if loop.first else '') + message['content'] + '[/INST]' }}"
    "{% elif message['role'] == 'assistant' %}"
    "{{ message['content'] + eos_token }}"
    "{% endif %}"
    "{% endfor %}";

constexpr std::string_view kPhi3 =
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}";

// For vocabularies with no chat markers at all (small base models): readable role prefixes.
constexpr std::string_view kPlain =
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ message['role'] | capitalize + ': ' + message['content'] | trim + '\n\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}";

constexpr std::array<BuiltinTemplate, 7> kTemplates = {{
    {"chatml", kDefaultChatTemplate, "ChatML: <|im_start|>role ... <|im_end|> (Qwen, SmolLM, Hermes)"},
    {"gemma", kGemma, "Gemma: <start_of_turn>user/model ... <end_of_turn> (Gemma 1-3)"},
    {"llama2", kLlama2, "Llama 2: [INST] ... [/INST] with a <<SYS>> block"},
    {"llama3", kLlama3, "Llama 3: <|start_header_id|>role<|end_header_id|> ... <|eot_id|>"},
    {"mistral", kMistral, "Mistral: [INST]...[/INST] special tokens (v3 and Tekken vocabularies)"},
    {"phi3", kPhi3, "Phi-3: <|user|> ... <|end|> <|assistant|>"},
    {"plain", kPlain, "plain text 'User: ... Assistant:' for vocabularies without chat markers"},
}};

}  // namespace

std::span<const BuiltinTemplate> builtin_templates() { return kTemplates; }

const BuiltinTemplate* find_builtin_template(std::string_view name) {
  for (const auto& t : kTemplates)
    if (t.name == name) return &t;
  return nullptr;
}

const BuiltinTemplate& choose_builtin_template(std::string_view arch,
                                               const std::function<bool(std::string_view)>& is_special_token) {
  auto all = [&](std::initializer_list<std::string_view> markers) {
    for (auto m : markers)
      if (!is_special_token(m)) return false;
    return true;
  };
  const char* name = "plain";
  if (arch == "gemma" || arch == "gemma2" || arch == "gemma3" || all({"<start_of_turn>", "<end_of_turn>"}))
    name = "gemma";
  else if (all({"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}))
    name = "llama3";
  else if (all({"<|im_start|>", "<|im_end|>"}))
    name = "chatml";
  else if (arch == "phi3" || all({"<|user|>", "<|assistant|>", "<|end|>"}))
    name = "phi3";
  else if (all({"[INST]", "[/INST]"}))
    name = "mistral";
  else if (arch == "llama" && all({"<s>", "</s>"}))
    name = "llama2";  // Llama 2 and Mistral v0.1/0.2 vocabularies, where [INST] is plain text
  return *find_builtin_template(name);
}

}  // namespace kvasir::chat
