// kvasir quantize against llama-quantize: from the shared F32 fixture, every type with --pure
// and the default Q4_K_M mix give files byte-identical to the fixtures llama-quantize made
// (tensor data, metadata, order and padding); the per-tensor rules; requantizing is refused
// unless asked for.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <cmath>
#include <random>

#include "format/gguf.h"
#include "format/mapped_file.h"
#include "kernels/quant/quant.h"
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

// The weighted quantizers put less importance-weighted error where the weights say it matters
// than the plain ones: on random rows with random (log-normal) importance, the weighted squared
// error summed over all rows drops for every type (byte identity with llama-quantize --imatrix
// is checked in bench/, docs/PERFORMANCE.md "Importance matrices": no shared fixture has one).
TEST(Quantize, ImportanceWeightedQuantizersCutTheWeightedError) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  const int64_t n = 256, rows = 64;
  std::vector<float> x(static_cast<size_t>(n * rows)), imp(static_cast<size_t>(n));
  for (auto& v : x) v = normal(rng);
  for (auto& v : imp) v = std::exp(2.f * normal(rng));  // a few columns matter much more
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1}) {
    const auto* traits = kernels::quant_traits(t);
    const auto weighted = kernels::weighted_quantizer(t);
    ASSERT_TRUE(traits && weighted);
    std::vector<uint8_t> q(row_bytes(t, n));
    std::vector<float> back(static_cast<size_t>(n));
    double plain_err = 0, weighted_err = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = x.data() + r * n;
      traits->quantize_row(row, q.data(), n);
      traits->dequantize_row(q.data(), back.data(), n);
      for (int64_t j = 0; j < n; ++j) plain_err += imp[size_t(j)] * std::pow(back[size_t(j)] - row[j], 2);
      weighted(row, q.data(), n, imp.data());
      traits->dequantize_row(q.data(), back.data(), n);
      for (int64_t j = 0; j < n; ++j) weighted_err += imp[size_t(j)] * std::pow(back[size_t(j)] - row[j], 2);
    }
    EXPECT_LT(weighted_err, 0.9 * plain_err) << dtype_name(t);
  }
}

// With an importance matrix: llama.cpp's Q4_0 / Q5_0 guard on the first eighth of ffn_down, the
// quantize.imatrix.* keys, weighted quantization of the covered matrices (k-quants included).
TEST(Quantize, WithAnImportanceMatrix) {
  TensorRules r{.type = *file_type("q4_0"), .has_imatrix = true};
  EXPECT_EQ(tensor_type(r, {"blk.0.ffn_down.weight", {256, 256}, 0, 16, true}), DType::Q4_1);
  EXPECT_EQ(tensor_type(r, {"blk.2.ffn_down.weight", {256, 256}, 2, 16, true}), DType::Q4_0);
  EXPECT_EQ(tensor_type(r, {"blk.0.ffn_up.weight", {256, 256}, 0, 16, true}), DType::Q4_0);
  r.has_imatrix = false;
  EXPECT_EQ(tensor_type(r, {"blk.0.ffn_down.weight", {256, 256}, 0, 16, true}), DType::Q4_0);
  r = {.type = *file_type("q5_0"), .has_imatrix = true};
  EXPECT_EQ(tensor_type(r, {"blk.1.ffn_down.weight", {256, 256}, 1, 16, true}), DType::Q5_1);

  const std::string f32 = shared("models/fixture-llama-f32.gguf");
  if (!std::ifstream(f32)) GTEST_SKIP() << "../shared is not available";
  auto mapped = MappedFile::open(f32);
  ASSERT_TRUE(mapped.ok());
  auto in = gguf::parse(mapped->bytes());
  ASSERT_TRUE(in.ok());
  Importance imp{.file = "calibration.imatrix", .dataset = "text.txt", .chunks = 4};
  for (const auto& t : in->tensors)
    if (t.n_dims >= 2 && t.name.starts_with("blk.")) imp.weights[t.name].assign(size_t(t.ne[0] * t.ne[2]), 1.f);
  imp.weights["blk.0.attn_q.weight"][3] = 50.f;  // one column that matters
  QuantizeOptions o = options("q4_0", true);
  o.importance = imp;
  const std::string out = temp("imatrix_q4_0.gguf"), plain = temp("plain_q4_0.gguf");
  ASSERT_TRUE(quantize_file(f32, out, o).ok());
  ASSERT_TRUE(quantize_file(f32, plain, options("q4_0", true)).ok());
  auto a = MappedFile::open(out), b = MappedFile::open(plain);
  auto fa = gguf::parse(a->bytes()), fb = gguf::parse(b->bytes());
  ASSERT_TRUE(fa.ok() && fb.ok());
  EXPECT_EQ(*fa->get_string("quantize.imatrix.file"), "calibration.imatrix");
  EXPECT_EQ(*fa->get_string("quantize.imatrix.dataset"), "text.txt");
  EXPECT_EQ(*fa->get_int("quantize.imatrix.entries_count"), int64_t(imp.weights.size()));
  EXPECT_EQ(*fa->get_int("quantize.imatrix.chunks_count"), 4);
  EXPECT_FALSE(fb->find("quantize.imatrix.file"));
  auto data_of = [](const gguf::File& f, const std::string& name) {
    for (const auto& t : f.tensors)
      if (t.name == name) return std::string(reinterpret_cast<const char*>(t.data), t.nbytes);
    return std::string();
  };
  EXPECT_NE(data_of(*fa, "blk.0.attn_q.weight"), data_of(*fb, "blk.0.attn_q.weight"));  // weighted
  EXPECT_EQ(data_of(*fa, "token_embd.weight"), data_of(*fb, "token_embd.weight"));      // not covered
  // The k-quants have weighted quantizers too: a Q4_K_M mix with the imatrix is written.
  QuantizeOptions k = options("q4_k_m", false);
  k.importance = imp;
  auto k_quants = quantize_file(f32, temp("imatrix_q4_k.gguf"), k);
  ASSERT_TRUE(k_quants.ok()) << k_quants.error();
  // A matrix of the wrong size is an error naming it.
  imp.weights["blk.0.attn_q.weight"].pop_back();
  o.importance = imp;
  auto bad = quantize_file(f32, temp("imatrix_bad.gguf"), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("blk.0.attn_q.weight"), std::string::npos);
}
