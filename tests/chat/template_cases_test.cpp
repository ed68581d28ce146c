// Every case of every ../shared/templates/*.cases.json renders byte-identical to its `expected`
// (produced by Python Jinja2 the way Hugging Face applies templates), or fails when the reference failed.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/jinja/config.h"

namespace kvasir::chat {
namespace {

namespace fs = std::filesystem;

struct TemplateCase {
  std::string model;     // file stem, e.g. Qwen-Qwen3-0.6B
  std::string name;      // case name
  std::string template_source;
  nlohmann::ordered_json context;
  nlohmann::ordered_json expected;  // string, or null when `error` is set
  std::string error;
};

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

fs::path templates_dir() { return fs::path(KVASIR_SHARED_DIR) / "templates"; }

std::vector<TemplateCase> load_cases() {
  std::vector<TemplateCase> out;
  std::error_code ec;
  if (!fs::is_directory(templates_dir(), ec)) return out;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(templates_dir())) {
    std::string name = entry.path().filename().string();
    if (name.size() > 11 && name.ends_with(".cases.json")) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    std::string stem = file.filename().string();
    stem.resize(stem.size() - std::string(".cases.json").size());
    std::string source = read_file(file.parent_path() / (stem + ".jinja"));
    auto cases = nlohmann::ordered_json::parse(read_file(file));
    for (const auto& c : cases) {
      TemplateCase tc;
      tc.model = stem;
      tc.name = c.value("name", "");
      tc.template_source = source;
      for (const auto& [k, v] : c.items()) {
        if (k != "name" && k != "expected" && k != "error") tc.context[k] = v;
      }
      tc.expected = c["expected"];
      if (c.contains("error") && c["error"].is_string()) tc.error = c["error"].get<std::string>();
      out.push_back(std::move(tc));
    }
  }
  return out;
}

const std::vector<TemplateCase>& all_cases() {
  static const std::vector<TemplateCase> cases = load_cases();
  return cases;
}

RenderOptions reference_options() {
  RenderOptions o;
  o.now = [] { return jinja::make_time(2026, 11, 29, 8, 36, 42); };
  return o;
}

class TemplateCaseTest : public ::testing::TestWithParam<size_t> {};

TEST_P(TemplateCaseTest, MatchesPythonJinja2) {
  const TemplateCase& tc = all_cases()[GetParam()];
  SCOPED_TRACE(tc.model + " / " + tc.name);
  auto out = render_chat_template(tc.template_source, tc.context, reference_options());
  if (tc.expected.is_string()) {
    ASSERT_TRUE(out.ok()) << out.error();
    EXPECT_EQ(*out, tc.expected.get<std::string>());
  } else {
    ASSERT_FALSE(out.ok()) << "expected an error like: " << tc.error << "\ngot output: " << *out;
    // The reference message is "TemplateError: <message>"; ours adds the template position.
    EXPECT_EQ(out.error().rfind(tc.error, 0), 0u) << "error was: " << out.error();
  }
}

std::string case_label(const ::testing::TestParamInfo<size_t>& info) {
  const TemplateCase& tc = all_cases()[info.param];
  std::string s = tc.model + "__" + tc.name;
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return s;
}

std::vector<size_t> case_indices() {
  std::vector<size_t> idx(all_cases().size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  return idx;
}

INSTANTIATE_TEST_SUITE_P(SharedTemplates, TemplateCaseTest, ::testing::ValuesIn(case_indices()), case_label);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TemplateCaseTest);

TEST(TemplateCases, SharedCasesArePresent) {
  // Nine published templates with 39 cases at the time of writing; guard against silently testing nothing.
  EXPECT_GE(all_cases().size(), 39u) << "no cases found under " << templates_dir();
}

}  // namespace
}  // namespace kvasir::chat
