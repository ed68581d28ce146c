// The prefix cache's disk tier through the engine, on real models: a prompt whose blocks come back
// from disk (after a restart, or after memory evicted them) gives token for token the cold run's
// greedy answer; another tenant's salt never sees them; corrupted files are recomputed; a bound on
// the folder holds.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "backends/engine_factory.h"
#include "engine/engine.h"

using namespace kvasir;
using namespace kvasir::engine;

namespace {

namespace fs = std::filesystem;

std::string shared_path(const std::string& rel) { return std::string(KVASIR_SHARED_DIR) + "/" + rel; }

struct Answer {
  std::vector<int32_t> tokens;
  Usage usage;
};

class KvDiskTier : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!fs::exists(shared_path("models/stories260K.gguf"))) GTEST_SKIP() << "needs the shared models";
    auto m = Model::load(shared_path(std::string("models/") + GetParam() + ".gguf"));
    ASSERT_TRUE(m) << m.error();
    model_ = std::move(*m);
    auto t = Tokenizer::from_gguf(model_->gguf());
    ASSERT_TRUE(t) << t.error();
    tok_ = std::make_unique<Tokenizer>(std::move(*t));
    dir_ = fs::temp_directory_path() / ("kvasir_kvdisk_" + std::to_string(::getpid()) + "_" + GetParam());
    fs::remove_all(dir_);
    for (int i = 0; i < 12; ++i) prompt_.push_back(int32_t(1 + (i * 37 + 11) % 400));
    for (int r = 0; r < 10; ++r)
      for (int i = 0; i < 12; ++i) prompt_.push_back(int32_t(5 + (i * 53 + r * 7) % 450));  // 132 tokens: 8 full blocks
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<EngineCore> engine(bool disk, int64_t kv_blocks = 64, uint64_t disk_bytes = 1 << 30) {
    EngineOptions o{.max_batch_tokens = 64, .max_seqs = 4, .num_threads = 2};
    if (disk) o.kv_disk_dir = dir_.string(), o.kv_disk_bytes = disk_bytes;
    auto c = backends::create_engine_core(*model_, *tok_, {.engine = o, .kv = {.n_blocks = kv_blocks}});
    EXPECT_TRUE(c.ok()) << c.error();
    return c.ok() ? std::move(*c) : nullptr;
  }
  Answer run(EngineCore& c, const std::vector<int32_t>& prompt, const std::string& salt = "") {
    GenerationParams p;
    p.prompt = prompt;
    p.sampling.temperature = 0;
    p.stop.max_tokens = 24;
    p.stop.ignore_eos = true;
    p.cache_salt = salt;
    Answer a;
    auto id = c.add_request(p);
    EXPECT_TRUE(id.ok()) << id.error();
    std::vector<Delta> deltas;
    for (int guard = 0; c.has_unfinished() && guard < 10000; ++guard) {
      deltas.clear();
      EXPECT_TRUE(c.step(deltas));
      for (const Delta& d : deltas) {
        a.tokens.insert(a.tokens.end(), d.tokens.begin(), d.tokens.end());
        if (d.finish != FinishReason::None) a.usage = d.usage;
      }
    }
    return a;
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
  fs::path dir_;
  std::vector<int32_t> prompt_;
};

TEST_P(KvDiskTier, ARestartedEngineReadsItsBlocksBackAndAnswersAsCold) {
  const Answer cold = run(*engine(false), prompt_);
  ASSERT_EQ(cold.tokens.size(), 24u);
  EXPECT_EQ(run(*engine(true), prompt_).tokens, cold.tokens);  // writes the blocks (flushed at destruction)
  auto warm = engine(true);
  const Answer again = run(*warm, prompt_);
  EXPECT_EQ(again.tokens, cold.tokens);
  EXPECT_EQ(again.usage.cached_tokens, 8 * 16);  // every full block but the one holding the last token
  const EngineStats s = warm->stats();
  EXPECT_EQ(s.kv_disk_loaded_blocks, 8);
  EXPECT_EQ(s.kv_disk_loads, 1);
  // Another tenant's salt roots another chain: nothing of the first tenant's is found.
  const Answer other = run(*warm, prompt_, "tenant-b");
  EXPECT_EQ(other.usage.cached_tokens, 0);
  EXPECT_EQ(other.tokens, cold.tokens);
  EXPECT_EQ(warm->stats().kv_disk_loaded_blocks, 8);
}

TEST_P(KvDiskTier, BlocksMemoryEvictedComeBackFromDisk) {
  const Answer cold = run(*engine(false), prompt_);
  auto c = engine(true, /*kv_blocks=*/14);  // room for one prompt's blocks at a time
  EXPECT_EQ(run(*c, prompt_).tokens, cold.tokens);
  std::vector<int32_t> other = prompt_;
  for (int32_t& t : other) t = 400 - t % 300;
  run(*c, other);  // evicts the first prompt's blocks from memory
  const Answer back = run(*c, prompt_);
  EXPECT_EQ(back.tokens, cold.tokens);
  EXPECT_GT(back.usage.cached_tokens, 0);
  EXPECT_GT(c->stats().kv_disk_loaded_blocks, 0);
}

TEST_P(KvDiskTier, CorruptedFilesAreRecomputed) {
  const Answer cold = run(*engine(true), prompt_);
  size_t files = 0;
  for (const auto& f : fs::recursive_directory_iterator(dir_)) {
    if (f.path().extension() != ".kvb") continue;
    std::fstream io(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(200);
    io.put('\x5a');
    ++files;
  }
  ASSERT_GE(files, 8u);
  auto c = engine(true);
  const Answer again = run(*c, prompt_);
  EXPECT_EQ(again.tokens, cold.tokens);
  EXPECT_EQ(again.usage.cached_tokens, 0);
  EXPECT_GE(c->stats().kv_disk_corrupt, 1);
}

TEST_P(KvDiskTier, TheFolderStaysWithinItsBound) {
  uint64_t block_file = 0;
  {
    auto c = engine(true);
    run(*c, prompt_);
  }
  for (const auto& f : fs::recursive_directory_iterator(dir_))
    if (f.path().extension() == ".kvb") block_file = std::max<uint64_t>(block_file, fs::file_size(f.path()));
  fs::remove_all(dir_);
  auto c = engine(true, 64, 5 * block_file);
  for (int k = 0; k < 4; ++k) {
    std::vector<int32_t> p = prompt_;
    p[0] = int32_t(400 + k);
    run(*c, p);
  }
  c.reset();  // flushes
  uint64_t total = 0;
  for (const auto& f : fs::recursive_directory_iterator(dir_))
    if (f.path().extension() == ".kvb") total += fs::file_size(f.path());
  EXPECT_LE(total, 5 * block_file);
  EXPECT_GT(total, 0u);
}

INSTANTIATE_TEST_SUITE_P(Models, KvDiskTier, ::testing::Values("stories260K", "fixture-gemma3-q8_0"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
