// libFuzzer target for the request protocol layer: arbitrary bytes as the body of every endpoint
// and as the text of an error. Parsing must never crash, hang or recurse without bound (bodies
// nested deeper than kMaxJsonDepth, or with an object wider than kMaxJsonObjectMembers, are
// refused before parsing); a request that parses must hold
// what the parser promises (Ollama's requests too) and survive what the server does next with its JSON (dump, copy);
// every error must print as a JSON body.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/ollama_protocol.h"
#include "server/openai_responses.h"
#include "server/protocol.h"

namespace {

using namespace kvasir::server;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

void check_error(const ApiError& e) {
  check(e.status == 400 && !e.message.empty());
  check(nlohmann::json::accept(error_body(e)));
}

void check_generation(const GenerationRequest& g) {
  check(g.n >= 1 && g.n <= kMaxChoices);
  check(g.top_logprobs >= -1 && g.top_logprobs <= kMaxTopLogprobs);
  check(g.stop.size() <= kMaxStopStrings);
  size_t stop_bytes = 0;
  for (const std::string& s : g.stop) check(!s.empty()), stop_bytes += s.size();
  check(stop_bytes <= kMaxStopBytes);
  check(!g.max_tokens || (*g.max_tokens >= 1 && g.min_tokens <= *g.max_tokens));
}

// What the server does with a request's JSON values: copies them into a template context and
// dumps them (tool calls, logs).
void walk(const ordered_json& v) {
  const ordered_json copy = v;
  check(!copy.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  const bool too_deep = json_nesting_depth(body, kMaxJsonDepth + 1) > kMaxJsonDepth ||
                        json_max_object_members(body, kMaxJsonObjectMembers + 1) > kMaxJsonObjectMembers;
  auto expect = [&](const auto& r) {
    if (!r.ok()) return check_error(r.error());
    check(!too_deep);
  };

  auto chat = parse_chat_request(body);
  expect(chat);
  if (chat.ok()) {
    check_generation(chat->gen);
    check(chat->messages.is_array() && !chat->messages.empty());
    for (const ordered_json& m : chat->messages) {
      check(m.is_object());
      const auto role = m.find("role"), content = m.find("content");
      check(role != m.end() && role->is_string());
      const std::string& r = role->get_ref<const std::string&>();
      check(r == "system" || r == "user" || r == "assistant" || r == "tool");  // developer is read as system
      if (auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) check(calls->is_array());
      check(content != m.end() && (content->is_string() || content->is_null()));
    }
    check(chat->tools.is_null() || (chat->tools.is_array() && !chat->tools.empty() && chat->tools.size() <= kMaxTools));
    check(chat->chat_template_kwargs.is_object());
    walk(chat->messages);
    walk(chat->tools);
    walk(chat->chat_template_kwargs);
  }

  auto completion = parse_completion_request(body);
  expect(completion);
  if (completion.ok()) {
    check_generation(completion->gen);
    check(!completion->prompts.empty());
    check(int64_t(completion->prompts.size()) * completion->gen.n <= kMaxChoices);
    for (const PromptInput& p : completion->prompts)
      for (int32_t id : p.ids) check(id >= 0);
  }

  auto tokenize = parse_tokenize_request(body);
  expect(tokenize);
  if (tokenize.ok() && tokenize->is_chat) walk(tokenize->messages);

  auto detokenize = parse_detokenize_request(body);
  expect(detokenize);
  if (detokenize.ok())
    for (int32_t id : detokenize->tokens) check(id >= 0);

  // Ollama's routes parse into the same GenerationRequest.
  for (bool is_chat : {true, false}) {
    auto o = is_chat ? ollama::parse_chat(body) : ollama::parse_generate(body);
    expect(o);
    if (o.ok()) {
      check(!o->gen.model.empty() && o->messages.is_array() && !o->messages.empty());
      for (const ordered_json& m : o->messages) {
        const std::string& r = m["role"].get_ref<const std::string&>();
        check(r == "system" || r == "user" || r == "assistant" || r == "tool");
      }
      check(!o->gen.max_tokens || *o->gen.max_tokens >= 1);
      for (const std::string& s : o->gen.stop) check(!s.empty());
      walk(o->messages);
    }
  }

  auto resp = responses_api::parse(body);
  expect(resp);
  if (resp.ok()) {
    check_generation(resp->gen);
    check(resp->input.is_array() && !resp->input.empty());
    for (const ordered_json& m : resp->input) check(m["content"].is_string() && m["role"].is_string());
  }

  // Any bytes (invalid UTF-8 included) in an error's text still make a JSON body.
  const std::string text(body);
  check_error(ApiError{.message = text.empty() ? "x" : text, .param = text, .code = text});
  return 0;
}
