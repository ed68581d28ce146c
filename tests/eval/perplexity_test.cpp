// Perplexity and KL divergence: the statistics on hand-computed cases, then llama.cpp's own
// figures for the shared stories260K models (../shared/golden/perplexity, made by
// llama-perplexity) reproduced within 1% — the tolerance the quantization issue sets; measured
// deviations are 0.0% (F32 PPL), 0.2% (q4_0 mean KLD) and 0.0% (q4_0 same top-1).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>

#include "eval/perplexity.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

using namespace kvasir;
using namespace kvasir::eval;

TEST(Perplexity, ChunksScoreTheSecondHalf) {
  const ChunkPlan p = plan_chunks(13667, 128);
  EXPECT_EQ(p.n_chunks, 106);
  EXPECT_EQ(p.first, 64);
  EXPECT_EQ(p.scored_per_chunk(), 63);  // rows 64..126 predict tokens 65..127
  EXPECT_EQ(plan_chunks(100, 128).n_chunks, 0);
}

TEST(Perplexity, StatisticsByHand) {
  // p = 1/4, 3/4, up to ln 3 rounded to a float (2^-24 relative: the 1e-7 tolerance below).
  const std::vector<float> logits = {0.f, std::log(3.f)};
  EXPECT_NEAR(log_prob(logits, 1), std::log(0.75), 1e-7);
  PerplexityStats s;
  s.add(std::log(2.0));
  s.add(std::log(8.0));
  EXPECT_NEAR(s.ppl(), 4.0, 1e-12);  // exp(mean(ln 2, ln 8))
  // KL(base || model) for base p = (1/2, 1/2), model q = (1/4, 3/4).
  KlStats k;
  const std::vector<float> base = {0.f, 0.f};
  k.add(base, logits, 0);
  EXPECT_NEAR(k.mean_kld(), 0.5 * std::log(0.5 / 0.25) + 0.5 * std::log(0.5 / 0.75), 1e-7);
  EXPECT_NEAR(k.mean_delta_p(), 0.25 - 0.5, 1e-7);
  k.add(base, base, 1);  // the same distribution: no divergence
  EXPECT_EQ(k.kld_quantile(0.0), 0.0);
  EXPECT_DOUBLE_EQ(k.same_top1(), 0.5);  // argmax 1 vs 0 (ties go to the first), then equal
}

namespace {
std::string shared(const std::string& rel) { return std::string(KVASIR_SHARED_DIR) + "/" + rel; }
}  // namespace

TEST(Perplexity, ReproducesLlamaCppOnTheSharedModels) {
  std::ifstream in(shared("golden/perplexity/stories-sampled.txt"));
  if (!in) GTEST_SKIP() << "../shared is not available";
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto f32 = Model::load(shared("models/stories260K.gguf"));
  auto q4 = Model::load(shared("models/stories260K-q4_0.gguf"));
  ASSERT_TRUE(f32.ok() && q4.ok());
  auto tok = Tokenizer::from_gguf((*f32)->gguf());
  ASSERT_TRUE(tok.ok());
  const auto tokens = tok->encode(text);
  const EvalOptions o{.n_ctx = 128, .num_threads = 2, .bos = tok->bos()};
  auto base = evaluate(**f32, nullptr, tokens, o);
  ASSERT_TRUE(base.ok()) << base.error();
  EXPECT_EQ(base->plan.n_chunks, 106);
  EXPECT_NEAR(base->ppl.ppl(), 2.9267, 0.01 * 2.9267);
  auto kl = evaluate(**q4, f32->get(), tokens, o);
  ASSERT_TRUE(kl.ok()) << kl.error();
  EXPECT_NEAR(kl->ppl.ppl(), 3.0954, 0.01 * 3.0954);
  EXPECT_NEAR(kl->kl->mean_kld(), 0.0597, 0.01 * 0.0597);
  EXPECT_NEAR(100 * kl->kl->same_top1(), 88.54, 0.01 * 88.54);
  EXPECT_NEAR(kl->kl->base_ppl().ppl(), base->ppl.ppl(), 1e-9);  // the base side equals its own run
}
