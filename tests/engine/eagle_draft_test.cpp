// Speculation with a trained EAGLE-style head (spec/eagle_proposer.h) on stories260K, the head
// distilled here in a second: the engine hands it the hidden state of the row that chose each
// request's latest token and verifies what it drafts. Lossless: greedy and seeded sampled tokens
// equal the plain engine's in a crowd with tiny chunks and preemption; on story text the head's
// drafts are mostly accepted; every KV block comes back.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <random>

#include "backends/engine_factory.h"
#include "compress/distill_head.h"
#include "engine/engine.h"
#include "spec/eagle_proposer.h"
#include "support/eagle_head.h"
#include "support/engine_runs.h"

using namespace kvasir;
using namespace kvasir::engine;
using kvasir::test_support::run_all;

namespace {

std::string shared_path(const std::string& rel) { return std::string(KVASIR_SHARED_DIR) + "/" + rel; }

std::unique_ptr<EngineCore> core(const Model& m, const Tokenizer& t, EngineOptions o, int64_t kv_blocks) {
  o.num_threads = 2;
  auto c = backends::create_engine_core(m, t, {.engine = o, .kv = {.n_blocks = kv_blocks}});
  EXPECT_TRUE(c.ok()) << c.error();
  return c.ok() ? std::move(*c) : nullptr;
}

class EagleDraft : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = shared_path("models/stories260K.gguf");
    std::ifstream in(shared_path("golden/perplexity/stories-sampled.txt"), std::ios::binary);
    if (!std::filesystem::exists(path) || !in) GTEST_SKIP() << "../shared is not available";
    text_ = std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto m = Model::load(path);
    ASSERT_TRUE(m.ok());
    model_ = std::move(*m);
    auto t = Tokenizer::from_gguf(model_->gguf());
    ASSERT_TRUE(t.ok());
    tok_.emplace(std::move(*t));
    head_file_ = ::testing::TempDir() + "/kvasir_eagle_engine_" + std::to_string(getpid()) + ".gguf";
    auto st = kvasir::test_support::distill_story_head(*model_, tok_->encode(text_), head_file_);
    ASSERT_TRUE(st.ok()) << st.error();
  }
  std::vector<GenerationParams> story_requests() const { return kvasir::test_support::story_requests(*tok_); }
  void TearDown() override {
    if (!head_file_.empty()) std::filesystem::remove(head_file_);
  }
  std::string text_, head_file_;
  std::unique_ptr<Model> model_;
  std::optional<Tokenizer> tok_;
};

TEST_F(EagleDraft, TokensEqualThePlainEngineInACrowd) {
  std::mt19937 rng(5);
  const auto words = tok_->encode(text_);
  for (const bool sampled : {false, true}) {
    std::vector<GenerationParams> reqs;
    for (int i = 0; i < 10; ++i) {
      GenerationParams p;
      const size_t at = rng() % (words.size() - 40);
      p.prompt.assign(words.begin() + ptrdiff_t(at), words.begin() + ptrdiff_t(at + 8 + rng() % 24));
      p.stop = {.max_tokens = 12 + int(rng() % 20), .ignore_eos = true};
      p.sampling = sampled ? SamplingParams{.temperature = 0.9f, .top_k = 40, .top_p = 0.95f, .min_p = 0.f, .seed = 1000 + uint64_t(i)}
                           : SamplingParams{.temperature = 0.f};
      reqs.push_back(std::move(p));
    }
    auto plain = core(*model_, *tok_, {.max_batch_tokens = 64, .max_seqs = 8}, 128);
    const auto ref = run_all(*plain, reqs);
    for (bool adaptive : {true, false}) {
      EngineOptions o{.max_batch_tokens = 16, .max_seqs = 8};
      o.spec = {.method = SpecMethod::head, .max_k = 3, .adaptive = adaptive, .head_file = head_file_};
      auto s = core(*model_, *tok_, o, 7);
      ASSERT_TRUE(s);
      const auto got = run_all(*s, reqs);
      ASSERT_EQ(got.size(), ref.size());
      for (auto a = ref.begin(), b = got.begin(); a != ref.end(); ++a, ++b)
        EXPECT_EQ(a->second, b->second) << "request " << a->first << " adaptive " << adaptive << " sampled " << sampled;
      const EngineStats st = s->stats();
      if (!adaptive) {
        EXPECT_GT(st.spec_draft_tokens, 50);
        EXPECT_GT(st.spec_accepted_tokens, 0);
      }
      EXPECT_GT(st.num_preemptions, 0);
      EXPECT_EQ(st.kv_blocks_used, 0);
    }
  }
}

// Greedy story continuations: the distilled head's first drafted token is accepted most of the
// time (an untrained head's almost never: what the distillation bought).
TEST_F(EagleDraft, DistilledDraftsAreMostlyAccepted) {
  const std::vector<GenerationParams> reqs = story_requests();
  auto acceptance = [&](const std::string& file) {
    EngineOptions o{.max_batch_tokens = 64, .max_seqs = 4};
    o.spec = {.method = SpecMethod::head, .max_k = 1, .adaptive = false, .head_file = file};
    auto s = core(*model_, *tok_, o, 64);
    EXPECT_TRUE(s);
    if (!s) return 0.0;
    run_all(*s, reqs);
    const EngineStats st = s->stats();
    EXPECT_GT(st.spec_draft_tokens, 100);
    return double(st.spec_accepted_tokens) / double(std::max<int64_t>(st.spec_draft_tokens, 1));
  };
  std::vector<int32_t> all(static_cast<size_t>(model_->config().n_vocab));
  std::iota(all.begin(), all.end(), 0);
  auto fresh = compress::EagleHead::init(*model_, 128, all, 1);
  ASSERT_TRUE(fresh.ok());
  const std::string fresh_file = head_file_ + ".fresh.gguf";
  ASSERT_TRUE(fresh->save(fresh_file).ok());
  const double trained = acceptance(head_file_), untrained = acceptance(fresh_file);
  std::filesystem::remove(fresh_file);
  std::printf("first-position acceptance: distilled %.1f%%, untrained %.1f%%\n", 100 * trained, 100 * untrained);
  EXPECT_GT(trained, 0.4);
  EXPECT_LT(untrained, 0.15);
}

// The head's probabilities say which drafts will be kept: with drafting cut where the product of
// its probabilities falls below 0.5, fewer drafts are verified and a larger share of them is kept
// than when every position drafts (K = 4 always), the same text either way.
TEST_F(EagleDraft, TheHeadsConfidenceEndsDraftsItIsUnsureOf) {
  const std::vector<GenerationParams> reqs = story_requests();
  struct Run {
    std::map<RequestId, std::vector<int32_t>> tokens;
    EngineStats stats;
  };
  auto run_with = [&](double floor) {
    EngineOptions o{.max_batch_tokens = 64, .max_seqs = 4};
    o.spec = {.method = SpecMethod::head, .max_k = 4, .adaptive = false, .head_file = head_file_, .head_min_confidence = floor};
    auto s = core(*model_, *tok_, o, 64);
    EXPECT_TRUE(s);
    if (!s) return Run{};
    auto tokens = run_all(*s, reqs);
    return Run{std::move(tokens), s->stats()};
  };
  const Run all = run_with(0.0), sure = run_with(0.5);
  EXPECT_EQ(all.tokens, sure.tokens);
  const auto kept = [](const EngineStats& st) { return double(st.spec_accepted_tokens) / double(std::max<int64_t>(st.spec_draft_tokens, 1)); };
  std::printf("every position: %lld drafts, %.1f%% kept; cut below 0.5: %lld drafts, %.1f%% kept\n",
              static_cast<long long>(all.stats.spec_draft_tokens), 100 * kept(all.stats),
              static_cast<long long>(sure.stats.spec_draft_tokens), 100 * kept(sure.stats));
  EXPECT_LT(sure.stats.spec_draft_tokens, all.stats.spec_draft_tokens * 3 / 4);
  EXPECT_GT(kept(sure.stats), kept(all.stats) + 0.1);
}

}  // namespace

// The proposer runs the head on quantized weights (its matrices Q8_0, its readout rows requantized
// to Q4_0): its first draft is the head's own F32 pick most of the time, also for a head whose tokens
// are a subset of the vocabulary (readout row i is token tokens[i], not token i: a row read for
// the wrong token leaves almost no pick in common).
TEST_F(EagleDraft, TheProposersDraftsAreTheHeadsOwnPicks) {
  const ModelConfig& c = model_->config();
  std::vector<int32_t> odd;
  for (int32_t t = 1; t < c.n_vocab; t += 2) odd.push_back(t);
  auto head = compress::EagleHead::init(*model_, 128, odd, 7);
  ASSERT_TRUE(head.ok());
  const std::string file = head_file_ + ".odd.gguf";
  ASSERT_TRUE(head->save(file).ok());
  auto pool = std::make_shared<ThreadPool>(2);
  auto proposer = spec::eagle_proposer(*model_, file, pool, [] { return int64_t(0); }, 0.0);
  std::filesystem::remove(file);
  ASSERT_TRUE(proposer.ok()) << proposer.error();
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.f, 1.f);
  const int64_t d = c.n_embd;
  std::vector<float> h(static_cast<size_t>(d)), e(static_cast<size_t>(d)), z(odd.size());
  int same = 0;
  const int n = 200;
  for (int i = 0; i < n; ++i) {
    for (float& v : h) v = g(rng);
    const std::vector<int32_t> context = {1, int32_t(rng() % uint32_t(c.n_vocab))};
    head->embed(context.back(), e.data());
    head->forward(h.data(), e.data(), 1, z.data(), pool.get());
    const int32_t want = odd[size_t(std::max_element(z.begin(), z.end()) - z.begin())];
    (*proposer)->observe_hidden(i, h, context.size());
    const std::vector<int32_t> got = (*proposer)->propose(i, context, 1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0] % 2, 1) << "a draft outside the head's tokens";
    same += got[0] == want;
    (*proposer)->release(i);
  }
  std::printf("the proposer's first draft is the F32 head's pick in %d of %d\n", same, n);
  EXPECT_GE(same, n * 7 / 10);  // 81% measured: random states leave close calls that the Q4_0 rows flip
}
