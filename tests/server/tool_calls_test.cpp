// Tool calls: the family read off real templates, the grammar of each family (what it admits and
// refuses, checked with the matcher), and the parser on whole answers and on every split of them
// into stream pieces (the streamed arguments always add up to the whole).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "grammar/gbnf.h"
#include "grammar/matcher.h"
#include "server/tool_calls.h"

namespace kvasir::server {
namespace {

using json = nlohmann::ordered_json;

std::string read_template(const std::string& name) {
  std::ifstream in(std::string(KVASIR_SHARED_DIR) + "/templates/" + name + ".jinja");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<Tool> weather_tools() {
  return {{"get_weather", "Weather for a city",
           json::parse(R"({"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]})")},
          {"get_time", "", json::parse(R"({"type":"object","properties":{"zone":{"enum":["UTC","CET"]}},"required":["zone"]})")}};
}

// Whether `text` is a complete document of the plan's grammar (bytes, no vocabulary needed).
bool admits(const ToolCallPlan& plan, const std::string& text) {
  auto g = grammar::parse_gbnf(plan.gbnf);
  EXPECT_TRUE(g.ok()) << g.error() << "\n" << plan.gbnf;
  auto cg = grammar::compile(std::move(*g), std::make_shared<grammar::TokenIndex>(std::vector<std::string>{"x"}));
  grammar::Matcher m(cg);
  return m.accept_bytes(text) && m.can_end();
}

}  // namespace

TEST(ToolCalls, FamilyFromRealTemplates) {
  if (!std::ifstream(std::string(KVASIR_SHARED_DIR) + "/templates/Qwen-Qwen2.5-7B-Instruct.jinja"))
    GTEST_SKIP() << "../shared is not available";
  EXPECT_EQ(tool_syntax_for(read_template("Qwen-Qwen2.5-7B-Instruct")), ToolSyntax::hermes);
  EXPECT_EQ(tool_syntax_for(read_template("Qwen-Qwen3-0.6B")), ToolSyntax::hermes);
  EXPECT_EQ(tool_syntax_for(read_template("meta-llama-Llama-3.1-8B-Instruct")), ToolSyntax::llama3);
  EXPECT_EQ(tool_syntax_for(read_template("mistralai-Mistral-Nemo-Instruct-2407")), ToolSyntax::mistral);
  EXPECT_EQ(tool_syntax_for(read_template("ibm-granite-granite-3.3-2B-Instruct")), ToolSyntax::granite);
  EXPECT_EQ(tool_syntax_for(read_template("google-gemma-2-2b-it")), ToolSyntax::generic);
}

TEST(ToolCalls, GrammarsHoldCallsToTheirSchemas) {
  const auto tools = weather_tools();
  const ToolChoice required{ToolChoice::Mode::required, ""};
  auto hermes = plan_tool_calls(ToolSyntax::hermes, tools, required, true);
  ASSERT_TRUE(hermes.ok()) << hermes.error();
  EXPECT_FALSE(hermes->lazy);
  EXPECT_TRUE(admits(*hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"));
  EXPECT_TRUE(admits(*hermes, "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}</tool_call>\n"
                              "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 2}}</tool_call>"));
  EXPECT_FALSE(admits(*hermes, "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"zone\": \"EST\"}}</tool_call>"));
  EXPECT_FALSE(admits(*hermes, "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>"));
  EXPECT_FALSE(admits(*hermes, "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"days\": 2}}</tool_call>"));
  auto single = plan_tool_calls(ToolSyntax::mistral, tools, required, false);
  ASSERT_TRUE(single.ok());
  EXPECT_TRUE(admits(*single, "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}]"));
  EXPECT_FALSE(admits(*single, "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}, "
                               "{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}]"));
  auto named = plan_tool_calls(ToolSyntax::llama3, tools, {ToolChoice::Mode::named, "get_time"}, true);
  ASSERT_TRUE(named.ok());
  EXPECT_TRUE(admits(*named, "{\"name\": \"get_time\", \"parameters\": {\"zone\": \"UTC\"}}"));
  EXPECT_FALSE(admits(*named, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"x\"}}"));
  auto generic = plan_tool_calls(ToolSyntax::generic, tools, {ToolChoice::Mode::automatic, ""}, true);
  ASSERT_TRUE(generic.ok());
  EXPECT_TRUE(generic->lazy);
  EXPECT_EQ(generic->trigger, "{\"tool_calls\"");
  EXPECT_TRUE(admits(*generic, "{\"tool_calls\": [{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}]}"));
  const std::vector<Tool> email{{"f", "", json::parse(R"({"type":"string","format":"hostname"})")}};
  auto bad = plan_tool_calls(ToolSyntax::hermes, email, required, true);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("'f'"), std::string::npos);
  EXPECT_NE(bad.error().find("hostname"), std::string::npos);
}

TEST(ToolCalls, ParserWholeAndEverySplit) {
  const std::string answer = "Let me check. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Sa\\\"o {P}\", "
                             "\"days\": [1, {\"a\": 2}]}}\n</tool_call>\n<tool_call>{\"name\": \"get_time\", "
                             "\"arguments\": {\"zone\": \"UTC\"}}</tool_call>";
  for (size_t piece = 1; piece <= answer.size(); piece += (piece < 8 ? 1 : 7)) {
    ToolCallParser p(ToolSyntax::hermes, "<tool_call>", /*lazy=*/true);
    std::vector<ToolCallParser::Event> events;
    for (size_t i = 0; i < answer.size(); i += piece) p.feed(answer.substr(i, piece), events);
    p.finish(events);
    std::string content;
    std::vector<std::string> names, args(2);
    for (const auto& e : events) {
      if (e.kind == ToolCallParser::Event::Kind::content) content += e.text;
      else if (e.kind == ToolCallParser::Event::Kind::call) names.push_back(e.text);
      else args[size_t(e.index)] += e.text;
    }
    EXPECT_EQ(content, "Let me check. ") << piece;
    ASSERT_EQ(p.calls().size(), 2u) << piece;
    EXPECT_EQ(names, (std::vector<std::string>{"get_weather", "get_time"}));
    EXPECT_EQ(p.calls()[0].arguments, R"({"city": "Sa\"o {P}", "days": [1, {"a": 2}]})");
    EXPECT_EQ(json::parse(p.calls()[0].arguments)["city"], "Sa\"o {P}");
    EXPECT_EQ(args[0], p.calls()[0].arguments) << piece;  // the streamed fragments add up
    EXPECT_EQ(args[1], R"({"zone": "UTC"})");
    EXPECT_TRUE(p.calls()[0].complete && p.calls()[1].complete);
    EXPECT_NE(p.calls()[0].id, p.calls()[1].id);
  }
}

TEST(ToolCalls, ParserKeepsTextThatIsNotACall) {
  // Text that starts like the trigger but is not it is content, held back only while it could be.
  ToolCallParser p(ToolSyntax::hermes, "<tool_call>", true);
  std::vector<ToolCallParser::Event> events;
  p.feed("a <tool", events);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].text, "a ");
  p.feed("box> b", events);
  p.finish(events);
  std::string content;
  for (const auto& e : events) content += e.text;
  EXPECT_EQ(content, "a <toolbox> b");
  EXPECT_TRUE(p.calls().empty());
  // A call cut by max_tokens is incomplete; a section cut before its first call is not content
  // (raw call syntax never leaks into the answer's text), a malformed one is.
  ToolCallParser cut(ToolSyntax::mistral, "[TOOL_CALLS]", false);
  std::vector<ToolCallParser::Event> ev;
  cut.feed("[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {\"zo", ev);
  cut.finish(ev);
  ASSERT_EQ(cut.calls().size(), 1u);
  EXPECT_FALSE(cut.calls()[0].complete);
  ToolCallParser none(ToolSyntax::generic, "{\"tool_calls\"", false);
  std::vector<ToolCallParser::Event> ev2;
  none.feed("{\"tool_calls\": [", ev2);
  none.finish(ev2);
  EXPECT_TRUE(ev2.empty());
  ToolCallParser malformed(ToolSyntax::generic, "{\"tool_calls\"", true);
  std::vector<ToolCallParser::Event> ev4;
  malformed.feed("{\"tool_calls\": [{\"name\" 5}]} is how it looks", ev4);
  malformed.finish(ev4);
  ASSERT_FALSE(ev4.empty());
  EXPECT_EQ(ev4.back().text, "{\"tool_calls\": [{\"name\" 5}]} is how it looks");
  // Mistral ids are 9 characters (its template refuses others when they come back).
  ToolCallParser m(ToolSyntax::mistral, "[TOOL_CALLS]", true);
  std::vector<ToolCallParser::Event> ev3;
  m.feed("[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]", ev3);
  ASSERT_EQ(m.calls().size(), 1u);
  EXPECT_EQ(m.calls()[0].id.size(), 9u);
}


// Parallel calls stay possible, a repeat does not: the second identical call (blanks aside) is left
// out, its events never reach the stream, and the parser says the answer should end; a call that
// starts like an earlier one and then differs comes out whole, in order.
TEST(ToolCalls, ARepeatedCallEndsTheAnswer) {
  const std::string answer =
      "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}</tool_call>\n"
      "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC+1\"}}</tool_call>\n"
      "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"zone\": \"UTC\"}}</tool_call>\n"
      "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"zone\":\"UTC\"}}</tool_call>\n"
      "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"zone\": \"EST\"}}</tool_call>";
  for (size_t piece : {size_t(1), size_t(3), size_t(11), answer.size()}) {
    ToolCallParser p(ToolSyntax::hermes, "<tool_call>", /*lazy=*/false);
    std::vector<ToolCallParser::Event> events;
    bool said = false;
    for (size_t i = 0; i < answer.size(); i += piece) {
      p.feed(answer.substr(i, piece), events);
      if (p.repeated() && !said) {
        said = true;
        EXPECT_GE(i + piece, answer.find("{\"zone\":\"UTC\"}}") + 14) << "said before the repeat closed";
      }
    }
    p.finish(events);
    EXPECT_TRUE(p.repeated()) << piece;
    ASSERT_EQ(p.calls().size(), 3u) << piece;
    EXPECT_EQ(p.calls()[1].arguments, R"({"zone": "UTC+1"})");
    EXPECT_EQ(p.calls()[2].name, "get_weather");
    std::vector<std::string> names, args(4);
    for (const auto& e : events) {
      ASSERT_LT(e.index, 3) << "an event of the repeat was streamed";
      if (e.kind == ToolCallParser::Event::Kind::call) names.push_back(e.text);
      else if (e.kind == ToolCallParser::Event::Kind::arguments) args[size_t(e.index)] += e.text;
      else ADD_FAILURE() << "content: " << e.text;
    }
    EXPECT_EQ(names, (std::vector<std::string>{"get_time", "get_time", "get_weather"})) << piece;
    EXPECT_EQ(args[1], R"({"zone": "UTC+1"})") << piece;  // held while it matched call 0, then sent whole
  }
}

}  // namespace kvasir::server
