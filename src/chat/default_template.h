// The template used for a model that ships none (no tokenizer.chat_template in its GGUF file):
// ChatML, the format Hugging Face's transformers used as its default chat template. Each message
// becomes "<|im_start|>ROLE\nCONTENT<|im_end|>\n"; add_generation_prompt appends
// "<|im_start|>assistant\n". It adds no BOS token and ignores tools.
#pragma once
#include <string_view>

namespace kvasir::chat {

inline constexpr std::string_view kDefaultChatTemplate =
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}"
    "{% endif %}";

}  // namespace kvasir::chat
