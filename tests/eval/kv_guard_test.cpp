// What a quantized KV cache costs, and the guard that limits it: on a real fixture, Q8_0 KV moves
// the next-token distributions less than Q4_0 (and both more than nothing), and the guard keeps
// the budget: 0 leaves every layer in F16, a loose one quantizes all, one in between falls back
// some layers and lands under it.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "eval/kv_guard.h"
#include "eval/perplexity.h"

using namespace kvasir;

namespace {

std::string shared(const std::string& rel) { return std::string(KVASIR_SHARED_DIR) + "/" + rel; }

std::vector<int32_t> random_tokens(size_t n, int32_t vocab) {
  std::mt19937 rng(4);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % uint32_t(vocab));
  return t;
}

}  // namespace

TEST(KvQuant, CostsLessAtEightBitsThanAtFour) {
  const std::string path = shared("models/fixture-gemma3-f32.gguf");
  if (!std::ifstream(path)) GTEST_SKIP() << "../shared is not available";
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok());
  const auto tokens = random_tokens(256, int32_t((*m)->config().n_vocab));
  auto kld = [&](DType t) {
    auto r = eval::evaluate(**m, m->get(), tokens, {.n_ctx = 128, .num_threads = 2, .kv_type = t});
    EXPECT_TRUE(r.ok()) << r.error();
    return r->kl->mean_kld();
  };
  const double q8 = kld(DType::Q8_0), q4 = kld(DType::Q4_0), f16 = kld(DType::F16);
  std::printf("KV mean KLD against F16: q8_0 %.3g, q4_0 %.3g\n", q8, q4);
  EXPECT_EQ(f16, 0.0);
  EXPECT_GT(q8, 0.0);
  EXPECT_LT(q8, q4);
}

TEST(KvGuard, KeepsTheBudget) {
  const std::string path = shared("models/fixture-gemma3-f32.gguf");
  if (!std::ifstream(path)) GTEST_SKIP() << "../shared is not available";
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok());
  const int64_t L = (*m)->config().n_layers;
  const auto tokens = random_tokens(200, int32_t((*m)->config().n_vocab));
  eval::KvGuardOptions o{.type = DType::Q4_0, .max_kld = 1e9, .n_ctx = 128, .num_threads = 2};
  auto loose = eval::kv_guard(**m, tokens, o);
  ASSERT_TRUE(loose.ok()) << loose.error();
  EXPECT_EQ(loose->quantized_layers, L);
  EXPECT_GT(loose->kld_all, 0.0);
  EXPECT_EQ(loose->kld, loose->kld_all);
  o.max_kld = 0;
  auto strict = eval::kv_guard(**m, tokens, o);
  ASSERT_TRUE(strict.ok());
  EXPECT_EQ(strict->quantized_layers, 0);
  EXPECT_EQ(strict->kld, 0.0);
  for (DType t : strict->layer_types) EXPECT_EQ(t, DType::F16);
  o.max_kld = loose->kld_all / 2;
  auto middle = eval::kv_guard(**m, tokens, o);
  ASSERT_TRUE(middle.ok());
  EXPECT_LE(middle->kld, o.max_kld);
  EXPECT_LT(middle->quantized_layers, L);
  int64_t q = 0;
  for (DType t : middle->layer_types) q += t == DType::Q4_0;
  EXPECT_EQ(q, middle->quantized_layers);
  EXPECT_FALSE(eval::kv_guard(**m, std::vector<int32_t>(10, 1), o).ok());  // shorter than its chunk
}
