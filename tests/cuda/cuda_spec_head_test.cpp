// Speculation with a distilled EAGLE-style head on the CUDA runner. The head reads the final
// hidden states the runner returns for the rows that chose each request's latest token (the CUDA
// runner returns the same rows as the CPU runner), so on stories260K greedy tokens equal the plain
// CUDA engine's and the head's first drafts are mostly accepted, as on the CPU
// (tests/engine/eagle_draft_test.cpp). Skipped without a GPU or ../shared.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "backends/engine_factory.h"
#include "cuda/cuda_runner.h"
#include "engine/engine.h"
#include "support/eagle_head.h"
#include "support/engine_runs.h"

using namespace kvasir;
using namespace kvasir::engine;
using kvasir::test_support::run_all;

namespace {

std::string shared_path(const std::string& rel) {
  const char* env = std::getenv("KVASIR_SHARED_DIR");
  return std::string(env && *env ? env : KVASIR_SHARED_DIR) + "/" + rel;
}

TEST(CudaSpecHead, TokensEqualThePlainEngineAndDraftsAreKept) {
  std::string why;
  if (cuda::device_count(&why) == 0) GTEST_SKIP() << why;
  const std::string path = shared_path("models/stories260K.gguf");
  std::ifstream in(shared_path("golden/perplexity/stories-sampled.txt"), std::ios::binary);
  if (!std::filesystem::exists(path) || !in) GTEST_SKIP() << "no stories260K or its sampled text";
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.error();
  auto tok = Tokenizer::from_gguf((*model)->gguf());
  ASSERT_TRUE(tok.ok());
  const std::string head_file = ::testing::TempDir() + "/kvasir_cuda_head_" + std::to_string(getpid()) + ".gguf";
  auto st = test_support::distill_story_head(**model, tok->encode(text), head_file);
  ASSERT_TRUE(st.ok()) << st.error();

  const std::vector<GenerationParams> reqs = test_support::story_requests(*tok);
  auto engine = [&](const SpecOptions& spec) {
    EngineOptions o{.max_batch_tokens = 64, .max_seqs = 4, .num_threads = 2};
    o.spec = spec;
    auto c = backends::create_engine_core(**model, *tok, {.engine = o, .device = 0, .kv = {.n_blocks = 64}});
    EXPECT_TRUE(c.ok()) << c.error();
    return c.ok() ? std::move(*c) : nullptr;
  };
  auto plain = engine({});
  ASSERT_TRUE(plain);
  const auto ref = run_all(*plain, reqs);
  auto spec = engine({.method = SpecMethod::head, .max_k = 1, .adaptive = false, .head_file = head_file});
  std::filesystem::remove(head_file);
  ASSERT_TRUE(spec);
  const auto got = run_all(*spec, reqs);
  EXPECT_EQ(got, ref);
  // The CPU test's bars (a distilled head's first drafts > 40% kept; an untrained one's < 15%):
  // hidden states that were wrong or of other rows would keep about the untrained share.
  const EngineStats s = spec->stats();
  EXPECT_GT(s.spec_draft_tokens, 100);
  const double kept = double(s.spec_accepted_tokens) / double(std::max<int64_t>(s.spec_draft_tokens, 1));
  std::printf("first-position acceptance on the CUDA runner: %.1f%%\n", 100 * kept);
  EXPECT_GT(kept, 0.4);
  EXPECT_EQ(s.kv_blocks_used, 0);
}

}  // namespace
