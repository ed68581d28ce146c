// GPTQ over a real model (calib/gptq_model.h), stories260K in F32, calibrated on the first part of
// the golden stories text and scored on the rest: every block matrix is quantized, the file
// written from the result carries its tensors byte for byte, and the file's KL divergence
// from the F32 model is well below round-to-nearest's of the same type.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <map>

#include "calib/gptq_model.h"
#include "eval/perplexity.h"
#include "quant/quantize_file.h"
#include "tokenizer/tokenizer.h"

using namespace kvasir;

namespace {

std::string shared(const std::string& rel) { return std::string(KVASIR_SHARED_DIR) + "/" + rel; }

double mean_kld(const Model& m, const Model& base, std::span<const int32_t> tokens) {
  auto r = eval::evaluate(m, &base, tokens, {.n_ctx = 128, .num_threads = 2, .bos = 1});
  EXPECT_TRUE(r.ok()) << r.error();
  return r.ok() ? r->kl->mean_kld() : 1e9;
}

}  // namespace

TEST(GptqModel, QuantizesEveryBlockMatrixAndBeatsRoundToNearest) {
  const std::string f32 = shared("models/stories260K.gguf");
  std::ifstream text_in(shared("golden/perplexity/stories-sampled.txt"), std::ios::binary);
  if (!std::ifstream(f32) || !text_in) GTEST_SKIP() << "../shared is not available";
  const std::string text((std::istreambuf_iterator<char>(text_in)), std::istreambuf_iterator<char>());
  auto base = Model::load(f32), model = Model::load(f32);
  ASSERT_TRUE(base.ok() && model.ok());
  auto tok = Tokenizer::from_gguf((*base)->gguf());
  ASSERT_TRUE(tok.ok());
  const auto tokens = tok->encode(text);
  const size_t split = tokens.size() * 6 / 10;
  const std::span<const int32_t> calibration(tokens.data(), split), held_out(tokens.data() + split, tokens.size() - split);

  // Q4_0 everywhere it fits (stories260K's ffn_down rows of 172 fall back, as llama.cpp's do).
  std::map<std::string, DType> types;
  for (const auto& p : quant::plan_tensors((*base)->gguf(), {.type = *quant::file_type("q4_0"), .pure = true}))
    types[p.tensor->name] = p.type;
  auto target = [&types](const std::string& name) { return types.at(name); };
  int64_t layers_seen = 0;
  auto r = calib::gptq_quantize_model(**model, calibration,
                                      {.n_ctx = 128, .num_threads = 2, .bos = 1, .target = target,
                                       .on_layer = [&](int64_t done, int64_t) { layers_seen = done; }});
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(layers_seen, (*base)->config().n_layers);
  EXPECT_EQ(r->chunks, int64_t(split) / 128);
  size_t matrices = 0;
  for (const auto& t : (*base)->gguf().tensors) {
    if (t.n_dims < 2 || !t.name.starts_with("blk.") || types.at(t.name) != DType::Q4_0) continue;
    ++matrices;
    ASSERT_TRUE(r->tensors.count(t.name)) << t.name;
    EXPECT_EQ(r->tensors.at(t.name).size(), row_bytes(DType::Q4_0, t.ne[0]) * size_t(t.ne[1])) << t.name;
  }
  EXPECT_EQ(matrices, 6u * size_t((*base)->config().n_layers));  // q k v o gate up
  EXPECT_EQ(r->tensors.size(), matrices);

  // The file written from the result carries them as they are.
  quant::QuantizeOptions o;
  o.rules.type = *quant::file_type("q4_0");
  o.rules.pure = true;
  o.precomputed = &r->tensors;
  o.num_threads = 2;
  const std::string gptq_file = ::testing::TempDir() + "/kvasir_gptq_q4_0.gguf";
  const std::string rtn_file = ::testing::TempDir() + "/kvasir_rtn_q4_0.gguf";
  ASSERT_TRUE(quant::quantize_file(f32, gptq_file, o).ok());
  o.precomputed = nullptr;
  ASSERT_TRUE(quant::quantize_file(f32, rtn_file, o).ok());
  auto gptq = Model::load(gptq_file), rtn = Model::load(rtn_file);
  ASSERT_TRUE(gptq.ok() && rtn.ok());
  for (const auto& t : (*gptq)->gguf().tensors)
    if (r->tensors.count(t.name)) EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.nbytes), r->tensors.at(t.name)) << t.name;
  const double from_file = mean_kld(**gptq, **base, held_out), plain = mean_kld(**rtn, **base, held_out);
  // Measured: RTN 0.084, GPTQ 0.059 (-30%).
  std::printf("held-out mean KLD: RTN %.4f, GPTQ %.4f\n", plain, from_file);
  EXPECT_LT(from_file, 0.8 * plain);
  std::remove(gptq_file.c_str());
  std::remove(rtn_file.c_str());
}

TEST(GptqModel, RefusesTooLittleTextAndMissingTargets) {
  const std::string f32 = shared("models/stories260K.gguf");
  if (!std::ifstream(f32)) GTEST_SKIP() << "../shared is not available";
  auto model = Model::load(f32);
  ASSERT_TRUE(model.ok());
  const std::vector<int32_t> few(100, 5);
  auto target = [](const std::string&) { return DType::Q4_0; };
  auto r = calib::gptq_quantize_model(**model, few, {.n_ctx = 128, .target = target});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("at least one chunk"), std::string::npos) << r.error();
  EXPECT_FALSE(calib::gptq_quantize_model(**model, few, {.n_ctx = 64}).ok());
}
