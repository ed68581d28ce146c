// Token-exact agreement with llama.cpp on ../shared/golden/tokenizer/<vocab>.json.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer_test_util.h"

namespace kvasir {
namespace {

std::string show(const std::vector<int32_t>& ids) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < ids.size(); ++i) s << (i ? ", " : "") << ids[i];
  return s.str() + "]";
}

class GoldenTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTokenizer, MatchesLlamaCpp) {
  const std::string name = GetParam();
  const std::string golden = test::shared_dir() + "/golden/tokenizer/" + name + ".json";
  std::ifstream in(golden);
  if (!in) GTEST_SKIP() << "golden file not available: " << golden;
  KV_REQUIRE_VOCAB(tok, name);
  const nlohmann::json cases = nlohmann::json::parse(in);
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const auto want = c.at("ids").get<std::vector<int32_t>>();
    const auto want_bos = c.at("ids_with_bos").get<std::vector<int32_t>>();
    const auto got = tok->encode(text, {.add_special = false, .parse_special = true});
    const auto got_bos = tok->encode(text, {.add_special = true, .parse_special = true});
    EXPECT_EQ(got, want) << name << " text=" << nlohmann::json(text).dump() << "\n got  " << show(got)
                         << "\n want " << show(want);
    EXPECT_EQ(got_bos, want_bos) << name << " (with BOS) text=" << nlohmann::json(text).dump();
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, GoldenTokenizer,
                         ::testing::Values("llama-spm", "phi-3", "stories260K", "llama-bpe", "qwen2", "gpt-2",
                                           "deepseek-llm", "starcoder", "falcon"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace kvasir
