// Responses API requests: input forms, the chat parser's validation under the Responses names,
// and the fields only text generation cannot honour refused by name.
#include <gtest/gtest.h>

#include "server/openai_responses.h"

namespace kvasir::server::responses_api {
namespace {

TEST(ResponsesApi, InputFormsBecomeMessages) {
  auto s = parse(R"({"input": "hi", "instructions": "be brief", "max_output_tokens": 9, "temperature": 0.5})");
  ASSERT_TRUE(s.ok()) << s.error().message;
  ASSERT_EQ(s->input.size(), 1u);
  EXPECT_EQ(s->input[0]["role"], "user");
  EXPECT_EQ(s->instructions, "be brief");
  EXPECT_EQ(*s->gen.max_tokens, 9);
  EXPECT_FLOAT_EQ(s->gen.sampling.temperature, 0.5f);
  EXPECT_TRUE(s->store);
  auto l = parse(R"({"input": [{"type": "message", "role": "developer", "content": "sys"},
                               {"role": "user", "content": [{"type": "input_text", "text": "a"},
                                                            {"type": "input_text", "text": "b"}]},
                               {"role": "assistant", "content": [{"type": "output_text", "text": "c"}]}],
                     "store": false, "previous_response_id": "resp_1"})");
  ASSERT_TRUE(l.ok()) << l.error().message;
  ASSERT_EQ(l->input.size(), 3u);
  EXPECT_EQ(l->input[0]["role"], "system");
  EXPECT_EQ(l->input[1]["content"], "a\nb");
  EXPECT_EQ(l->input[2]["role"], "assistant");
  EXPECT_FALSE(l->store);
  EXPECT_EQ(l->previous_response_id, "resp_1");
}

TEST(ResponsesApi, ErrorsNameTheResponsesField) {
  auto e = parse(R"({"input": "x", "max_output_tokens": 0})");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().param, "max_output_tokens");
  EXPECT_EQ(parse(R"({"input": "x", "temperature": 9})").error().param, "temperature");
  EXPECT_EQ(parse(R"({})").error().param, "input");
  EXPECT_EQ(parse(R"({"input": []})").error().param, "input");
  EXPECT_EQ(parse(R"({"input": [{"role": "tool", "content": "x"}]})").error().param, "input[0].role");
  EXPECT_EQ(parse(R"({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]})")
                .error()
                .param,
            "input[0].content[0].type");
}

TEST(ResponsesApi, UnsupportedFeaturesAreRefused) {
  for (const auto& [body, field] : std::vector<std::pair<std::string, std::string>>{
           {R"({"input": "x", "tools": [{"type": "web_search"}]})", "tools[0].type"},
           {R"({"input": "x", "tools": [{"type": "function", "name": "f", "container": 1}]})", "tools[0].container"},
           {R"({"input": "x", "text": {"format": {"type": "xml"}}})", "text.format.type"},
           {R"({"input": "x", "text": {"format": {"type": "json_schema", "json_schema": {}}}})", "text.format.json_schema"},
           {R"({"input": "x", "text": {"verbosity": "low"}})", "text.verbosity"},
           {R"({"input": "x", "truncation": "auto"})", "truncation"},
           {R"({"input": "x", "tool_choice": "required"})", "tool_choice"},
           {R"({"input": "x", "reasoning": {"effort": "high"}})", "reasoning"},
           {R"({"input": "x", "include": ["reasoning.encrypted_content"]})", "include"},
           {R"({"input": [{"type": "function_call_output", "call_id": "c"}]})", "input[0].output"},
           {R"({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1"}]})", "input[0].arguments"},
           {R"({"input": [{"type": "file_search_call", "id": "x"}]})", "input[0].type"}}) {
    auto r = parse(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.error().param, field) << body;
  }
  // Their neutral values are fine.
  EXPECT_TRUE(parse(R"({"input": "x", "tools": [], "tool_choice": "auto", "truncation": "disabled",
                         "text": {"format": {"type": "text"}}, "include": [], "parallel_tool_calls": true})")
                  .ok());
}

// Function tools in this API's flat shape, a named tool_choice, and a conversation that carries
// earlier calls (consecutive ones as one assistant turn) and their outputs as tool messages.
TEST(ResponsesApi, FunctionToolsCallsAndOutputs) {
  auto r = parse(R"({"tools": [{"type": "function", "name": "get_time", "description": "now",
                                "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}, "strict": true}],
                     "tool_choice": {"type": "function", "name": "get_time"}, "parallel_tool_calls": false,
                     "input": [{"role": "user", "content": "time?"},
                               {"type": "function_call", "call_id": "call_1", "name": "get_time", "arguments": "{\"zone\": \"UTC\"}"},
                               {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
                               {"type": "function_call_output", "call_id": "call_1", "output": "12:00"}]})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->tool_list.size(), 1u);
  EXPECT_EQ(r->tool_list[0].name, "get_time");
  EXPECT_EQ(r->tools[0]["function"]["description"], "now");
  EXPECT_EQ(r->tool_choice.mode, ToolChoice::Mode::named);
  EXPECT_FALSE(r->parallel_tool_calls);
  ASSERT_EQ(r->input.size(), 3u);
  ASSERT_EQ(r->input[1]["tool_calls"].size(), 2u);
  EXPECT_EQ(r->input[1]["tool_calls"][0]["function"]["arguments"]["zone"], "UTC");
  EXPECT_EQ(r->input[2]["role"], "tool");
  EXPECT_EQ(r->input[2]["tool_call_id"], "call_1");
  EXPECT_FALSE(parse(R"({"input": "x", "tools": [{"type": "function", "name": "f"}],
                         "tool_choice": {"type": "function", "name": "g"}})").ok());
  Result res;
  res.status = "completed";
  res.calls = {ToolCall{"call_9", "get_time", R"({"zone": "CET"})", true}};
  res.call_item_ids = {"fc_1"};
  const ordered_json out = response_json(res)["output"];
  ASSERT_EQ(out.size(), 1u);  // no text: the call alone
  EXPECT_EQ(out[0]["type"], "function_call");
  EXPECT_EQ(out[0]["call_id"], "call_9");
  EXPECT_EQ(out[0]["arguments"], R"({"zone": "CET"})");
  EXPECT_EQ(assistant_turn(res)["tool_calls"][0]["function"]["arguments"]["zone"], "CET");
}

}  // namespace
}  // namespace kvasir::server::responses_api
