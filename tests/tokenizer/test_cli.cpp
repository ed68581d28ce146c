// `kvasir tokenize` / `kvasir detokenize`, run as a process when the binary has been built.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "tokenizer_test_util.h"

namespace kvasir {
namespace {

struct ProcessResult {
  int code;
  std::string out;
};

ProcessResult run(const std::string& args) {
  const std::string cmd = std::string(KVASIR_BIN_DIR) + "/kvasir " + args + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  ProcessResult r{-1, ""};
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(std::string(KVASIR_BIN_DIR) + "/kvasir")) GTEST_SKIP() << "kvasir not built";
    if (!std::filesystem::exists(test::vocab_path("llama-spm"))) GTEST_SKIP() << "vocabularies not available";
    spm_ = "-m " + test::vocab_path("llama-spm");
    bpe_ = "-m " + test::vocab_path("llama-bpe");
  }
  std::string spm_, bpe_;
};

TEST_F(Cli, Tokenize) {
  EXPECT_EQ(run("tokenize " + spm_ + " --text 'Hello world'").out, "1 15043 3186\n");
  EXPECT_EQ(run("tokenize " + spm_ + " --text 'Hello world' --json").out, "[1,15043,3186]\n");
  EXPECT_EQ(run("tokenize " + spm_ + " --text 'Hello world' --no-bos").out, "15043 3186\n");
  EXPECT_EQ(run("tokenize " + bpe_ + " --text '<|begin_of_text|>Hi' --no-bos").out, "128000 13347\n");
  const ProcessResult plain = run("tokenize " + bpe_ + " --text '<|begin_of_text|>Hi' --no-bos --no-special");
  EXPECT_EQ(plain.code, 0);
  EXPECT_EQ(plain.out.find("128000"), std::string::npos);
}

TEST_F(Cli, Detokenize) {
  EXPECT_EQ(run("detokenize " + bpe_ + " --ids 128000,9906,1917").out, "<|begin_of_text|>Hello world");
  EXPECT_EQ(run("detokenize " + spm_ + " --ids 1,15043,3186 --skip-special").out, "Hello world");
}

TEST_F(Cli, Errors) {
  EXPECT_EQ(run("detokenize " + spm_ + " --ids 1,99999").code, 1);
  EXPECT_EQ(run("detokenize " + spm_ + " --ids 1,x").code, 1);
  EXPECT_EQ(run("tokenize " + spm_).code, 1);
  EXPECT_EQ(run("tokenize -m /nonexistent.gguf --text hi").code, 1);
  EXPECT_EQ(run("tokenize " + spm_ + " --text a --file b").code, 1);
}

}  // namespace
}  // namespace kvasir
