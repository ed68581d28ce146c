// libFuzzer target: the jinja interpreter on arbitrary template text, rendered with a small fixed
// chat context. Must never crash, hang, leak or allocate without bound: every failure has to come
// back as an Error, and the limits below keep each input to a few milliseconds.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chat/jinja/jinja.h"

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Hi <b>there</b> 🦙"},
      {"role": "assistant", "content": null,
       "tool_calls": [{"id": "call_1234", "type": "function",
                       "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 2}}}]},
      {"role": "tool", "tool_call_id": "call_1234", "content": "{\"temp\": 21.5}"},
      {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nIt is 21.5°C."}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "add_generation_prompt": true,
    "bos_token": "<s>",
    "eos_token": "</s>",
    "n": 3,
    "f": 2.5
  })");
  return ctx;
}

kvasir::jinja::RenderConfig fuzz_config() {
  kvasir::jinja::RenderConfig c;
  c.limits.max_output_bytes = 1 << 20;
  c.limits.max_steps = 200000;
  c.limits.max_nesting = 100;
  c.limits.max_call_depth = 50;
  c.limits.max_render_depth = 400;
  c.now = [] { return kvasir::jinja::make_time(2026, 11, 29, 8, 36, 42); };
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const kvasir::jinja::RenderConfig config = fuzz_config();
  std::string_view source(reinterpret_cast<const char*>(data), size);
  auto out = kvasir::jinja::render(source, context(), config);
  if (out.ok() && out->size() > config.limits.max_output_bytes) __builtin_trap();
  return 0;
}
