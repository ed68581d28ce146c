// End to end against llama.cpp on the text goldens (../shared/golden/models/*.text.json):
// tokenize the prompt, generate greedily, detokenize — token for token and byte for byte.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include "backends/runner_factory.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

using namespace kvasir;

namespace {

std::string shared_path(const std::string& rel) { return std::string(KVASIR_SHARED_DIR) + "/" + rel; }

class TextGolden : public ::testing::TestWithParam<std::string> {};

}  // namespace

// stories260K (F32) must reproduce llama.cpp's free-running greedy text exactly. The quantized
// copies are checked step by step: llama.cpp's CPU flash attention accumulates V in F16 where
// kvasir uses F32, and with 8-bit activations that tiny difference can flip a rounding step and
// then a near-tie, after which free-running texts part ways (emulating the F16 accumulation makes
// stories260K-q8_0 match exactly too; measured, see docs/ARCHITECTURE.md).
TEST_P(TextGolden, GreedyTextMatchesLlamaCpp) {
  const std::string name = GetParam();
  const bool free_running = name == "stories260K";
  auto model = Model::load(shared_path("models/" + name + ".gguf"));
  ASSERT_TRUE(model.ok()) << model.error();
  auto tok = Tokenizer::from_gguf((*model)->gguf());
  ASSERT_TRUE(tok.ok()) << tok.error();
  std::ifstream in(shared_path("golden/models/" + name + ".text.json"));
  const auto golden = nlohmann::json::parse(in);
  const int64_t V = (*model)->config().n_vocab;
  int cases = 0;
  for (const auto& c : golden["cases"]) {
    const std::string prompt = c["prompt"];
    SCOPED_TRACE(prompt);
    const auto ids = tok->encode(prompt, {.add_special = true, .parse_special = false});
    ASSERT_EQ(ids, c["prompt_ids"].get<std::vector<int32_t>>());
    const auto greedy = c["greedy_ids"].get<std::vector<int32_t>>();
    auto session = backends::create_session(**model, {.n_ctx = 512, .n_threads = 2});
    ASSERT_TRUE(session.ok());
    std::vector<float> last;
    auto keep = [&](int64_t, const float* l) { last.assign(l, l + V); };
    ASSERT_TRUE((*session)->eval(ids, false, keep).ok());
    std::vector<int32_t> got;
    StreamDecoder stream(*tok, /*skip_special=*/false, /*continuation=*/true);
    std::string streamed;
    if (free_running) {
      while (got.size() < greedy.size()) {
        got.push_back(argmax(last));
        streamed += stream.push(got.back());
        if (tok->is_eog(got.back())) break;
        const int32_t t[1] = {got.back()};
        ASSERT_TRUE((*session)->eval(t, false, keep).ok());
      }
    } else {
      // Teacher-forced: after each golden token our argmax is the next golden token, unless our
      // top two are within 2% of the logits' rms (a numerical tie either engine may break).
      for (int32_t next : greedy) {
        const int32_t mine = argmax(last);
        double rms = 0;
        for (float x : last) rms += double(x) * x;
        rms = std::sqrt(rms / double(last.size()));
        if (mine != next) EXPECT_LE(last[size_t(mine)] - last[size_t(next)], 0.02 * rms) << "step " << got.size();
        got.push_back(next);
        streamed += stream.push(next);
        const int32_t t[1] = {next};
        ASSERT_TRUE((*session)->eval(t, false, keep).ok());
      }
    }
    streamed += stream.flush();
    EXPECT_EQ(got, greedy);
    if (!c["greedy_text"].is_null()) {
      std::string pieces;  // llama.cpp's text is the generated tokens' pieces, concatenated
      for (int32_t id : greedy) pieces += tok->piece(id);
      EXPECT_EQ(pieces, c["greedy_text"].get<std::string>());
      EXPECT_EQ(streamed, c["greedy_text"].get<std::string>());
    }
    ++cases;
  }
  EXPECT_GT(cases, 0);
}

INSTANTIATE_TEST_SUITE_P(Stories, TextGolden, ::testing::Values("stories260K", "stories260K-q8_0", "stories260K-q4_0"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });
