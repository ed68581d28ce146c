// LoRA adapters (model/lora.h): the runtime delta equals the merged weights, a mixed batch equals
// each sequence run alone, and a bad adapter is refused naming what is wrong. The adapters are
// made here (write_random_lora: seeded, the same bytes everywhere).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "format/gguf.h"
#include "golden_util.h"
#include "model/lora.h"
#include "runtime/cpu_runner.h"

namespace kvasir {
namespace {

namespace fs = std::filesystem;

// Every row's logits of `tokens` as one sequence in slot `slot` (-1: none).
std::vector<float> logits_of(runtime::CpuRunner& r, std::span<const int32_t> tokens, int32_t slot) {
  Batch b;
  std::vector<int32_t> blocks;
  for (int32_t i = 0; i * 16 < int32_t(tokens.size()); ++i) blocks.push_back(i);
  b.add_sequence(blocks, slot);
  for (size_t i = 0; i < tokens.size(); ++i) b.add(tokens[i], int32_t(i), 0, true);
  auto out = r.forward(b);
  if (!out) throw std::runtime_error(out.error());
  return std::vector<float>(*out, *out + tokens.size() * size_t(r.info().n_vocab));
}

// max |a - b| / max |b|
double rel_diff(std::span<const float> a, std::span<const float> b) {
  double d = 0, m = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::fabs(a[i] - b[i]))), m = std::max(m, double(std::fabs(b[i])));
  return d / std::max(m, 1e-30);
}

std::unique_ptr<runtime::CpuRunner> runner_of(const Model& m) {
  auto r = runtime::CpuRunner::create(m, {.max_batch_tokens = 64, .n_threads = 2, .kv = {.n_blocks = 64}});
  if (!r) throw std::runtime_error(r.error());
  return std::move(*r);
}

class Lora : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    path_ = shared_path(std::string("models/") + GetParam());
    if (!fs::exists(path_)) GTEST_SKIP() << "needs the shared fixture models";
    dir_ = fs::temp_directory_path() / ("kvasir_lora_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    auto m = Model::load(path_);
    ASSERT_TRUE(m) << m.error();
    model_ = std::move(*m);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::shared_ptr<const LoraAdapter> adapter(uint64_t seed, int64_t rank = 4, float alpha = 8) {
    const std::string p = (dir_ / ("a" + std::to_string(seed) + ".gguf")).string();
    if (auto s = write_random_lora(*model_, p, rank, alpha, seed); !s) throw std::runtime_error(s.error());
    auto a = LoraAdapter::load(p, *model_);
    if (!a) throw std::runtime_error(a.error());
    return *a;
  }
  std::string path_;
  fs::path dir_;
  std::unique_ptr<Model> model_;
  const std::vector<int32_t> tokens_{1, 15, 27, 3, 88, 41, 9, 60, 2, 33, 71, 5, 19, 44, 8, 90, 12, 7, 64, 30};
};

TEST_P(Lora, RuntimeDeltaEqualsMergedWeights) {
  auto a = adapter(1);
  EXPECT_GT(a->num_matrices(), 0u);
  const std::string merged = (dir_ / "merged.gguf").string();
  ASSERT_TRUE(write_merged_lora(*model_, *a, merged, DType::F32));
  auto mm = Model::load(merged);
  ASSERT_TRUE(mm) << mm.error();
  EXPECT_NE((*mm)->identity(), model_->identity());

  auto base = runner_of(*model_);
  ASSERT_TRUE(base->set_adapter(0, a));
  const auto with = logits_of(*base, tokens_, 0);
  const auto without = logits_of(*base, tokens_, -1);
  const auto want = logits_of(*runner_of(**mm), tokens_, -1);
  // F32 weights on both sides: only the order of the sums differs.
  EXPECT_LT(rel_diff(with, want), 2e-4);
  // The adapter matters: without it the logits are clearly elsewhere.
  EXPECT_GT(rel_diff(without, want), 1e-2);
}

TEST_P(Lora, AMixedBatchEqualsEachSequenceAlone) {
  auto a = adapter(1), b = adapter(2, 8, 0);
  auto r = runner_of(*model_);
  ASSERT_TRUE(r->set_adapter(0, a));
  ASSERT_TRUE(r->set_adapter(3, b));
  const int32_t slots[] = {0, -1, 3, 0};
  const size_t n = 7, V = size_t(r->info().n_vocab);
  std::vector<std::vector<float>> alone;
  for (int s = 0; s < 4; ++s) {
    std::vector<int32_t> t(tokens_.begin() + s, tokens_.begin() + s + n);
    alone.push_back(logits_of(*r, t, slots[s]));
  }
  Batch batch;
  for (int s = 0; s < 4; ++s) {
    const int32_t blocks[] = {int32_t(s)};
    batch.add_sequence(blocks, slots[s]);
  }
  for (size_t i = 0; i < n; ++i)  // rows interleaved across the sequences
    for (int s = 0; s < 4; ++s) batch.add(tokens_[size_t(s) + i], int32_t(i), s, true);
  auto out = r->forward(batch);
  ASSERT_TRUE(out) << out.error();
  for (int s = 0; s < 4; ++s)
    for (size_t i = 0; i < n; ++i) {
      std::span<const float> got(*out + (i * 4 + size_t(s)) * V, V), want(alone[size_t(s)].data() + i * V, V);
      EXPECT_LT(rel_diff(got, want), 1e-4) << "sequence " << s << " row " << i;
    }
  // A slot that holds nothing, or one past the slots, is an error, not a silent base forward.
  ASSERT_TRUE(r->set_adapter(0, nullptr));
  EXPECT_FALSE(r->forward(batch));
  Batch past;
  const int32_t blocks[] = {0};
  past.add_sequence(blocks, 9);
  past.add(1, 0, 0, true);
  EXPECT_FALSE(r->forward(past));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Lora,
                         ::testing::Values("fixture-llama-f32.gguf", "fixture-gemma3-f32.gguf", "fixture-qwen2-f32.gguf"),
                         [](const auto& info) { return std::string(info.param).substr(8, std::string(info.param).find('-', 8) - 8); });

class LoraFiles : public Lora {};

// An adapter file with the given tensors (F32 zeros of the given shapes) and keys.
void write_adapter(const std::string& path, const std::string& arch, const std::string& type,
                   std::vector<std::pair<std::string, std::vector<int64_t>>> tensors, float fill = 0) {
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::of_string(arch));
  w.set("general.type", gguf::Value::of_string(type));
  w.set("adapter.type", gguf::Value::of_string("lora"));
  w.set("adapter.lora.alpha", gguf::Value::of_f32(4));
  for (auto& [name, shape] : tensors) {
    std::vector<float> v(size_t(shape[0] * shape[1]), fill);
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    w.add_tensor(name, DType::F32, shape, std::move(bytes));
  }
  if (auto s = w.write(path); !s) throw std::runtime_error(s.error());
}

TEST_P(LoraFiles, BadAdaptersAreRefusedNamingWhatIsWrong) {
  const std::string arch = model_->config().arch_name, p = (dir_ / "bad.gguf").string();
  const gguf::TensorInfo* q = model_->gguf().tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  const int64_t n_in = q->ne[0], n_out = q->ne[1];
  auto refused = [&](const std::string& needle) {
    auto a = LoraAdapter::load(p, *model_);
    if (a) return ::testing::AssertionFailure() << "accepted";
    if (a.error().find(needle) == std::string::npos) return ::testing::AssertionFailure() << a.error();
    return ::testing::AssertionSuccess();
  };
  const std::string q_a = "blk.0.attn_q.weight.lora_a", q_b = "blk.0.attn_q.weight.lora_b";
  write_adapter(p, arch, "adapter", {{q_a, {n_in, 2}}, {q_b, {2, n_out}}});
  EXPECT_TRUE(LoraAdapter::load(p, *model_)) << "a well-formed adapter of one matrix";
  write_adapter(p, "bert", "adapter", {{q_a, {n_in, 2}}, {q_b, {2, n_out}}});
  EXPECT_TRUE(refused("for 'bert'"));
  write_adapter(p, arch, "model", {{q_a, {n_in, 2}}, {q_b, {2, n_out}}});
  EXPECT_TRUE(refused("not an adapter"));
  write_adapter(p, arch, "adapter", {{q_a, {n_in, 2}}});
  EXPECT_TRUE(refused("no matching .lora_b"));
  write_adapter(p, arch, "adapter", {{q_a, {n_in + 1, 2}}, {q_b, {2, n_out}}});
  EXPECT_TRUE(refused("does not fit 'blk.0.attn_q.weight'"));
  write_adapter(p, arch, "adapter", {{q_a, {n_in, 2}}, {q_b, {3, n_out}}});
  EXPECT_TRUE(refused("disagree on the rank"));
  write_adapter(p, arch, "adapter", {{"blk.99.attn_q.weight.lora_a", {n_in, 2}}, {"blk.99.attn_q.weight.lora_b", {2, n_out}}});
  EXPECT_TRUE(refused("which the model does not have"));
  const int64_t n_vocab = model_->config().n_vocab;
  write_adapter(p, arch, "adapter", {{"token_embd.weight.lora_a", {n_in, 2}}, {"token_embd.weight.lora_b", {2, n_vocab}}});
  EXPECT_TRUE(refused("token embeddings"));
  write_adapter(p, arch, "adapter", {{q_a, {n_in, 2}}, {q_b, {2, n_out}}}, std::nanf(""));
  EXPECT_TRUE(refused("non-finite"));
  write_adapter(p, arch, "adapter", {});
  EXPECT_TRUE(refused("no lora_a/lora_b pairs"));
  EXPECT_FALSE(LoraAdapter::load((dir_ / "missing.gguf").string(), *model_));
}

TEST_P(LoraFiles, AMergedQuantizedModelKeepsItsTypes) {
  auto a = adapter(3, 4, 32);  // a large delta: the re-quantization's error must be small beside it
  const std::string merged = (dir_ / "merged.gguf").string();
  ASSERT_TRUE(write_merged_lora(*model_, *a, merged));
  auto mm = Model::load(merged);
  ASSERT_TRUE(mm) << mm.error();
  for (const gguf::TensorInfo& t : model_->gguf().tensors) {
    const gguf::TensorInfo* u = (*mm)->gguf().tensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(u->type, t.type) << t.name;
  }
  // Within the re-quantization's error of the runtime delta, and far from the base.
  auto r = runner_of(*model_);
  ASSERT_TRUE(r->set_adapter(0, a));
  const auto with = logits_of(*r, tokens_, 0), base = logits_of(*r, tokens_, -1);
  const auto merged_logits = logits_of(*runner_of(**mm), tokens_, -1);
  EXPECT_LT(rel_diff(merged_logits, with), 0.5 * rel_diff(base, with));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LoraFiles, ::testing::Values("fixture-llama-q4_k.gguf", "fixture-gemma3-q8_0.gguf"),
                         [](const auto& info) { return std::string(info.param).substr(8, std::string(info.param).find('-', 8) - 8); });

}  // namespace
}  // namespace kvasir
