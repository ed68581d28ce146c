// `kvasir chat-template` end to end. The binary links every layer; when it has not been built (a
// build of test_chat alone) these tests skip.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

namespace fs = std::filesystem;

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

CliRun kvasir(const std::string& args) {
  CliRun r;
  fs::path err_file = fs::temp_directory_path() / ("kvasir_chat_cli_" + std::to_string(::getpid()) + ".err");
  std::string cmd = std::string(KVASIR_BIN_DIR) + "/kvasir chat-template " + args + " 2>" + err_file.string();
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = slurp(err_file);
  fs::remove(err_file);
  return r;
}

class ChatTemplateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(fs::path(KVASIR_BIN_DIR) / "kvasir")) GTEST_SKIP() << "kvasir binary not built";
  }
  std::string templates = std::string(KVASIR_SHARED_DIR) + "/templates/";
};

TEST_F(ChatTemplateCli, RendersACaseFromATemplateFile) {
  CliRun r = kvasir("--template " + templates + "ibm-granite-granite-3.3-2B-Instruct.jinja --case " + templates +
                 "ibm-granite-granite-3.3-2B-Instruct.cases.json --case-name single-user --now '2026-11-29 08:36:42'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "<|start_of_role|>system<|end_of_role|>Knowledge Cutoff Date: April 2024. Today's Date: November 29, 2026. "
            "You are Granite, developed by IBM. You are a helpful AI assistant.<|end_of_text|>\n"
            "<|start_of_role|>user<|end_of_role|>Hello! How are you?<|end_of_text|>\n"
            "<|start_of_role|>assistant<|end_of_role|>");
}

TEST_F(ChatTemplateCli, TemplateErrorExitsOneWithTheMessage) {
  CliRun r = kvasir("--template " + templates + "google-gemma-2-2b-it.jinja --case " + templates +
                 "google-gemma-2-2b-it.cases.json --case-name system-user");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("TemplateError: System role not supported"), std::string::npos) << r.err;
}

TEST_F(ChatTemplateCli, ModelTemplateAndSpecialTokensComeFromTheGguf) {
  // Phi-3's vocabulary file carries a chat template that starts with bos_token (<s>, token 1 of its list).
  fs::path c = fs::temp_directory_path() / ("kvasir_chat_case_" + std::to_string(::getpid()) + ".json");
  std::ofstream(c) << R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}],
                         "add_generation_prompt": false})";
  CliRun r = kvasir("-m " + std::string(KVASIR_SHARED_DIR) + "/models/vocab/ggml-vocab-phi-3.gguf --case " + c.string());
  fs::remove(c);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<s><|user|>\nHi<|end|>\n<|assistant|>\nYo<|end|>\n");
}

// stories260K has no template and a Llama 2 vocabulary (<s>, </s>, no chat markers): the family's
// built-in Llama 2 format, not ChatML (its markers would be split into text by this vocabulary).
TEST_F(ChatTemplateCli, ModelWithoutTemplateUsesItsFamilyTemplate) {
  fs::path c = fs::temp_directory_path() / ("kvasir_chat_case2_" + std::to_string(::getpid()) + ".json");
  std::ofstream(c) << R"({"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true})";
  CliRun r = kvasir("-m " + std::string(KVASIR_SHARED_DIR) + "/models/stories260K.gguf --case " + c.string());
  fs::remove(c);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<s>[INST] Hi [/INST]");
}

TEST_F(ChatTemplateCli, NeedsExactlyOneTemplateSource) {
  CliRun r = kvasir("--case /nonexistent.json");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("exactly one of -m"), std::string::npos) << r.err;
}

}  // namespace
