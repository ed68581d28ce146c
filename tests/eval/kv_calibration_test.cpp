// KV calibration on the default model (Gemma 3 270M, a real pretrained model whose keys carry a
// large mean): the transform has the documented shape (a shift and scales per layer and KV head,
// scales shared by each rotary pair with a geometric mean of 1), and a 4-bit KV cache stored in
// it moves the next-token distributions of a text it was not measured on less than half as much
// as one stored as is (measured: 0.03 against 0.12 on the Debian FAQ, 0.018 against 0.072 on the
// short story here).
// A softcapped model's keys are left unshifted.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "eval/kv_calibration.h"
#include "eval/kv_guard.h"
#include "eval/perplexity.h"
#include "tokenizer/tokenizer.h"

using namespace kvasir;

namespace {

const char* const kHeldOut =
    "The village had one road, and it ran downhill to the harbour. Every morning the baker pushed his cart along it, "
    "calling out the names of the loaves as if they were old friends: the round rye, the long white, the little seeded "
    "rolls that the fishermen bought by the dozen. Children followed him for the crusts he broke off and handed back "
    "over his shoulder without looking. At the bottom of the hill he turned the cart around, counted what was left, "
    "and walked back up slowly, because the road was steep and he was no longer young. In winter the road froze and "
    "the cart could not go, so he carried a basket instead, and the children carried what did not fit. Nobody could "
    "remember when this had started, and nobody thought it would ever stop. When the baker fell ill one spring, the "
    "harbour master's daughter took the cart down the hill herself. She did not know the names of the loaves, so she "
    "made up new ones, and by the end of the summer the whole village used her names instead of his. He laughed when "
    "he heard, and said that bread did not care what it was called, as long as somebody came to fetch it.";

std::unique_ptr<Model> default_model() {
  const std::string path = std::string(KVASIR_SOURCE_DIR) + "/models/gemma-3-270m-q4_k_m.gguf";
  if (!std::ifstream(path)) return nullptr;
  auto m = Model::load(path);
  return m.ok() ? std::move(*m) : nullptr;
}

}  // namespace

TEST(KvCalibration, HasItsShape) {
  auto m = default_model();
  if (!m) GTEST_SKIP() << "the default model is not installed (make model)";
  auto tok = Tokenizer::from_gguf(m->gguf());
  ASSERT_TRUE(tok.ok());
  auto t = eval::calibrate_kv(*m, tok->encode(eval::kKvGuardText), {.n_ctx = 128, .n_positions = 2048, .num_threads = 2, .bos = tok->bos()});
  ASSERT_TRUE(t.ok()) << t.error();
  const ModelConfig& c = m->config();
  ASSERT_EQ(int64_t((*t)->layers.size()), c.n_layers);
  const size_t n = size_t(c.kv_dim());
  double shift_norm = 0;
  for (const KvLayerTransform& lt : (*t)->layers) {
    ASSERT_EQ(lt.k_shift.size(), n);
    ASSERT_EQ(lt.k_scale.size(), n);
    ASSERT_EQ(lt.v_shift.size(), n);
    ASSERT_EQ(lt.v_scale.size(), n);
    for (int64_t h = 0; h < c.n_kv_heads; ++h) {
      double log_k = 0, log_v = 0;
      for (int64_t i = 0; i < c.head_dim; ++i) {
        const size_t at = size_t(h * c.head_dim + i);
        ASSERT_GT(lt.k_scale[at], 0.f);
        ASSERT_GT(lt.v_scale[at], 0.f);
        log_k += std::log(lt.k_scale[at]), log_v += std::log(lt.v_scale[at]);
        // Gemma 3's RoPE pairs (i, i + head_dim / 2) share a scale.
        if (i < c.head_dim / 2) EXPECT_EQ(lt.k_scale[at], lt.k_scale[at + size_t(c.head_dim / 2)]);
        shift_norm += double(lt.k_shift[at]) * lt.k_shift[at];
      }
      EXPECT_NEAR(log_k / double(c.head_dim), 0.0, 1e-4);
      EXPECT_NEAR(log_v / double(c.head_dim), 0.0, 1e-4);
    }
  }
  EXPECT_GT(shift_norm, 0.0);
  // Out-of-range requests are refused, not clamped.
  EXPECT_FALSE(eval::calibrate_kv(*m, tok->encode("too short"), {}).ok());
  EXPECT_FALSE(eval::calibrate_kv(*m, tok->encode(eval::kKvGuardText), {.n_positions = 0}).ok());
}

TEST(KvCalibration, HalvesWhatFourBitKvCostsOnHeldOutText) {
  auto m = default_model();
  if (!m) GTEST_SKIP() << "the default model is not installed (make model)";
  auto tok = Tokenizer::from_gguf(m->gguf());
  ASSERT_TRUE(tok.ok());
  const int64_t n_ctx = 224;
  auto t = eval::calibrate_kv(*m, tok->encode(eval::kKvGuardText),
                              {.n_ctx = n_ctx, .n_positions = n_ctx, .num_threads = 2, .bos = tok->bos()});
  ASSERT_TRUE(t.ok()) << t.error();
  const auto held_out = tok->encode(kHeldOut);
  ASSERT_GE(int64_t(held_out.size()), n_ctx);
  auto kld = [&](DType type, std::shared_ptr<const KvTransform> transform) {
    auto r = eval::evaluate(*m, m.get(), held_out,
                            {.n_ctx = n_ctx, .num_threads = 2, .bos = tok->bos(), .kv_type = type, .kv_transform = transform});
    EXPECT_TRUE(r.ok()) << r.error();
    return r.ok() ? r->kl->mean_kld() : 0.0;
  };
  const double plain = kld(DType::Q4_0, nullptr), calibrated = kld(DType::Q4_0, *t);
  const double q8_plain = kld(DType::Q8_0, nullptr), q8_calibrated = kld(DType::Q8_0, *t);
  std::printf("mean KLD against F16 KV: q4_0 %.4f as is, %.4f calibrated; q8_0 %.5f, %.5f\n", plain, calibrated,
              q8_plain, q8_calibrated);
  EXPECT_LT(calibrated, 0.5 * plain);
  // Q8_0 is printed, not asserted: against F16 KV it sits at F16's own distance from F32 KV
  // either way (0.0058 here), which the transform cannot move.
}

TEST(KvCalibration, LeavesKeysUnshiftedUnderASoftcap) {
  // Gemma 2 soft-caps its scores: a constant per query would no longer cancel. Gemma 3 does not.
  for (const char* rel : {"models/next/fixture-gemma2-f32.gguf", "models/fixture-gemma3-f32.gguf"}) {
    const std::string path = std::string(KVASIR_SHARED_DIR) + "/" + rel;
    if (!std::ifstream(path)) GTEST_SKIP() << "../shared is not available";
    auto m = Model::load(path);
    ASSERT_TRUE(m.ok()) << m.error();
    const bool capped = (*m)->config().attn_softcap != 0.f;
    EXPECT_EQ(capped, std::string(rel).find("gemma2") != std::string::npos) << rel;
    std::vector<int32_t> tokens(64);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919) % size_t((*m)->config().n_vocab));
    auto t = eval::calibrate_kv(**m, tokens, {.n_ctx = 64, .num_threads = 2});
    ASSERT_TRUE(t.ok()) << t.error();
    for (const KvLayerTransform& lt : (*t)->layers) {
      EXPECT_EQ(lt.k_shift.empty(), capped) << rel;
      EXPECT_FALSE(lt.k_scale.empty()) << rel;
    }
  }
}
