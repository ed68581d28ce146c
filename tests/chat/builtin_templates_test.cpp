// The built-in family templates render what the families' published templates render (the
// expected renderings in ../shared/templates/*.cases.json, for the plain-text cases each family
// supports), and the chooser picks a family from the architecture and the vocabulary's markers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/builtin_templates.h"
#include "chat/chat_template.h"

namespace kvasir::chat {
namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

fs::path templates_dir() { return fs::path(KVASIR_SHARED_DIR) / "templates"; }

// Plain-text conversations without tools, whose reference rendering succeeded.
bool plain_case(const ordered_json& c) {
  if (c["expected"].is_null() || !c["tools"].is_null()) return false;
  for (const auto& m : c["messages"])
    if (!m["content"].is_string() || m.contains("tool_calls") || m["role"] == "tool") return false;
  return true;
}

bool has_system(const ordered_json& c) { return c["messages"].size() > 0 && c["messages"][0]["role"] == "system"; }

// Renders every plain case of `reference` (a file stem) with built-in `name` and compares.
// `with_system`: only cases with / without a leading system message (some references inject a
// default system prompt of their own, or refuse one).
int check_against(const std::string& name, const std::string& reference, int with_system) {
  const fs::path path = templates_dir() / (reference + ".cases.json");
  if (!fs::exists(path)) return -1;
  std::ifstream in(path);
  const ordered_json cases = ordered_json::parse(in);
  const BuiltinTemplate* t = find_builtin_template(name);
  EXPECT_NE(t, nullptr);
  int checked = 0;
  for (const auto& c : cases) {
    if (!plain_case(c)) continue;
    if (with_system >= 0 && has_system(c) != bool(with_system)) continue;
    ordered_json context = c;
    for (const char* k : {"name", "expected", "error"}) context.erase(k);
    auto out = render_chat_template(t->source, context);
    EXPECT_TRUE(out.ok()) << name << " / " << c["name"] << ": " << out.error();
    if (!out.ok()) continue;
    EXPECT_EQ(*out, c["expected"].get<std::string>()) << name << " vs " << reference << " case " << c["name"];
    ++checked;
  }
  return checked;
}

}  // namespace

TEST(BuiltinTemplates, RenderLikeThePublishedTemplates) {
  if (!fs::exists(templates_dir())) GTEST_SKIP() << "no ../shared/templates";
  EXPECT_GT(check_against("gemma", "google-gemma-2-2b-it", -1), 0);
  EXPECT_GT(check_against("phi3", "microsoft-Phi-3.5-mini-instruct", -1), 0);
  EXPECT_GT(check_against("mistral", "mistralai-Mistral-Nemo-Instruct-2407", -1), 0);
  // Qwen 2.5 adds its own default system prompt; with an explicit one it is plain ChatML.
  EXPECT_GT(check_against("chatml", "Qwen-Qwen2.5-7B-Instruct", 1), 0);
}

TEST(BuiltinTemplates, GemmaFoldsTheSystemMessageIntoTheFirstTurn) {
  const ordered_json ctx = {{"messages", {{{"role", "system"}, {"content", "Be brief."}},
                                          {{"role", "user"}, {"content", "Hi"}},
                                          {{"role", "assistant"}, {"content", "Hello."}},
                                          {{"role", "user"}, {"content", "Bye"}}}},
                            {"add_generation_prompt", true}, {"bos_token", "<bos>"}, {"eos_token", "<eos>"}};
  auto out = render_chat_template(find_builtin_template("gemma")->source, ctx);
  ASSERT_TRUE(out.ok()) << out.error();
  EXPECT_EQ(*out,
            "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
}

TEST(BuiltinTemplates, Llama3AndLlama2Formats) {
  const ordered_json ctx = {{"messages", {{{"role", "system"}, {"content", "S"}}, {{"role", "user"}, {"content", "U"}},
                                          {{"role", "assistant"}, {"content", "A"}}}},
                            {"add_generation_prompt", false}, {"bos_token", "<s>"}, {"eos_token", "</s>"}};
  auto l3 = render_chat_template(find_builtin_template("llama3")->source, ctx);
  ASSERT_TRUE(l3.ok()) << l3.error();
  EXPECT_EQ(*l3, "<s><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>"
                 "\n\nU<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|>");
  auto l2 = render_chat_template(find_builtin_template("llama2")->source, ctx);
  ASSERT_TRUE(l2.ok()) << l2.error();
  EXPECT_EQ(*l2, "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A </s>");
}

TEST(BuiltinTemplates, EveryTemplateRendersAnEmptyAndAPlainConversation) {
  for (const auto& t : builtin_templates()) {
    for (const ordered_json& msgs : {ordered_json::array(), ordered_json{{{"role", "user"}, {"content", " x "}}}}) {
      const ordered_json ctx = {{"messages", msgs}, {"add_generation_prompt", true}, {"bos_token", ""}, {"eos_token", ""}};
      auto out = render_chat_template(t.source, ctx);
      EXPECT_TRUE(out.ok()) << t.name << ": " << out.error();
    }
  }
}

TEST(BuiltinTemplates, ChooserReadsArchitectureAndMarkers) {
  auto vocab = [](std::set<std::string> specials) {
    return [specials](std::string_view t) { return specials.count(std::string(t)) > 0; };
  };
  EXPECT_EQ(choose_builtin_template("gemma3", vocab({})).name, "gemma");
  EXPECT_EQ(choose_builtin_template("llama", vocab({"<start_of_turn>", "<end_of_turn>"})).name, "gemma");
  EXPECT_EQ(choose_builtin_template("llama", vocab({"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"})).name,
            "llama3");
  EXPECT_EQ(choose_builtin_template("qwen2", vocab({"<|im_start|>", "<|im_end|>"})).name, "chatml");
  // ChatML only where its markers are real tokens: a qwen2 file without them is not ChatML.
  EXPECT_EQ(choose_builtin_template("qwen2", vocab({"<|im_start|>"})).name, "plain");
  EXPECT_EQ(choose_builtin_template("phi3", vocab({})).name, "phi3");
  EXPECT_EQ(choose_builtin_template("llama", vocab({"<s>", "</s>", "[INST]", "[/INST]"})).name, "mistral");
  EXPECT_EQ(choose_builtin_template("llama", vocab({"<s>", "</s>"})).name, "llama2");
  EXPECT_EQ(choose_builtin_template("mamba", vocab({})).name, "plain");
}

}  // namespace kvasir::chat
