// Differential tests against Python Jinja2: tests/chat/jinja_semantics.json holds a few hundred
// snippets (statements, filters, tests, methods, whitespace control, printing, errors) with the
// output Python Jinja2 gave for them, configured as Hugging Face configures it. Regenerate it with
// tests/chat/gen_jinja_semantics.py. A snippet the reference rejected must fail here with the same
// Python exception class, except for the few documented deviations below.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "chat/jinja/jinja.h"

namespace kvasir::jinja {
namespace {

struct Snippet {
  std::string tmpl;
  nlohmann::ordered_json context;
  nlohmann::ordered_json expected;  // string, or null when `error` is set
  std::string error;                // Python exception class
  std::string message;
};

std::vector<Snippet> load() {
  std::ifstream f(std::string(KVASIR_SOURCE_DIR) + "/tests/chat/jinja_semantics.json", std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<Snippet> out;
  if (ss.str().empty()) return out;
  auto doc = nlohmann::ordered_json::parse(ss.str());
  for (const auto& c : doc["cases"]) {
    Snippet s;
    s.tmpl = c["template"].get<std::string>();
    s.context = doc["context"];
    if (c.contains("context")) {
      for (const auto& [k, v] : c["context"].items()) s.context[k] = v;
    }
    s.expected = c["expected"];
    if (c.contains("error")) s.error = c["error"].get<std::string>();
    if (c.contains("message")) s.message = c["message"].get<std::string>();
    out.push_back(std::move(s));
  }
  return out;
}

const std::vector<Snippet>& snippets() {
  static const std::vector<Snippet> all = load();
  return all;
}

// Where we knowingly raise a different exception class than Python (the render fails either way).
const std::map<std::string, std::string>& deviations() {
  static const std::map<std::string, std::string> d = {
      // Python compiles `break` outside a loop to a Python SyntaxError; we report it while parsing.
      {"SyntaxError", "TemplateSyntaxError"},
      // {% include %} fails in Python only when rendering (no loader); we reject it while parsing.
      {"TypeError/include", "TemplateSyntaxError"},
  };
  return d;
}

// Python prints objects with their address ("<generator object select_or_reject at 0x7f...>"); we
// print the same without the function name and address.
std::string without_addresses(const std::string& s) {
  static const std::regex generator("<generator object [A-Za-z_]+ at 0x[0-9a-f]+>");
  static const std::regex address(" at 0x[0-9a-f]+>");
  return std::regex_replace(std::regex_replace(s, generator, "<generator object>"), address, ">");
}

class JinjaSemantics : public ::testing::TestWithParam<size_t> {};

TEST_P(JinjaSemantics, MatchesPythonJinja2) {
  const Snippet& s = snippets()[GetParam()];
  SCOPED_TRACE("template: " + s.tmpl);
  RenderConfig config;
  config.now = [] { return make_time(2026, 11, 29, 8, 36, 42); };
  auto out = render(s.tmpl, s.context, config);
  if (s.expected.is_string()) {
    ASSERT_TRUE(out.ok()) << out.error();
    EXPECT_EQ(*out, without_addresses(s.expected.get<std::string>()));
    return;
  }
  ASSERT_FALSE(out.ok()) << "Python raised " << s.error << ": " << s.message << "\nwe rendered: " << *out;
  std::string type = out.error().substr(0, out.error().find(':'));
  if (std::getenv("JINJA_SHOW_MESSAGES")) {
    std::fprintf(stderr, "ours:   %s\npython: %s: %s\n\n", out.error().c_str(), s.error.c_str(), s.message.c_str());
  }
  std::string want = s.error;
  if (s.error == "TypeError" && s.tmpl.find("include") != std::string::npos) want = deviations().at("TypeError/include");
  if (auto it = deviations().find(s.error); it != deviations().end()) want = it->second;
  EXPECT_EQ(type, want) << "ours: " << out.error() << "\nPython: " << s.error << ": " << s.message;
}

INSTANTIATE_TEST_SUITE_P(Snippets, JinjaSemantics, ::testing::Range<size_t>(0, snippets().size()));
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(JinjaSemantics);

TEST(JinjaSemanticsData, IsPresent) { EXPECT_GE(snippets().size(), 300u); }

}  // namespace
}  // namespace kvasir::jinja
