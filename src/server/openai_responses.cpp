#include "server/openai_responses.h"

#include <ctime>
#include <random>

namespace kvasir::server::responses_api {
namespace {

constexpr std::string_view kFields[] = {"model",  "input",    "instructions", "max_output_tokens", "temperature",
                                        "top_p",  "stream",   "previous_response_id", "store",      "metadata",
                                        "user",   "text",     "truncation",   "tools",             "tool_choice",
                                        "parallel_tool_calls", "include", "service_tier", "ttft_deadline_ms"};

bool known(const std::string& key) {
  for (auto k : kFields)
    if (k == key) return true;
  return false;
}

ApiError unsupported(const std::string& field, const std::string& what) {
  return bad_request("'" + field + "': " + what + " is not supported by this server (text and function tools)", field,
                     "unsupported_field");
}

Parsed<std::string> string_field(const ordered_json& item, const char* key, const std::string& at) {
  if (!item.contains(key) || !item[key].is_string()) return bad_request("'" + at + "." + key + "' must be a string", at + "." + key);
  return item[key].get<std::string>();
}

// A function_call item (an earlier call of the model's) as an assistant turn's tool call, and a
// function_call_output item as a tool message.
Parsed<ordered_json> read_call_item(const ordered_json& item, const std::string& at) {
  auto call_id = string_field(item, "call_id", at);
  if (!call_id) return call_id.error();
  if (item["type"] == "function_call_output") {
    auto output = string_field(item, "output", at);
    if (!output) return output.error();
    return ordered_json{{"role", "tool"}, {"tool_call_id", *call_id}, {"content", *output}};
  }
  auto name = string_field(item, "name", at);
  if (!name) return name.error();
  auto args = string_field(item, "arguments", at);
  if (!args) return args.error();
  ordered_json parsed = ordered_json::parse(*args, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object())
    return bad_request("'" + at + ".arguments' must be a JSON object as a string", at + ".arguments");
  return ordered_json{{"role", "assistant"}, {"content", ""},
                      {"tool_calls", ordered_json::array({{{"id", *call_id}, {"type", "function"},
                                                           {"function", {{"name", *name}, {"arguments", parsed}}}}})}};
}

// One input item as a chat message {role, content: string} (or a call or its result).
Parsed<ordered_json> read_item(const ordered_json& item, size_t i) {
  const std::string at = "input[" + std::to_string(i) + "]";
  if (!item.is_object()) return bad_request("'" + at + "' must be an object", at);
  if (item.contains("type") && (item["type"] == "function_call" || item["type"] == "function_call_output"))
    return read_call_item(item, at);
  if (item.contains("type") && item["type"] != "message")
    return unsupported(at + ".type", "input items of type " + item["type"].dump());
  if (!item.contains("role") || !item["role"].is_string()) return bad_request("'" + at + ".role' must be a string", at);
  std::string role = item["role"].get<std::string>();
  if (role == "developer") role = "system";
  if (role != "user" && role != "assistant" && role != "system")
    return bad_request("'" + at + ".role' must be user, assistant, system or developer", at + ".role");
  const ordered_json& c = item.contains("content") ? item["content"] : ordered_json();
  std::string text;
  if (c.is_string()) {
    text = c.get<std::string>();
  } else if (c.is_array()) {
    for (size_t k = 0; k < c.size(); ++k) {
      const std::string pat = at + ".content[" + std::to_string(k) + "]";
      const auto& part = c[k];
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
        return bad_request("'" + pat + "' must be an object with a type", pat);
      const std::string type = part["type"].get<std::string>();
      if (type != "input_text" && type != "output_text") return unsupported(pat + ".type", "content of type '" + type + "'");
      if (!part.contains("text") || !part["text"].is_string()) return bad_request("'" + pat + ".text' must be a string", pat);
      text += (text.empty() ? "" : "\n") + part["text"].get<std::string>();
    }
  } else {
    return bad_request("'" + at + ".content' must be a string or an array of text parts", at + ".content");
  }
  return ordered_json{{"role", role}, {"content", text}};
}

}  // namespace

Parsed<Request> parse(std::string_view body) {
  auto doc = parse_json_object(body);
  if (!doc) return doc.error();
  return parse(JsonBody{std::move(*doc)});
}

Parsed<Request> parse(JsonBody body) {
  if (!body.doc.is_object()) return bad_request("the request body must be a JSON object", {}, "invalid_json");
  ordered_json& doc = body.doc;
  for (const auto& [key, value] : doc.items())
    if (!value.is_null() && !known(key))
      return bad_request("'" + key + "' is not supported by this server (see docs/API.md)", key, "unsupported_field");

  // What only text generation can honour.
  std::optional<OutputFormat> format;
  if (auto t = doc.find("text"); t != doc.end() && !t->is_null()) {
    if (!t->is_object()) return bad_request("'text' must be an object", "text");
    for (const auto& [k, v] : t->items())
      if (k != "format" && !v.is_null()) return unsupported("text." + k, "'text." + k + "'");
    if (auto f = t->find("format"); f != t->end() && !f->is_null())
      if (auto e = read_response_format(*f, "text.format", /*flat=*/true, format)) return *e;
  }
  if (auto t = doc.find("truncation"); t != doc.end() && !t->is_null() && *t != "disabled")
    return unsupported("truncation", "truncation other than \"disabled\"");
  Request r;
  // Function tools, flat ({"type": "function", "name", "description", "parameters", "strict"}),
  // read as chat completions reads them.
  if (auto t = doc.find("tools"); t != doc.end() && !t->is_null() && !(t->is_array() && t->empty())) {
    if (!t->is_array()) return bad_request("'tools' must be an array", "tools");
    ordered_json nested = ordered_json::array();
    for (size_t i = 0; i < t->size(); ++i) {
      const ordered_json& tool = (*t)[i];
      const std::string at = "tools[" + std::to_string(i) + "]";
      if (!tool.is_object() || tool.value("type", ordered_json()) != "function")
        return unsupported(at + ".type", "tools other than {\"type\": \"function\"}");
      ordered_json fn = ordered_json::object();
      for (const auto& [k, v] : tool.items()) {
        if (k == "type") continue;
        if (k != "name" && k != "description" && k != "parameters" && k != "strict" && !v.is_null())
          return unsupported(at + "." + k, "'" + at + "." + k + "'");
        fn[k] = v;
      }
      nested.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    if (auto e = read_function_tools(nested, r.tool_list)) return *e;
    r.tools = std::move(nested);
    r.tools_echo = *t;
  }
  if (auto t = doc.find("tool_choice"); t != doc.end() && !t->is_null()) {
    ordered_json choice = *t;  // {"type": "function", "name"} is chat completions' {"function": {"name"}}
    if (t->is_object() && t->contains("name")) choice = {{"type", "function"}, {"function", {{"name", (*t)["name"]}}}};
    if (auto e = read_function_tool_choice(choice, r.tool_list, r.tool_choice)) return *e;
    r.tool_choice_echo = *t;
  }
  if (auto t = doc.find("parallel_tool_calls"); t != doc.end() && !t->is_null()) {
    if (!t->is_boolean()) return bad_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
    r.parallel_tool_calls = t->get<bool>();
  }
  if (auto t = doc.find("include"); t != doc.end() && !t->is_null() && !(t->is_array() && t->empty()))
    return unsupported("include", "include");

  // The sampling fields are the chat endpoint's: validated by its parser, under their own names.
  ordered_json chat{{"messages", ordered_json::array({{{"role", "user"}, {"content", ""}}})}};
  for (const char* k : {"model", "temperature", "top_p", "stream", "user", "metadata", "store", "service_tier",
                        "ttft_deadline_ms"})
    if (doc.contains(k)) chat[k] = doc[k];
  if (doc.contains("max_output_tokens")) chat["max_tokens"] = doc["max_output_tokens"];
  auto parsed = parse_chat_request(JsonBody{std::move(chat)});
  if (!parsed) {
    ApiError e = parsed.error();
    if (e.param == "max_tokens") {
      e.param = "max_output_tokens";
      e.message = "'max_output_tokens' must be an integer >= 1";
    }
    return e;
  }
  r.gen = std::move(parsed->gen);
  r.gen.format = std::move(format);

  if (auto it = doc.find("instructions"); it != doc.end() && !it->is_null()) {
    if (!it->is_string()) return bad_request("'instructions' must be a string", "instructions");
    r.instructions = it->get<std::string>();
  }
  if (auto it = doc.find("previous_response_id"); it != doc.end() && !it->is_null()) {
    if (!it->is_string()) return bad_request("'previous_response_id' must be a string", "previous_response_id");
    r.previous_response_id = it->get<std::string>();
  }
  if (auto it = doc.find("store"); it != doc.end() && it->is_boolean()) r.store = it->get<bool>();
  auto input = doc.find("input");
  if (input == doc.end() || input->is_null()) return bad_request("'input' is required", "input");
  r.input = ordered_json::array();
  if (input->is_string()) {
    r.input.push_back({{"role", "user"}, {"content", *input}});
  } else if (input->is_array() && !input->empty()) {
    for (size_t i = 0; i < input->size(); ++i) {
      auto m = read_item((*input)[i], i);
      if (!m) return m.error();
      // Consecutive calls are one assistant turn, as the chat templates expect them.
      if (m->contains("tool_calls") && !r.input.empty() && r.input.back().contains("tool_calls"))
        r.input.back()["tool_calls"].push_back((*m)["tool_calls"][0]);
      else
        r.input.push_back(std::move(*m));
    }
  } else {
    return bad_request("'input' must be a string or a non-empty array of messages", "input");
  }
  return r;
}

std::string new_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", (unsigned long long)rng(), (unsigned long long)rng());
  return prefix + std::string(hex);
}

ordered_json text_part(const std::string& text) {
  return ordered_json{{"type", "output_text"}, {"text", text}, {"annotations", ordered_json::array()}};
}

ordered_json message_item(const Result& r, bool done) {
  return ordered_json{{"type", "message"},
                      {"id", r.item_id},
                      {"status", done ? (r.status == "incomplete" ? "incomplete" : "completed") : "in_progress"},
                      {"role", "assistant"},
                      {"content", done ? ordered_json::array({text_part(r.text)}) : ordered_json::array()}};
}

ordered_json function_call_item(const ToolCall& call, const std::string& item_id, bool done) {
  return ordered_json{{"type", "function_call"}, {"id", item_id},  {"call_id", call.id},
                      {"name", call.name},       {"arguments", done ? call.arguments : ""},
                      {"status", done ? "completed" : "in_progress"}};
}

ordered_json assistant_turn(const Result& r) {
  ordered_json turn{{"role", "assistant"}, {"content", r.text}};
  if (r.calls.empty()) return turn;
  turn["tool_calls"] = ordered_json::array();
  for (const ToolCall& c : r.calls)
    turn["tool_calls"].push_back({{"id", c.id}, {"type", "function"},
                                  {"function", {{"name", c.name}, {"arguments", ordered_json::parse(c.arguments, nullptr, false)}}}});
  return turn;
}

ordered_json response_json(const Result& r) {
  const bool done = r.status != "in_progress";
  ordered_json output = ordered_json::array();
  if (done) {
    if (r.message_opened || !r.text.empty() || r.calls.empty()) output.push_back(message_item(r, true));
    for (size_t i = 0; i < r.calls.size(); ++i) output.push_back(function_call_item(r.calls[i], r.call_item_ids[i], true));
  }
  ordered_json out{{"id", r.id},
                   {"object", "response"},
                   {"created_at", r.created_at},
                   {"status", r.status},
                   {"error", nullptr},
                   {"incomplete_details", r.status == "incomplete" ? ordered_json{{"reason", "max_output_tokens"}}
                                                                   : ordered_json(nullptr)},
                   {"instructions", r.instructions.empty() ? ordered_json(nullptr) : ordered_json(r.instructions)},
                   {"max_output_tokens", r.max_output_tokens ? ordered_json(*r.max_output_tokens) : ordered_json(nullptr)},
                   {"model", r.model},
                   {"output", std::move(output)},
                   {"parallel_tool_calls", r.parallel_tool_calls},
                   {"previous_response_id",
                    r.previous_response_id.empty() ? ordered_json(nullptr) : ordered_json(r.previous_response_id)},
                   {"temperature", r.temperature},
                   {"text", {{"format", {{"type", "text"}}}}},
                   {"tool_choice", r.tool_choice},
                   {"tools", r.tools},
                   {"top_p", r.top_p},
                   {"truncation", "disabled"},
                   {"metadata", ordered_json::object()}};
  out["usage"] = done ? ordered_json{{"input_tokens", r.input_tokens},
                                     {"input_tokens_details", {{"cached_tokens", r.cached_tokens}}},
                                     {"output_tokens", r.output_tokens},
                                     {"output_tokens_details", {{"reasoning_tokens", 0}}},
                                     {"total_tokens", r.input_tokens + r.output_tokens}}
                      : ordered_json(nullptr);
  return out;
}

}  // namespace kvasir::server::responses_api
