// OpenAI's Responses API (POST /v1/responses) over the chat machinery: the request parsed into
// the shared GenerationRequest plus a conversation (instructions, the stored conversation of
// previous_response_id, the new input), the response object, and the typed stream events.
// Text and function tools: `tools` of type function (flat, as this API writes them), their calls as
// function_call output items and function_call / function_call_output input items. Reasoning,
// built-in tools and other input item types are a 400 naming the field.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/engine.h"
#include "server/protocol.h"
#include "server/tool_calls.h"

namespace kvasir::server::responses_api {

struct Request {
  GenerationRequest gen;         // max_tokens from max_output_tokens
  std::string instructions;      // a system message, not carried to later responses
  ordered_json input;            // array of {role, content: string} messages
  std::string previous_response_id;
  bool store = true;
  std::vector<Tool> tool_list;  // function tools
  ordered_json tools;           // the same for the chat template ({"type": "function", "function": {...}}); null: none
  ordered_json tools_echo = ordered_json::array();  // as the request gave them, for the response object
  ToolChoice tool_choice;
  ordered_json tool_choice_echo = "auto";
  bool parallel_tool_calls = true;
};

Parsed<Request> parse(JsonBody body);
Parsed<Request> parse(std::string_view body);

// What a finished response leaves for previous_response_id: its conversation so far.
struct Stored {
  ordered_json messages;  // input messages and the answer, without instructions
};

struct Result {
  std::string id, item_id, model, instructions, previous_response_id;
  int64_t created_at = 0;
  std::string text;
  std::string status = "completed";  // in_progress, completed, incomplete
  int64_t input_tokens = 0, output_tokens = 0, cached_tokens = 0;
  std::optional<int32_t> max_output_tokens;
  float temperature = 1, top_p = 1;
  std::vector<ToolCall> calls;       // complete calls, each a function_call output item
  std::vector<std::string> call_item_ids;
  ordered_json tools = ordered_json::array(), tool_choice = "auto";
  bool parallel_tool_calls = true;
  bool message_opened = false;  // streamed: the message item was announced, so it stays in the output
};

std::string new_id(const char* prefix);  // "resp_" + 32 hex digits
ordered_json response_json(const Result& r);
ordered_json message_item(const Result& r, bool done);
ordered_json function_call_item(const ToolCall& call, const std::string& item_id, bool done);
// The assistant turn of a finished response, as the chat template reads it (text, tool_calls).
ordered_json assistant_turn(const Result& r);
ordered_json text_part(const std::string& text);

}  // namespace kvasir::server::responses_api
