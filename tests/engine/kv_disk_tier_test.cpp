// The prefix cache's disk tier through the engine, on real models: a prompt whose blocks come back
// from disk (after a restart, or after memory evicted them) gives token for token the cold run's
// greedy answer; another tenant's salt never sees them; corrupted files are recomputed; a bound on
// the folder holds.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

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
  ASSERT_EQ(s.kv_tiers.size(), 1u);
  EXPECT_EQ(s.kv_tiers[0].tier, "disk");
  EXPECT_EQ(s.kv_tiers[0].loaded_blocks, 8);
  EXPECT_EQ(s.kv_tier_loads, 1);
  // Another tenant's salt roots another chain: nothing of the first tenant's is found.
  const Answer other = run(*warm, prompt_, "tenant-b");
  EXPECT_EQ(other.usage.cached_tokens, 0);
  EXPECT_EQ(other.tokens, cold.tokens);
  EXPECT_EQ(warm->stats().kv_tiers[0].loaded_blocks, 8);
}

// Through the threaded Engine, the blocks are read on the submitting thread (Engine::submit's
// prefetch) and the engine thread only registers them: the same answer, the same cached tokens.
TEST_P(KvDiskTier, TheThreadedEngineReadsOffTheEngineThread) {
  const Answer cold = run(*engine(false), prompt_);
  run(*engine(true), prompt_);  // writes the blocks
  Engine e(engine(true));
  GenerationParams p;
  p.prompt = prompt_;
  p.sampling.temperature = 0;
  p.stop = {.max_tokens = 24, .ignore_eos = true};
  auto s = e.submit(p);
  ASSERT_TRUE(s.ok()) << s.error();
  Answer got;
  Delta d;
  while ((*s)->next(d)) {
    got.tokens.insert(got.tokens.end(), d.tokens.begin(), d.tokens.end());
    if (d.finish != FinishReason::None) got.usage = d.usage;
  }
  EXPECT_EQ(got.tokens, cold.tokens);
  EXPECT_EQ(got.usage.cached_tokens, 8 * 16);
  const EngineStats st = e.stats();
  ASSERT_EQ(st.kv_tiers.size(), 1u);
  EXPECT_EQ(st.kv_tiers[0].loaded_blocks, 8);
  EXPECT_EQ(st.kv_tier_prefetched_blocks, 8);  // all read on the submitting thread
  EXPECT_EQ(st.kv_tiers[0].store.hits, 8);     // once: the engine thread's own lookup found them in memory
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
  EXPECT_GT(c->stats().kv_tiers[0].loaded_blocks, 0);
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
  EXPECT_GE(c->stats().kv_tiers[0].store.corrupt, 1);
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

// The shared tier: a Redis server the test starts on a free loopback port (skipped without
// redis-server). One engine's blocks answer another's prompt (another instance, here another
// engine over the same model file); tenants stay apart; a server that dies costs recomputation.
class RedisServer {
 public:
  RedisServer() {
    if (std::system("command -v redis-server > /dev/null 2>&1") != 0) return;
    for (int attempt = 0; attempt < 5 && pid_ <= 0; ++attempt) {
      port_ = 20000 + int((::getpid() * 7 + attempt * 131) % 20000);
      pid_ = ::fork();
      if (pid_ == 0) {
        const std::string port = std::to_string(port_);
        ::execlp("redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--loglevel", "warning", static_cast<char*>(nullptr));
        ::_exit(127);
      }
      for (int i = 0; i < 100; ++i) {  // up to 2 s for it to listen (a taken port: it exits, try another)
        if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
          pid_ = -1;
          break;
        }
        if (std::system(("redis-cli -p " + std::to_string(port_) + " ping > /dev/null 2>&1").c_str()) == 0) return;
        ::usleep(20000);
      }
      stop();
    }
  }
  ~RedisServer() { stop(); }
  void stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
  }
  bool up() const { return pid_ > 0; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

TEST_P(KvDiskTier, AnotherInstancesBlocksComeFromTheSharedStore) {
  RedisServer redis;
  if (!redis.up()) GTEST_SKIP() << "needs redis-server";
  auto with_store = [&](bool disk) {
    EngineOptions o{.max_batch_tokens = 64, .max_seqs = 4, .num_threads = 2, .kv_store_url = redis.url()};
    if (disk) o.kv_disk_dir = dir_.string(), o.kv_disk_bytes = 1 << 30;
    auto c = backends::create_engine_core(*model_, *tok_, {.engine = o, .kv = {.n_blocks = 64}});
    EXPECT_TRUE(c.ok()) << c.error();
    return std::move(*c);
  };
  const Answer cold = run(*engine(false), prompt_);
  EXPECT_EQ(run(*with_store(false), prompt_).tokens, cold.tokens);  // instance A computes and shares
  auto b = with_store(/*disk=*/true);                                // instance B: a disk tier of its own, empty
  const Answer shared = run(*b, prompt_);
  EXPECT_EQ(shared.tokens, cold.tokens);
  EXPECT_EQ(shared.usage.cached_tokens, 8 * 16);
  const EngineStats s = b->stats();
  ASSERT_EQ(s.kv_tiers.size(), 2u);
  EXPECT_EQ(s.kv_tiers[1].tier, "redis");
  EXPECT_EQ(s.kv_tiers[1].loaded_blocks, 8);
  EXPECT_EQ(s.kv_tiers[0].loaded_blocks, 0);
  // Another tenant on another instance sees none of them.
  EXPECT_EQ(run(*with_store(false), prompt_, "tenant-b").usage.cached_tokens, 0);
  // The store dies: answers go on, recomputed.
  redis.stop();
  auto c = with_store(false);
  std::vector<int32_t> other = prompt_;
  other[3] = 7;
  const Answer down = run(*c, other);
  EXPECT_EQ(down.tokens.size(), 24u);
  EXPECT_EQ(down.usage.cached_tokens, 0);
}

INSTANTIATE_TEST_SUITE_P(Models, KvDiskTier, ::testing::Values("stories260K", "fixture-gemma3-q8_0"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
