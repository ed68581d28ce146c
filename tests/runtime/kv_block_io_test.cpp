// KV block I/O on the CPU runner: the bytes of a sequence's blocks, exported layer by layer,
// brought back into the same runner after the blocks were overwritten, or into another runner
// under other block ids, give bitwise the same next-token logits. For every KV type.
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>

#include "runtime/cpu_runner.h"

using namespace kvasir;

namespace {

std::string shared_path(const std::string& rel) { return std::string(KVASIR_SHARED_DIR) + "/" + rel; }

struct Case {
  std::string model;
  DType kv_type;
};

class KvBlockIo : public ::testing::TestWithParam<Case> {};

std::unique_ptr<runtime::CpuRunner> make_runner(const Model& m, DType kv_type) {
  auto r = runtime::CpuRunner::create(m, {.max_batch_tokens = 64, .n_threads = 2, .kv = {.n_blocks = 16, .type = kv_type}});
  EXPECT_TRUE(r.ok()) << r.error();
  return std::move(*r);
}

// Prefill `tokens` at positions 0.. with `table` (no logits needed).
void prefill(runtime::ModelRunner& r, const std::vector<int32_t>& tokens, const std::vector<int32_t>& table) {
  Batch b;
  for (size_t i = 0; i < tokens.size(); ++i) b.add(tokens[i], int32_t(i), 0, i + 1 == tokens.size());
  b.add_sequence(table);
  ASSERT_TRUE(r.forward(b).ok());
}

// The logits of `token` at position `pos` over `table`.
std::vector<float> decode(runtime::ModelRunner& r, int32_t token, int32_t pos, const std::vector<int32_t>& table) {
  Batch b;
  b.add(token, pos, 0, true);
  b.add_sequence(table);
  auto l = r.forward(b);
  EXPECT_TRUE(l.ok()) << l.error();
  return l.ok() ? std::vector<float>(*l, *l + r.info().n_vocab) : std::vector<float>{};
}

// Every layer's bytes of `blocks`, concatenated.
std::vector<uint8_t> export_all(const runtime::ModelRunner& r, const std::vector<int32_t>& blocks) {
  std::vector<uint8_t> out;
  for (int64_t il = 0; il < r.info().n_layers; ++il) {
    const size_t at = out.size();
    out.resize(at + blocks.size() * r.kv_block_bytes(il));
    EXPECT_TRUE(r.export_kv(il, blocks, out.data() + at).ok());
  }
  return out;
}

void import_all(runtime::ModelRunner& r, const std::vector<int32_t>& blocks, const std::vector<uint8_t>& bytes) {
  size_t at = 0;
  for (int64_t il = 0; il < r.info().n_layers; ++il) {
    ASSERT_TRUE(r.import_kv(il, blocks, bytes.data() + at).ok());
    at += blocks.size() * r.kv_block_bytes(il);
  }
  ASSERT_EQ(at, bytes.size());
}

TEST_P(KvBlockIo, ExportedBlocksGiveTheSameLogitsWhereverTheyGoBack) {
  const auto [name, kv_type] = GetParam();
  const std::string file = shared_path("models/" + name + ".gguf");
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "no " << file;
  auto model = Model::load(file);
  ASSERT_TRUE(model.ok()) << model.error();
  const int32_t V = int32_t((*model)->config().n_vocab);
  std::vector<int32_t> prompt(40), other(40);
  for (int i = 0; i < 40; ++i) prompt[size_t(i)] = (7 + 13 * i) % V, other[size_t(i)] = (3 + 29 * i) % V;
  const std::vector<int32_t> blocks = {0, 1, 2};  // 40 positions of 16: three blocks, the last part-filled

  auto a = make_runner(**model, kv_type);
  auto b = make_runner(**model, kv_type);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->kv_format(), b->kv_format());
  EXPECT_GT(a->kv_block_bytes(0), 0u);
  prefill(*a, prompt, blocks);
  const auto saved = export_all(*a, blocks);
  const auto expected = decode(*a, 5, 40, blocks);

  // Back into the same blocks after another sequence overwrote them.
  prefill(*a, other, blocks);
  ASSERT_NE(decode(*a, 5, 40, blocks), expected);  // the overwrite changed what the blocks hold
  import_all(*a, blocks, saved);
  EXPECT_EQ(decode(*a, 5, 40, blocks), expected);

  // Into another runner, under other block ids.
  const std::vector<int32_t> elsewhere = {11, 4, 9};
  import_all(*b, elsewhere, saved);
  EXPECT_EQ(decode(*b, 5, 40, elsewhere), expected);
}

INSTANTIATE_TEST_SUITE_P(Types, KvBlockIo,
                         ::testing::Values(Case{"stories260K", DType::F16}, Case{"stories260K", DType::F32},
                                           Case{"fixture-llama-q8_0", DType::Q8_0},
                                           Case{"fixture-llama-q8_0", DType::Q4_0},
                                           Case{"fixture-gemma3-q4_k", DType::F16}),
                         [](const auto& info) {
                           std::string n = info.param.model + "_" + std::string(dtype_name(info.param.kv_type));
                           for (auto& ch : n) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(KvBlockIo, BadLayersAndBlocksAreRefusedAndFormatsDiffer) {
  const std::string file = shared_path("models/stories260K.gguf");
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "no " << file;
  auto model = Model::load(file);
  ASSERT_TRUE(model.ok());
  auto f16 = make_runner(**model, DType::F16);
  auto f32 = make_runner(**model, DType::F32);
  EXPECT_NE(f16->kv_format(), f32->kv_format());
  std::vector<uint8_t> buf(f16->kv_block_bytes(0) * 2);
  const std::vector<int32_t> bad_block = {0, 16}, ok = {0, 1};
  EXPECT_FALSE(f16->export_kv(0, bad_block, buf.data()).ok());
  EXPECT_FALSE(f16->import_kv(0, std::vector<int32_t>{-1}, buf.data()).ok());
  EXPECT_FALSE(f16->export_kv(f16->info().n_layers, ok, buf.data()).ok());
  EXPECT_EQ(f16->kv_block_bytes(-1), 0u);
  EXPECT_TRUE(f16->export_kv(0, ok, buf.data()).ok());
}

}  // namespace
