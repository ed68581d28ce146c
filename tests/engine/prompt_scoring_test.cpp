// Prefill-only requests on real models: prompt logprobs (scoring) and pooled embeddings.
// Both are checked against a reference twin: the same model run as one plain sequence
// (model/Session), whose logits and hidden states are bitwise those of any batch (batch
// invariance), so the tolerances only cover float differences in the log-softmax and the pooling
// sum (1e-5 on logprobs, 1e-5 on unit-vector components). The engine side runs them in a crowd,
// with tiny prefill chunks, behind prefix-cache hits and through preemption.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <random>

#include "backends/engine_factory.h"
#include "engine/engine.h"
#include "backends/runner_factory.h"
#include "model/forward.h"

using namespace kvasir;
using namespace kvasir::engine;

namespace {

std::string model_path(const std::string& name) { return std::string(KVASIR_SHARED_DIR) + "/models/" + name + ".gguf"; }

struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
};

std::optional<Loaded> load(const std::string& name) {
  if (!std::ifstream(model_path(name))) return std::nullopt;
  auto m = Model::load(model_path(name));
  if (!m) return std::nullopt;
  auto t = Tokenizer::from_gguf((*m)->gguf());
  if (!t) return std::nullopt;
  return Loaded{std::move(*m), std::make_unique<Tokenizer>(std::move(*t))};
}

// An engine on the CPU runner with a KV pool of kv_blocks blocks (0: the default size).
std::unique_ptr<EngineCore> core(const Loaded& l, EngineOptions o, int64_t kv_blocks = 0) {
  o.num_threads = 2;
  auto c = backends::create_engine_core(*l.model, *l.tok, {.engine = o, .kv = {.n_blocks = kv_blocks}});
  EXPECT_TRUE(c.ok()) << c.error();
  return std::move(*c);
}

struct Outcome {
  std::vector<TokenLogprob> prompt_logprobs;
  int deliveries = 0;  // deltas that carried prompt logprobs
  std::vector<int32_t> tokens;
  std::vector<float> embedding;
  FinishReason finish = FinishReason::None;
  Usage usage;
};

// Long generations that compete for KV blocks, so that a small pool must preempt.
std::vector<GenerationParams> pressure(std::mt19937& rng, int32_t vocab) {
  std::vector<GenerationParams> out;
  for (int i = 0; i < 3; ++i) {
    GenerationParams p;
    for (int k = 0; k < 30; ++k) p.prompt.push_back(int32_t(rng() % uint32_t(vocab)));
    p.stop = {.max_tokens = 40, .ignore_eos = true};
    p.sampling = {.temperature = 0.f};
    out.push_back(std::move(p));
  }
  return out;
}

// Runs `reqs` (then `crowd`, whose outcomes are dropped) to completion; outcomes in `reqs` order.
std::vector<Outcome> run_all(EngineCore& c, const std::vector<GenerationParams>& reqs,
                             const std::vector<GenerationParams>& crowd = {}) {
  std::map<RequestId, Outcome> out;
  std::vector<RequestId> ids;
  for (const auto& p : crowd) EXPECT_TRUE(c.add_request(p).ok());
  for (const auto& p : reqs) {
    auto id = c.add_request(p);
    EXPECT_TRUE(id.ok()) << id.error();
    ids.push_back(*id);
  }
  std::vector<Delta> deltas;
  for (int guard = 0; c.has_unfinished() && guard < 100000; ++guard) {
    deltas.clear();
    auto st = c.step(deltas);
    EXPECT_TRUE(st.ok()) << st.error();
    for (auto& d : deltas) {
      Outcome& o = out[d.id];
      if (!d.prompt_logprobs.empty()) {
        ++o.deliveries;
        o.prompt_logprobs = d.prompt_logprobs;
        EXPECT_TRUE(o.tokens.empty()) << "prompt logprobs come before or with the first token";
      }
      o.tokens.insert(o.tokens.end(), d.tokens.begin(), d.tokens.end());
      if (d.finish != FinishReason::None) {
        o.finish = d.finish;
        o.usage = d.usage;
        o.embedding = d.embedding;
      }
    }
  }
  std::vector<Outcome> ordered;
  for (RequestId id : ids) ordered.push_back(out[id]);
  return ordered;
}

// The reference twin: every position's log-softmax, one sequence fed one token at a time.
struct Reference {
  std::vector<std::vector<double>> logprobs;  // [position][token]
};

Reference reference(const Loaded& l, const std::vector<int32_t>& prompt) {
  auto s = backends::create_session(*l.model, {.n_ctx = 512, .max_batch_tokens = 64, .n_threads = 2});
  EXPECT_TRUE(s.ok());
  Reference r;
  const int64_t V = l.model->config().n_vocab;
  runtime::Session& sess = **s;
  for (size_t i = 0; i < prompt.size(); ++i) {
    auto st = sess.eval(std::span<const int32_t>(&prompt[i], 1), false, [&](int64_t, const float* logits) {
      const double mx = *std::max_element(logits, logits + V);
      double z = 0;
      for (int64_t t = 0; t < V; ++t) z += std::exp(double(logits[t]) - mx);
      std::vector<double> row(static_cast<size_t>(V));
      for (int64_t t = 0; t < V; ++t) row[size_t(t)] = double(logits[t]) - mx - std::log(z);
      r.logprobs.push_back(std::move(row));
    });
    EXPECT_TRUE(st.ok());
  }
  return r;
}

std::vector<int32_t> random_prompt(std::mt19937& rng, int32_t vocab, int len) {
  std::vector<int32_t> p;
  for (int k = 0; k < len; ++k) p.push_back(int32_t(rng() % uint32_t(vocab)));
  return p;
}

}  // namespace

class PromptScoring : public ::testing::TestWithParam<std::string> {};

TEST_P(PromptScoring, LogprobsEqualTheSequenceAloneInAnyBatchAndAfterPreemption) {
  auto l = load(GetParam());
  if (!l) GTEST_SKIP() << "model not available";
  const int32_t vocab = int32_t(l->model->config().n_vocab);
  std::mt19937 rng(5);
  std::vector<GenerationParams> reqs;
  for (int i = 0; i < 6; ++i) {
    GenerationParams p;
    p.prompt = random_prompt(rng, vocab, 1 + int(rng() % 45));
    if (i == 1) p.prompt = reqs[0].prompt;  // the same prompt again: a prefix-cache hit must not skip rows
    p.prompt_logprobs = 3;
    p.stop = {.max_tokens = i % 2 ? 0 : 3, .ignore_eos = true};  // scoring only, or scoring then generating
    p.sampling = {.temperature = 0.f};
    reqs.push_back(std::move(p));
  }
  // Tiny chunks, a crowd, and (second run) a pool too small for everyone: preemption.
  const auto crowd = pressure(rng, vocab);
  auto roomy = core(*l, {.max_batch_tokens = 16, .max_seqs = 9}, 128);
  auto tight = core(*l, {.max_batch_tokens = 16, .max_seqs = 9, .prefix_cache = false}, 6);
  for (auto* c : {roomy.get(), tight.get()}) {
    const auto got = run_all(*c, reqs, crowd);
    ASSERT_EQ(got.size(), reqs.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const Outcome& o = got[i];
      const GenerationParams& p = reqs[i];
      const Reference ref = reference(*l, p.prompt);
      EXPECT_EQ(o.deliveries, 1);
      ASSERT_EQ(o.prompt_logprobs.size(), p.prompt.size());
      EXPECT_EQ(o.prompt_logprobs[0].token, p.prompt[0]);
      EXPECT_TRUE(std::isnan(o.prompt_logprobs[0].logprob));
      for (size_t k = 1; k < p.prompt.size(); ++k) {
        const TokenLogprob& lp = o.prompt_logprobs[k];
        const std::vector<double>& row = ref.logprobs[k - 1];
        EXPECT_EQ(lp.token, p.prompt[k]);
        EXPECT_NEAR(lp.logprob, row[size_t(p.prompt[k])], 1e-5) << "token " << k;
        int32_t rank = 1;
        for (double v : row) rank += v > row[size_t(p.prompt[k])];
        EXPECT_EQ(lp.rank, rank);
        ASSERT_EQ(lp.top.size(), 3u);
        const double best = *std::max_element(row.begin(), row.end());
        EXPECT_NEAR(lp.top[0].second, best, 1e-5);
        EXPECT_NEAR(lp.top[0].second, row[size_t(lp.top[0].first)], 1e-5);
        EXPECT_GE(lp.top[0].second, lp.top[1].second);
      }
      EXPECT_EQ(o.finish, FinishReason::Length);
      EXPECT_EQ(o.usage.prompt_tokens, int32_t(p.prompt.size()));
      EXPECT_EQ(o.usage.completion_tokens, p.stop.max_tokens);
      EXPECT_EQ(int32_t(o.tokens.size()), p.stop.max_tokens);
      EXPECT_EQ(o.usage.cached_tokens, 0);
    }
    EXPECT_EQ(c->stats().kv_blocks_used, 0);
  }
  EXPECT_GT(tight->stats().num_preemptions, 0);
}

TEST_P(PromptScoring, EmbeddingsArePooledFinalHiddenStates) {
  auto l = load(GetParam());
  if (!l) GTEST_SKIP() << "model not available";
  const int32_t vocab = int32_t(l->model->config().n_vocab);
  const int64_t d = l->model->config().n_embd;
  std::mt19937 rng(9);
  std::vector<GenerationParams> reqs;
  for (Pooling pool : {Pooling::mean, Pooling::last, Pooling::cls, Pooling::mean, Pooling::last}) {
    GenerationParams p;
    p.prompt = random_prompt(rng, vocab, 2 + int(rng() % 40));
    p.pooling = pool;
    p.stop.max_tokens = 0;
    reqs.push_back(std::move(p));
  }
  // Reference hidden states: a batch of all the prompt's rows, one sequence, want_hidden on every
  // row, through a bare Forward (the engine's are scheduled in chunks among other sequences).
  auto hidden_of = [&](const std::vector<int32_t>& prompt) {
    auto kv = KvCache::create(l->model->config(), {.n_blocks = 8, .block_size = 16, .type = DType::F16});
    EXPECT_TRUE(kv.ok());
    Forward f(*l->model, {.max_batch_tokens = 64, .num_threads = 2});
    std::vector<int32_t> table{0, 1, 2, 3};
    Batch b;
    b.add_sequence(table);
    for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], int32_t(i), 0, false, true);
    EXPECT_TRUE(f.forward(b, *kv).ok());
    return std::vector<float>(f.hidden(), f.hidden() + int64_t(prompt.size()) * d);
  };
  const auto crowd = pressure(rng, vocab);
  for (bool tight : {false, true}) {
    auto c = tight ? core(*l, {.max_batch_tokens = 16, .max_seqs = 8, .prefix_cache = false}, 6)
                   : core(*l, {.max_batch_tokens = 16, .max_seqs = 8}, 64);
    const auto got = run_all(*c, reqs, crowd);
    ASSERT_EQ(got.size(), reqs.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const Outcome& o = got[i];
      const GenerationParams& p = reqs[i];
      const std::vector<float> h = hidden_of(p.prompt);
      std::vector<double> want(size_t(d), 0.0);
      const size_t n = p.prompt.size();
      for (size_t r = 0; r < n; ++r) {
        const bool take = p.pooling == Pooling::mean || (p.pooling == Pooling::cls && r == 0) ||
                          (p.pooling == Pooling::last && r == n - 1);
        if (take)
          for (int64_t j = 0; j < d; ++j) want[size_t(j)] += h[r * size_t(d) + size_t(j)];
      }
      double norm = 0;
      for (double v : want) norm += v * v;
      ASSERT_EQ(int64_t(o.embedding.size()), d);
      double got_norm = 0;
      for (int64_t j = 0; j < d; ++j) {
        EXPECT_NEAR(o.embedding[size_t(j)], want[size_t(j)] / std::sqrt(norm), 1e-5) << j;
        got_norm += double(o.embedding[size_t(j)]) * o.embedding[size_t(j)];
      }
      EXPECT_NEAR(got_norm, 1.0, 1e-5);
      EXPECT_EQ(o.finish, FinishReason::Length);
      EXPECT_TRUE(o.tokens.empty());
      EXPECT_EQ(o.usage.completion_tokens, 0);
    }
    EXPECT_EQ(c->stats().kv_blocks_used, 0);
    if (tight) EXPECT_GT(c->stats().num_preemptions, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, PromptScoring,
                         ::testing::Values("stories260K", "fixture-gemma3-q8_0", "next/fixture-qwen3moe-q4_k"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(PromptScoring, RejectsWhatCannotBeServed) {
  auto l = load("stories260K");
  if (!l) GTEST_SKIP() << "model not available";
  auto c = core(*l, {.max_batch_tokens = 16, .max_seqs = 2}, 16);
  GenerationParams p;
  p.prompt = {1, 2, 3};
  p.pooling = Pooling::mean;
  p.stop.max_tokens = 4;  // an embedding generates nothing
  EXPECT_FALSE(c->validate(p).ok());
  p.stop.max_tokens = 0;
  EXPECT_TRUE(c->validate(p).ok());
  p.pooling = Pooling::none;
  p.prompt_logprobs = 21;
  EXPECT_FALSE(c->validate(p).ok());
  p.prompt_logprobs = -1;
  EXPECT_TRUE(c->validate(p).ok());  // prefill only: warms the prefix cache
}
