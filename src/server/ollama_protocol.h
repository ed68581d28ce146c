// Ollama's API (/api/generate, /api/chat, /api/tags, /api/show, /api/version, /api/ps) mapped onto
// the engine: its requests parsed into the same GenerationRequest the OpenAI routes use (Ollama's
// names and defaults: `options.num_predict`, `repeat_penalty`, temperature 0.8, top_k 40, top_p
// 0.9, streaming on unless "stream": false), and its response objects; `format` constrains the
// answer, `tools` on /api/chat are function tools. Fields that would change the output and are not
// implemented (images, suffix, template, context, mirostat, think...) are a 400 naming them, as on
// the OpenAI routes; empty values ("tools": [], "format": "", which Ollama's client sends when not
// given) count as absent.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/engine.h"
#include "server/protocol.h"
#include "server/tool_calls.h"

namespace kvasir::server::ollama {

struct Request {
  GenerationRequest gen;       // max_tokens absent: the rest of the context (num_predict -1)
  ordered_json messages;       // /api/chat; /api/generate: built from system + prompt
  std::string prompt;          // /api/generate
  bool raw = false;            // /api/generate: the prompt as is, no template
  bool is_chat = false;
  std::vector<Tool> tool_list;  // /api/chat "tools" (OpenAI's function tools); the model may call them
  ordered_json tools;           // the same, for the chat template (null: none)
};

Parsed<Request> parse_chat(JsonBody body);
Parsed<Request> parse_chat(std::string_view body);
Parsed<Request> parse_generate(JsonBody body);
Parsed<Request> parse_generate(std::string_view body);
// "options" of any route: an object of Ollama's option names (none of which changes an embedding);
// another name is a 400 naming it (options.x).
std::optional<ApiError> check_options(const ordered_json& options);
// Ollama model names carry a tag: "name:latest" and "name" are the same model.
bool same_model(std::string_view requested, std::string_view served);

// RFC 3339 UTC with microseconds, as Ollama's created_at.
std::string timestamp_now();

// Durations in nanoseconds, from the engine's final delta.
struct Stats {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  engine::Timings timings;
};
// One streamed piece (done false) or the final object (done true) of either endpoint; a chat
// message may carry tool calls (Ollama's shape: {"function": {"name", "arguments": {...}}}).
ordered_json chunk(bool is_chat, const std::string& model, const std::string& text, bool done,
                   engine::FinishReason finish = engine::FinishReason::None, const Stats* stats = nullptr,
                   const std::vector<ToolCall>& calls = {});

}  // namespace kvasir::server::ollama
