// kvasir quantize against llama-quantize: from the shared F32 fixture, every type with --pure
// and the default Q4_K_M mix give files byte-identical to the fixtures llama-quantize made
// (tensor data, metadata, order and padding); the per-tensor rules; requantizing is refused
// unless asked for.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "format/gguf.h"
#include "format/mapped_file.h"
#include "quant/quantize_file.h"

using namespace kvasir;
using namespace kvasir::quant;

namespace {

std::string shared(const std::string& rel) { return std::string(KVASIR_SHARED_DIR) + "/" + rel; }
std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
std::string temp(const std::string& name) { return ::testing::TempDir() + "/kvasir_quant_" + name; }

QuantizeOptions options(const std::string& type, bool pure) {
  QuantizeOptions o;
  o.rules.type = *file_type(type);
  o.rules.pure = pure;
  o.num_threads = 2;
  return o;
}

}  // namespace

TEST(Quantize, ByteIdenticalToLlamaQuantize) {
  const std::string f32 = shared("models/fixture-llama-f32.gguf");
  if (!std::filesystem::exists(f32)) GTEST_SKIP() << "../shared is not available";
  for (const char* t : {"f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"}) {
    const std::string out = temp(std::string(t) + ".gguf");
    ASSERT_TRUE(quantize_file(f32, out, options(t, true)).ok()) << t;
    EXPECT_TRUE(bytes_of(out) == bytes_of(shared("models/fixture-llama-" + std::string(t) + ".gguf"))) << t;
    std::filesystem::remove(out);
  }
  const std::string mix = temp("q4_k_m.gguf");
  ASSERT_TRUE(quantize_file(f32, mix, options("q4_k_m", false)).ok());
  EXPECT_TRUE(bytes_of(mix) == bytes_of(shared("models/fixture-llama-q4_k_m.gguf")));
  std::filesystem::remove(mix);
}

TEST(Quantize, RefusesRequantizingUnlessAllowed) {
  const std::string q8 = shared("models/fixture-llama-q8_0.gguf");
  if (!std::filesystem::exists(q8)) GTEST_SKIP() << "../shared is not available";
  const std::string out = temp("re.gguf");
  auto s = quantize_file(q8, out, options("q4_0", true));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("--allow-requantize"), std::string::npos);
  auto o = options("q4_0", true);
  o.allow_requantize = true;
  ASSERT_TRUE(quantize_file(q8, out, o).ok());
  auto f = MappedFile::open(out);
  ASSERT_TRUE(f.ok());
  auto g = gguf::parse(f->bytes());
  ASSERT_TRUE(g.ok()) << g.error();
  for (const auto& t : g->tensors) EXPECT_EQ(t.type, t.n_dims >= 2 ? DType::Q4_0 : DType::F32) << t.name;
  EXPECT_EQ(g->find("general.file_type")->u, 2u);
  std::filesystem::remove(out);
  EXPECT_FALSE(quantize_file(q8, q8, o).ok());  // never over its own input
  EXPECT_FALSE(quantize_file("/nonexistent.gguf", out, o).ok());
}

TEST(Quantize, PerTensorRules) {
  TensorRules r{.type = *file_type("q4_k_m")};
  auto at = [&](const std::string& name, int64_t layer, int64_t n_layers, std::vector<int64_t> ne = {256, 256},
                bool has_output = true) { return tensor_type(r, {name, ne, layer, n_layers, has_output}); };
  EXPECT_EQ(at("output.weight", -1, 32), DType::Q6_K);
  EXPECT_EQ(at("token_embd.weight", -1, 32), DType::Q4_K);
  EXPECT_EQ(at("token_embd.weight", -1, 32, {256, 256}, false), DType::Q6_K);  // tied: the output's rule
  EXPECT_EQ(at("blk.0.attn_v.weight", 0, 32), DType::Q6_K);    // first eighth
  EXPECT_EQ(at("blk.5.attn_v.weight", 5, 32), DType::Q4_K);
  EXPECT_EQ(at("blk.6.ffn_down.weight", 6, 32), DType::Q6_K);  // (6 - 4) % 3 == 2
  EXPECT_EQ(at("blk.31.ffn_down.weight", 31, 32), DType::Q6_K);
  EXPECT_EQ(at("blk.3.attn_norm.weight", 3, 32, {256}), DType::F32);
  EXPECT_EQ(at("blk.3.ffn_gate_inp.weight", 3, 32), DType::F32);  // the MoE router
  EXPECT_EQ(at("blk.3.attn_q.weight", 3, 32, {100, 256}), DType::F16);  // rows fit no block: Q5_0 neither
  EXPECT_EQ(at("blk.3.attn_q.weight", 3, 32, {96, 256}), DType::Q5_0);  // llama.cpp's fallback for Q4_K
  r.overrides = {{"attn_q", DType::Q8_0}};
  EXPECT_EQ(at("blk.3.attn_q.weight", 3, 32), DType::Q8_0);
  r.pure = true;
  r.overrides.clear();
  EXPECT_EQ(at("output.weight", -1, 32), DType::Q4_K);
  EXPECT_EQ(file_type("Q4_K")->name, "q4_k_m");
  EXPECT_EQ(file_type("q3_k")->ftype, 12u);
  EXPECT_FALSE(file_type("q7_k").ok());
}
