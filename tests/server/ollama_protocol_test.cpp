// Ollama requests into engine requests: Ollama's defaults and option names, refused fields named,
// model tags.
#include <gtest/gtest.h>

#include "server/ollama_protocol.h"

namespace kvasir::server::ollama {
namespace {

TEST(OllamaProtocol, DefaultsAreOllamas) {
  auto r = parse_chat(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->gen.stream);  // Ollama streams unless told otherwise
  EXPECT_FLOAT_EQ(r->gen.sampling.temperature, 0.8f);
  EXPECT_EQ(r->gen.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r->gen.sampling.top_p, 0.9f);
  EXPECT_FLOAT_EQ(r->gen.sampling.repetition_penalty, 1.1f);
  EXPECT_FALSE(r->gen.max_tokens.has_value());  // num_predict -1: the rest of the context
  EXPECT_FALSE(r->gen.sampling.seed.has_value());
}

TEST(OllamaProtocol, OptionsMapOntoSampling) {
  auto r = parse_generate(R"({"model": "m", "prompt": "p", "system": "s", "stream": false,
      "options": {"temperature": 0, "top_k": 5, "top_p": 0.5, "min_p": 0.1, "num_predict": 7, "seed": 9,
                  "repeat_penalty": 1.3, "stop": ["\n", ""], "num_ctx": 4096, "num_thread": 2}})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->gen.stream);
  EXPECT_EQ(r->gen.sampling.temperature, 0.f);
  EXPECT_EQ(r->gen.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(r->gen.sampling.min_p, 0.1f);
  EXPECT_EQ(*r->gen.max_tokens, 7);
  EXPECT_EQ(*r->gen.sampling.seed, 9u);
  EXPECT_FLOAT_EQ(r->gen.sampling.repetition_penalty, 1.3f);
  EXPECT_EQ(r->gen.stop, (std::vector<std::string>{"\n"}));
  ASSERT_EQ(r->messages.size(), 2u);  // system, then the prompt as the user turn
  EXPECT_EQ(r->messages[0]["role"], "system");
  EXPECT_EQ(r->messages[1]["content"], "p");
}

TEST(OllamaProtocol, UnsupportedFieldsAreNamed) {
  const char* bodies[][2] = {
      {R"({"model": "m", "prompt": "p", "format": "yaml"})", "format"},
      {R"({"model": "m", "prompt": "p", "images": ["x"]})", "images"},
      {R"({"model": "m", "prompt": "p", "suffix": "x"})", "suffix"},
      {R"({"model": "m", "prompt": "p", "options": {"mirostat": 2}})", "options.mirostat"},
      {R"({"model": "m", "prompt": "p", "think": true})", "think"},
  };
  for (const auto& [body, field] : bodies) {
    auto r = parse_generate(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.error().status, 400);
    EXPECT_EQ(r.error().param, field);
  }
  auto chat = parse_chat(R"({"model": "m", "messages": [{"role": "user", "content": "x", "images": ["y"]}]})");
  ASSERT_FALSE(chat.ok());
  EXPECT_EQ(chat.error().param, "messages[0].images");
  // What the client sends for arguments it was not given counts as absent.
  EXPECT_TRUE(parse_chat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [],
                             "format": "", "keep_alive": "5m"})")
                  .ok());
}

TEST(OllamaProtocol, BadValuesAndRequiredFields) {
  EXPECT_FALSE(parse_chat(R"({"messages": [{"role": "user", "content": "x"}]})").ok());  // model
  EXPECT_FALSE(parse_chat(R"({"model": "m", "messages": []})").ok());
  EXPECT_FALSE(parse_generate(R"({"model": "m", "prompt": 3})").ok());
  EXPECT_FALSE(parse_generate(R"({"model": "m", "options": {"temperature": "hot"}})").ok());
  EXPECT_FALSE(parse_generate(R"({"model": "m", "options": {"num_predict": 0}})").ok());
  EXPECT_FALSE(parse_generate(R"({"model": "m", "raw": true, "system": "s"})").ok());
  EXPECT_FALSE(parse_generate("[1, 2]").ok());
  EXPECT_FALSE(parse_generate(std::string(200, '[')).ok());
}

TEST(OllamaProtocol, ModelTags) {
  EXPECT_TRUE(same_model("gemma", "gemma"));
  EXPECT_TRUE(same_model("gemma:latest", "gemma"));
  EXPECT_FALSE(same_model("gemma:2b", "gemma"));
  EXPECT_FALSE(same_model("gemm", "gemma"));
  EXPECT_FALSE(same_model("", "gemma"));
}

TEST(OllamaProtocol, FinalChunkCarriesTimings) {
  Stats s{.prompt_tokens = 10, .completion_tokens = 5, .timings = {.queue_ms = 1, .ttft_ms = 21, .tpot_ms = 2, .e2e_ms = 30}};
  auto c = chunk(true, "m", "", true, engine::FinishReason::Length, &s);
  EXPECT_EQ(c["done"], true);
  EXPECT_EQ(c["done_reason"], "length");
  EXPECT_EQ(c["prompt_eval_count"], 10);
  EXPECT_EQ(c["eval_count"], 5);
  EXPECT_EQ(c["total_duration"], 30000000);
  EXPECT_EQ(c["prompt_eval_duration"], 20000000);
  EXPECT_EQ(c["eval_duration"], 8000000);
  EXPECT_EQ(c["message"]["role"], "assistant");
  auto g = chunk(false, "m", "abc", false);
  EXPECT_EQ(g["response"], "abc");
  EXPECT_FALSE(g.contains("done_reason"));
}

// Tools on /api/chat: OpenAI's function tools, earlier calls with their arguments as objects and
// results with the function's name, in the shape the chat templates read; calls come back in
// Ollama's shape (arguments an object, not a string); malformed ones are named.
TEST(OllamaProtocol, ChatToolsCallsAndResults) {
  auto r = parse_chat(R"({"model": "m", "tools": [{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
      "messages": [{"role": "user", "content": "Paris?"},
                   {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather",
                                                                                   "arguments": {"city": "Paris"}}}]},
                   {"role": "tool", "content": "sunny", "tool_name": "get_weather"}]})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->tool_list.size(), 1u);
  EXPECT_EQ(r->tool_list[0].name, "get_weather");
  ASSERT_TRUE(r->tools.is_array());
  const auto& call = r->messages[1]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["arguments"]["city"], "Paris");
  EXPECT_EQ(r->messages[2]["name"], "get_weather");
  const std::pair<const char*, const char*> bad[] = {
      {R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "retrieval"}]})", "tools[0].type"},
      {R"({"model": "m", "messages": [{"role": "assistant", "content": "", "tool_calls": [{"name": "f"}]}]})",
       "messages[0].tool_calls[0]"},
      {R"({"model": "m", "messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f",
           "arguments": "{}"}}]}]})", "messages[0].tool_calls[0].function.arguments"},
  };
  for (const auto& [body, param] : bad) {
    auto e = parse_chat(body);
    ASSERT_FALSE(e.ok()) << body;
    EXPECT_EQ(e.error().param, param) << body;
  }
  const ordered_json out = chunk(true, "m", "", true, engine::FinishReason::Stop, nullptr,
                                 {ToolCall{"call_1", "get_weather", R"({"city": "Oslo"})", true}});
  EXPECT_EQ(out["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(out["message"]["tool_calls"][0]["function"]["arguments"]["city"], "Oslo");
  EXPECT_EQ(out["done_reason"], "stop");
}

}  // namespace
}  // namespace kvasir::server::ollama
