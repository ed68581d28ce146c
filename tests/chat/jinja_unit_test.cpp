// Unit tests of the jinja interpreter: statements, whitespace control, undefined values, errors with
// their positions, resource limits, and the chat-template API. Broad Python-compatibility coverage
// lives in jinja_semantics_test.cpp; these pin down behaviour with readable, exact expectations.
#include <gtest/gtest.h>

#include <string>

#include "chat/chat_template.h"
#include "chat/default_template.h"
#include "chat/jinja/jinja.h"

namespace kvasir::jinja {
namespace {

using json = nlohmann::ordered_json;

std::string ok(std::string_view tmpl, const json& ctx = json::object(), const RenderConfig& config = {}) {
  auto r = render(tmpl, ctx, config);
  EXPECT_TRUE(r.ok()) << tmpl << "\n -> " << r.error();
  return r.ok() ? *r : std::string("<error>");
}

std::string err(std::string_view tmpl, const json& ctx = json::object(), const RenderConfig& config = {}) {
  auto r = render(tmpl, ctx, config);
  EXPECT_FALSE(r.ok()) << tmpl << "\n -> rendered: " << (r.ok() ? *r : "");
  return r.ok() ? std::string() : r.error();
}

// ----- statements -----

TEST(JinjaStatements, IfElifElse) {
  const char* t = "{% if n > 2 %}big{% elif n > 0 %}small{% else %}none{% endif %}";
  EXPECT_EQ(ok(t, {{"n", 5}}), "big");
  EXPECT_EQ(ok(t, {{"n", 1}}), "small");
  EXPECT_EQ(ok(t, {{"n", 0}}), "none");
}

TEST(JinjaStatements, ForLoopVariables) {
  EXPECT_EQ(ok("{% for x in 'ab' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
               "{{ loop.first }}{{ loop.last }}{{ loop.length }} {% endfor %}"),
            "1021TrueFalse2 2110FalseTrue2 ");
  EXPECT_EQ(ok("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }} {% endfor %}"), "-2 1-3 2- ");
}

TEST(JinjaStatements, ForElseFilterAndUnpacking) {
  EXPECT_EQ(ok("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(ok("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}/{{ loop.length }} {% endfor %}"), "2/2 4/2 ");
  EXPECT_EQ(ok("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"b", 1}, {"a", 2}}}}), "b=1;a=2;");
}

TEST(JinjaStatements, BreakAndContinue) {
  EXPECT_EQ(ok("{% for x in [1, 2, 3, 4] %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}"), "12");
  EXPECT_EQ(ok("{% for x in [1, 2, 3, 4] %}{% if x is odd %}{% continue %}{% endif %}{{ x }}{% endfor %}"), "24");
}

TEST(JinjaStatements, LoopScopeDoesNotLeak) {
  EXPECT_EQ(ok("{% set x = 1 %}{% for i in [5] %}{% set x = i %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(ok("{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}"), "2");
}

TEST(JinjaStatements, NamespaceCarriesStateOutOfLoops) {
  EXPECT_EQ(ok("{% set ns = namespace(total=0) %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}"
               "{% endfor %}{{ ns.total }}"),
            "6");
  EXPECT_TRUE(err("{% set x = 1 %}{% set x.y = 2 %}").starts_with("TemplateRuntimeError: cannot assign attribute"));
}

TEST(JinjaStatements, BlockSetAndFilterBlock) {
  EXPECT_EQ(ok("{% set x %}a{{ 1 + 1 }}b{% endset %}[{{ x }}]"), "[a2b]");
  EXPECT_EQ(ok("{% set x | upper %}abc{% endset %}{{ x }}"), "ABC");
  EXPECT_EQ(ok("{% filter upper %}abc{% endfilter %}"), "ABC");
}

TEST(JinjaStatements, MacrosWithDefaultsAndCaller) {
  EXPECT_EQ(ok("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(b=3, a=4) }}"),
            "1B1243");
  EXPECT_EQ(ok("{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}in{% endcall %}"), "<in>");
  EXPECT_EQ(ok("{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, k=2) }}"), "(1,){'k': 2}");
  EXPECT_TRUE(err("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}").starts_with("TypeError: macro 'm' takes not more"));
}

TEST(JinjaStatements, WithAndRaw) {
  EXPECT_EQ(ok("{% with a = 1 %}{{ a }}{% endwith %}[{{ a }}]"), "1[]");
  EXPECT_EQ(ok("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

TEST(JinjaStatements, GenerationTagRendersItsBody) {
  EXPECT_EQ(ok("{% generation %}answer{% endgeneration %}"), "answer");
}

TEST(JinjaStatements, UnknownTagIsAClearError) {
  EXPECT_EQ(err("{% frobnicate %}"), "TemplateSyntaxError: Encountered unknown tag 'frobnicate'. (line 1, column 4)");
  EXPECT_TRUE(err("{% include 'x' %}").starts_with("TemplateSyntaxError: the 'include' tag is not supported"));
}

// ----- whitespace -----

TEST(JinjaWhitespace, TrimBlocksAndLstripBlocks) {
  // trim_blocks removes the newline after a block tag; lstrip_blocks the indentation before it
  EXPECT_EQ(ok("a\n  {% if true %}\n  b\n  {% endif %}\nc"), "a\n  b\nc");
  // not for {{ }}: indentation and newlines around expressions stay
  EXPECT_EQ(ok("a\n  {{ 'b' }}\nc"), "a\n  b\nc");
  // "+" turns lstrip_blocks / trim_blocks off for one tag
  EXPECT_EQ(ok("a\n  {%+ if true %}b{% endif %}"), "a\n  b");
  EXPECT_EQ(ok("{% if true +%}\nb{% endif %}"), "\nb");
}

TEST(JinjaWhitespace, MinusStripsAllWhitespace) {
  EXPECT_EQ(ok("a  \n {%- if true -%} \n b {%- endif %}"), "ab");
  EXPECT_EQ(ok("a {{- 'b' -}} c"), "abc");
  EXPECT_EQ(ok("a {#- comment -#} b"), "ab");
}

TEST(JinjaWhitespace, CommentsAndNewlines) {
  EXPECT_EQ(ok("a{# gone #}b"), "ab");
  EXPECT_EQ(ok("a\n{# gone #}\nb"), "a\nb");
  EXPECT_EQ(ok("x\r\ny\r\n"), "x\ny");  // \r\n normalized, one trailing newline dropped
}

// ----- values -----

TEST(JinjaValues, PythonPrinting) {
  EXPECT_EQ(ok("{{ true }} {{ none }} {{ 1.0 }} {{ 1e16 }} {{ 0.1 + 0.2 }} {{ 7 / 2 }}"),
            "True None 1.0 1e+16 0.30000000000000004 3.5");
  EXPECT_EQ(ok("{{ ['a', \"it's\"] }} {{ {'k': 'v'} }} {{ (1,) }}"), "['a', \"it's\"] {'k': 'v'} (1,)");
}

TEST(JinjaValues, UndefinedSemantics) {
  EXPECT_EQ(ok("[{{ missing }}]"), "[]");
  EXPECT_EQ(ok("{{ missing is defined }} {{ missing | default('d') }} {{ missing | length }}"), "False d 0");
  EXPECT_EQ(ok("{% for x in missing %}x{% endfor %}{% if missing %}y{% endif %}"), "");
  EXPECT_EQ(err("{{ missing.attr }}"), "UndefinedError: 'missing' is undefined (line 1, column 11)");
  EXPECT_EQ(err("{{ d.x.y }}", {{"d", json::object()}}), "UndefinedError: 'dict object' has no attribute 'x' (line 1, column 7)");
  EXPECT_TRUE(err("{{ missing + 1 }}").starts_with("UndefinedError"));
}

TEST(JinjaValues, ToJsonLikeJsonDumps) {
  json ctx = {{"t", {{"name", "f"}, {"é", {1, 2.5, nullptr, true}}}}};
  EXPECT_EQ(ok("{{ t | tojson }}", ctx), R"({"name": "f", "é": [1, 2.5, null, true]})");
  EXPECT_EQ(ok("{{ t | tojson(indent=2) }}", ctx),
            "{\n  \"name\": \"f\",\n  \"é\": [\n    1,\n    2.5,\n    null,\n    true\n  ]\n}");
  EXPECT_EQ(ok("{{ t | tojson(separators=(',', ':'), sort_keys=true) }}", ctx), R"({"name":"f","é":[1,2.5,null,true]})");
  EXPECT_EQ(ok("{{ 'é' | tojson(ensure_ascii=true) }}"), R"("\u00e9")");
}

TEST(JinjaValues, ContextKeysKeepTheirOrder) {
  json ctx = json::parse(R"({"tool": {"z": 1, "a": 2, "m": 3}})");
  EXPECT_EQ(ok("{{ tool | tojson }}", ctx), R"({"z": 1, "a": 2, "m": 3})");
}

TEST(JinjaValues, SandboxBlocksMutationAndDunders) {
  EXPECT_TRUE(err("{{ x.append(1) }}", {{"x", json::array()}}).starts_with("SecurityError"));
  EXPECT_TRUE(err("{{ ''.__class__ }}x{{ ''.__class__() }}").starts_with("SecurityError"));
  EXPECT_TRUE(err("{{ range(200000) | length }}").starts_with("OverflowError"));
}

TEST(JinjaValues, GlobalsAndClock) {
  RenderConfig config;
  config.now = [] { return make_time(2026, 11, 29, 8, 36, 42); };
  EXPECT_EQ(ok("{{ strftime_now('%Y-%m-%d %H:%M:%S %A %B') }}", json::object(), config),
            "2026-11-29 08:36:42 Sunday November");
  EXPECT_EQ(err("{{ raise_exception('bad input') }}"), "TemplateError: bad input (line 1, column 19)");
}

// ----- errors name their position -----

TEST(JinjaErrors, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(err("line one\n{% if x %}\n  {{ 1 + }}\n{% endif %}"),
            "TemplateSyntaxError: unexpected 'end of print statement' (line 3, column 10)");
  EXPECT_EQ(err("{% for x in y %}\n{% endif %}"),
            "TemplateSyntaxError: Encountered unknown tag 'endif'. Jinja was looking for the following tags: "
            "'endfor' or 'else'. The innermost block that needs to be closed is 'for'. (line 2, column 4)");
  EXPECT_EQ(err("{% if true %}\nno end"),
            "TemplateSyntaxError: Unexpected end of template. Jinja was looking for the following tags: 'elif' or "
            "'else' or 'endif'. The innermost block that needs to be closed is 'if'. (line 2, column 7)");
  EXPECT_EQ(err("ab\n  {{ 'é' ! 1 }}"), "TemplateSyntaxError: unexpected char '!' (line 2, column 10)");
  EXPECT_EQ(err("{# never closed"), "TemplateSyntaxError: Missing end of comment tag (line 1, column 1)");
  EXPECT_EQ(err("{% break %}"), "TemplateSyntaxError: 'break' outside loop (line 1, column 4)");
  EXPECT_EQ(err("{{ x | no_such_filter }}"), "TemplateAssertionError: No filter named 'no_such_filter'. (line 1, column 8)");
}

TEST(JinjaErrors, RuntimeErrorsNameLineAndColumn) {
  EXPECT_EQ(err("a\nb\n   {{ 1 // 0 }}"), "ZeroDivisionError: integer division or modulo by zero (line 3, column 9)");
  EXPECT_EQ(err("{% for m in msgs %}\n{{ m.content + 1 }}\n{% endfor %}", {{"msgs", {{{"content", "x"}}}}}),
            "TypeError: can only concatenate str (not \"int\") to str (line 2, column 14)");
}

TEST(JinjaErrors, InvalidUtf8TemplateIsRejected) {
  EXPECT_EQ(err("abc\xff"), "TemplateSyntaxError: the template is not valid UTF-8");
}

// ----- limits -----

TEST(JinjaLimits, LoopsThatRunTooLongAreStopped) {
  RenderConfig config;
  config.limits.max_steps = 100000;
  std::string e = err("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                      json::object(), config);
  EXPECT_TRUE(e.starts_with("StepLimitError")) << e;
}

TEST(JinjaLimits, DefaultBudgetStopsAQuadrillionIterations) {
  std::string e = err("{% for i in range(100000) %}{% for j in range(100000) %}{% for k in range(100000) %}"
                      "{% endfor %}{% endfor %}{% endfor %}");
  EXPECT_TRUE(e.starts_with("StepLimitError")) << e;
}

TEST(JinjaLimits, MacroRecursionIsStopped) {
  std::string e = err("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_TRUE(e.starts_with("RecursionError")) << e;
  // bounded recursion is fine
  EXPECT_EQ(ok("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}"), "54321");
}

TEST(JinjaLimits, RecursiveLoopDepthIsStopped) {
  json node = json::object();
  for (int i = 0; i < 120; ++i) node = json{{"c", json::array({node})}};
  std::string e = err("{% for n in [t] recursive %}{{ loop(n.c) }}{% endfor %}", {{"t", node}});
  EXPECT_TRUE(e.starts_with("RecursionError")) << e;
}

TEST(JinjaLimits, GiantOutputIsStopped) {
  RenderConfig config;
  config.limits.max_output_bytes = 1 << 20;
  std::string e = err("{% for i in range(10000) %}{{ 'x' * 1000 }}{% endfor %}", json::object(), config);
  EXPECT_TRUE(e.starts_with("OutputLimitError")) << e;
  // a single huge string is refused before it is built
  e = err("{{ 'x' * 1000000000000 }}");
  EXPECT_TRUE(e.starts_with("OutputLimitError")) << e;
  e = err("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}");
  EXPECT_TRUE(e.starts_with("OutputLimitError")) << e;
}

TEST(JinjaLimits, DeepNestingIsASyntaxErrorNotACrash) {
  std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_TRUE(err(deep).starts_with("TemplateSyntaxError: template nested too deeply")) << err(deep);
  std::string chain = "{{ 1";
  for (int i = 0; i < 5000; ++i) chain += " + 1";
  chain += " }}";
  EXPECT_TRUE(err(chain).starts_with("TemplateSyntaxError: expression nested too deeply"));
  std::string blocks;
  for (int i = 0; i < 1000; ++i) blocks += "{% if true %}";
  EXPECT_TRUE(err(blocks).starts_with("TemplateSyntaxError: template nested too deeply"));
  std::string nots = "{{ " + [] { std::string s; for (int i = 0; i < 5000; ++i) s += "not "; return s; }() + "x }}";
  EXPECT_TRUE(err(nots).starts_with("TemplateSyntaxError"));
}

TEST(JinjaLimits, DeeplyNestedValuesAreStopped) {
  std::string e = err("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}");
  EXPECT_TRUE(e.starts_with("RecursionError")) << e;
  e = err("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}");
  EXPECT_TRUE(e.starts_with("RecursionError")) << e;
}

// ----- parse once, render many -----

TEST(JinjaTemplate, ParseOnceRenderMany) {
  auto t = Template::parse("Hello {{ name }}!");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t->render({{"name", "Ann"}}), "Hello Ann!");
  EXPECT_EQ(*t->render({{"name", "Bob"}}), "Hello Bob!");
  auto bad = t->render(json::array());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(), "TypeError: the context must be a JSON object");
}

}  // namespace
}  // namespace kvasir::jinja

namespace kvasir::chat {
namespace {

TEST(ChatTemplate, DefaultTemplateIsChatMl) {
  nlohmann::ordered_json ctx = {
      {"messages", {{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Yo"}}}},
      {"add_generation_prompt", true}};
  auto r = render_chat_template(kDefaultChatTemplate, ctx);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(*r, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, PlainJsonOverloadSortsKeys) {
  nlohmann::json ctx = {{"t", {{"z", 1}, {"a", 2}}}};
  auto r = render_chat_template("{{ t | tojson }}", ctx);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(*r, R"({"a": 2, "z": 1})");
}

TEST(ChatTemplate, ErrorsComeBackAsResults) {
  auto r = render_chat_template("{% if messages[0].role == 'system' %}{{ raise_exception('no system') }}{% endif %}",
                                nlohmann::ordered_json{{"messages", {{{"role", "system"}, {"content", ""}}}}});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.error().starts_with("TemplateError: no system")) << r.error();
}

}  // namespace
}  // namespace kvasir::chat
