// Tool-message shaping: only conversations with tool calls or results are reshaped, and the
// reshaping turns them into turns a template without tool syntax can render.
#include <gtest/gtest.h>

#include "chat/tool_messages.h"

namespace kvasir::chat {
namespace {

using J = nlohmann::ordered_json;

TEST(ToolMessages, OnlyToolConversationsAreDetected) {
  EXPECT_FALSE(has_tool_messages(J::parse(R"([{"role":"system","content":"s"},{"role":"user","content":"hi"},
                                              {"role":"assistant","content":"hello"}])")));
  EXPECT_FALSE(has_tool_messages(J::parse(R"([{"role":"assistant","content":"x","tool_calls":null}])")));
  EXPECT_TRUE(has_tool_messages(J::parse(R"([{"role":"user","content":"t?"},{"role":"tool","content":"12:00"}])")));
  EXPECT_TRUE(has_tool_messages(J::parse(
      R"([{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"f","arguments":{}}}]}])")));
  EXPECT_FALSE(has_tool_messages(J::parse(R"("not a list")")));
}

TEST(ToolMessages, GenericHistoryMakesUserAndAssistantTurns) {
  J m = J::parse(R"([{"role":"user","content":"time?"},
    {"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_time","arguments":{"tz":"UTC"}}}]},
    {"role":"tool","content":"12:00"},{"role":"tool","content":{"ok":true}}])");
  generic_tool_history(m);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[1]["role"], "assistant");
  EXPECT_EQ(m[1]["content"], R"({"tool_calls":[{"name":"get_time","arguments":{"tz":"UTC"}}]})");
  EXPECT_EQ(m[2]["role"], "user");
  EXPECT_EQ(m[2]["content"], "Tool result: 12:00\nTool result: {\"ok\":true}");
  EXPECT_FALSE(m[2].contains("tool_results"));
}

TEST(ToolMessages, ToolPromptGoesIntoTheSystemMessage) {
  ChatFormatter f("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}", "", "");
  J m = J::parse(R"([{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}])");
  add_tool_prompt(m, "TOOLS", f);
  EXPECT_EQ(m[0]["content"], "Be brief.\n\nTOOLS");
  // A template that refuses a system role: the text goes before the first user message.
  ChatFormatter no_system("{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system') }}{% endif %}x", "", "");
  J n = J::parse(R"([{"role":"user","content":"hi"}])");
  add_tool_prompt(n, "TOOLS", no_system);
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0]["content"], "TOOLS\n\nhi");
}

}  // namespace
}  // namespace kvasir::chat
