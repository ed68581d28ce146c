// The serving engine on real models: batch invariance as a contract (alone == among 16 ==
// after a prefix-cache hit == after preemption), stop rules, logprobs, aborts returning KV.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "backends/engine_factory.h"
#include "engine/engine.h"
#include "engine/stop_matcher.h"

using namespace kvasir;
using namespace kvasir::engine;

namespace {

std::string shared_path(const std::string& rel) { return std::string(KVASIR_SHARED_DIR) + "/" + rel; }

struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
};

Loaded load(const std::string& name) {
  auto m = Model::load(shared_path("models/" + name + ".gguf"));
  EXPECT_TRUE(m.ok()) << m.error();
  auto t = Tokenizer::from_gguf((*m)->gguf());
  EXPECT_TRUE(t.ok()) << t.error();
  return {std::move(*m), std::make_unique<Tokenizer>(std::move(*t))};
}

// An engine on the CPU runner with a KV pool of kv_blocks blocks (0: the default size).
std::unique_ptr<EngineCore> core(const Loaded& l, EngineOptions o, int64_t kv_blocks = 0) {
  o.num_threads = 2;
  auto c = backends::create_engine_core(*l.model, *l.tok, {.engine = o, .kv = {.n_blocks = kv_blocks}});
  EXPECT_TRUE(c.ok()) << c.error();
  return std::move(*c);
}

struct Result_ {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::None;
  Usage usage;
  std::vector<TokenLogprob> logprobs;
};

// Runs every request to completion; returns results by request id.
std::map<RequestId, Result_> run_all(EngineCore& c, const std::vector<GenerationParams>& reqs,
                                     std::vector<RequestId>* ids = nullptr) {
  std::map<RequestId, Result_> out;
  for (const auto& p : reqs) {
    auto id = c.add_request(p);
    EXPECT_TRUE(id.ok()) << id.error();
    if (ids) ids->push_back(*id);
  }
  std::vector<Delta> deltas;
  for (int guard = 0; c.has_unfinished() && guard < 100000; ++guard) {
    deltas.clear();
    auto st = c.step(deltas);
    EXPECT_TRUE(st.ok()) << st.error();
    for (auto& d : deltas) {
      auto& r = out[d.id];
      r.tokens.insert(r.tokens.end(), d.tokens.begin(), d.tokens.end());
      r.text += d.text;
      r.logprobs.insert(r.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
      if (d.finish != FinishReason::None) {
        r.finish = d.finish;
        r.usage = d.usage;
      }
    }
  }
  return out;
}

std::vector<GenerationParams> random_requests(int n, int32_t vocab, uint32_t seed, bool sampled) {
  std::mt19937 rng(seed);
  std::vector<GenerationParams> reqs;
  for (int i = 0; i < n; ++i) {
    GenerationParams p;
    const int len = 1 + int(rng() % 40);
    for (int k = 0; k < len; ++k) p.prompt.push_back(int32_t(rng() % uint32_t(vocab)));
    p.stop.max_tokens = 4 + int(rng() % 20);
    p.stop.ignore_eos = true;
    p.sampling = sampled ? SamplingParams{.temperature = 0.9f, .top_k = 0, .top_p = 0.95f, .min_p = 0.f, .seed = rng()}
                         : SamplingParams{.temperature = 0.f};
    reqs.push_back(std::move(p));
  }
  return reqs;
}

}  // namespace

class EngineInvariance : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineInvariance, SixteenConcurrentEqualAlone) {
  Loaded l = load(GetParam());
  for (bool sampled : {false, true}) {
    const auto reqs = random_requests(16, int32_t(l.model->config().n_vocab), sampled ? 11 : 12, sampled);
    auto together = core(l, {.max_batch_tokens = 64, .max_seqs = 16}, 256);
    const auto all = run_all(*together, reqs);
    ASSERT_EQ(all.size(), 16u);
    int i = 0;
    for (const auto& [id, r] : all) {
      auto alone_core = core(l, {.max_batch_tokens = 64, .max_seqs = 16, .prefix_cache = false}, 256);
      const auto alone = run_all(*alone_core, {reqs[size_t(i)]});
      EXPECT_EQ(r.tokens, alone.begin()->second.tokens) << "request " << i << (sampled ? " sampled" : " greedy");
      EXPECT_EQ(r.finish, FinishReason::Length);
      EXPECT_EQ(r.usage.completion_tokens, reqs[size_t(i)].stop.max_tokens);
      ++i;
    }
  }
}

TEST_P(EngineInvariance, PrefixHitEqualsColdPrefill) {
  Loaded l = load(GetParam());
  std::mt19937 rng(5);
  GenerationParams p;
  for (int k = 0; k < 70; ++k) p.prompt.push_back(int32_t(rng() % uint32_t(l.model->config().n_vocab)));
  p.stop = {.max_tokens = 12, .ignore_eos = true};
  p.sampling = {.temperature = 0.7f, .seed = 99};
  auto c = core(l, {.max_batch_tokens = 32, .max_seqs = 4}, 64);
  const auto cold = run_all(*c, {p});
  const auto warm = run_all(*c, {p});  // same engine: the prompt's full blocks are cached now
  EXPECT_EQ(cold.begin()->second.usage.cached_tokens, 0);
  EXPECT_EQ(warm.begin()->second.usage.cached_tokens, 64);  // 4 full blocks; never the last token
  EXPECT_EQ(cold.begin()->second.tokens, warm.begin()->second.tokens);
  EXPECT_GT(c->stats().prefix_hits, 0);
}

TEST_P(EngineInvariance, PreemptedEqualsUninterrupted) {
  Loaded l = load(GetParam());
  const auto reqs = random_requests(6, int32_t(l.model->config().n_vocab), 21, true);
  auto roomy = core(l, {.max_batch_tokens = 32, .max_seqs = 6, .prefix_cache = false}, 128);
  const auto ref = run_all(*roomy, reqs);
  // 8 blocks of 16 tokens for 6 sequences of up to 60 tokens: preemption is certain.
  auto tight = core(l, {.max_batch_tokens = 32, .max_seqs = 6, .prefix_cache = false}, 8);
  const auto got = run_all(*tight, reqs);
  EXPECT_GT(tight->stats().num_preemptions, 0);
  ASSERT_EQ(got.size(), ref.size());
  for (auto a = ref.begin(), b = got.begin(); a != ref.end(); ++a, ++b) EXPECT_EQ(a->second.tokens, b->second.tokens);
  EXPECT_EQ(tight->stats().kv_blocks_used, 0);
}

// Copy-heavy prompts (a random passage, then its start again) and random ones: greedy tokens
// with n-gram speculation, in a crowd with tiny prefill chunks and preemption, equal the tokens
// without it, with the controller and with a fixed K.
std::vector<GenerationParams> copy_heavy_requests(int n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<GenerationParams> reqs;
  for (int i = 0; i < n; ++i) {
    GenerationParams p;
    std::vector<int32_t> passage;
    for (int k = 0; k < 12 + int(rng() % 20); ++k) passage.push_back(int32_t(rng() % uint32_t(vocab)));
    p.prompt = passage;
    if (i % 3 != 2) p.prompt.insert(p.prompt.end(), passage.begin(), passage.begin() + 4);  // copying starts
    p.stop = {.max_tokens = 16 + int(rng() % 16), .ignore_eos = true};
    p.sampling = {.temperature = 0.f};
    reqs.push_back(std::move(p));
  }
  return reqs;
}

TEST_P(EngineInvariance, SpeculationKeepsGreedyTokens) {
  Loaded l = load(GetParam());
  const auto reqs = copy_heavy_requests(8, int32_t(l.model->config().n_vocab), 31);
  auto plain = core(l, {.max_batch_tokens = 64, .max_seqs = 8}, 128);
  const auto ref = run_all(*plain, reqs);
  for (bool adaptive : {true, false}) {
    EngineOptions o{.max_batch_tokens = 16, .max_seqs = 8};
    o.spec = {.method = SpecMethod::ngram, .max_k = 4, .adaptive = adaptive};
    auto spec = core(l, o, 10);
    const auto got = run_all(*spec, reqs);
    ASSERT_EQ(got.size(), ref.size());
    for (auto a = ref.begin(), b = got.begin(); a != ref.end(); ++a, ++b)
      EXPECT_EQ(a->second.tokens, b->second.tokens) << "adaptive " << adaptive;
    const EngineStats st = spec->stats();
    EXPECT_GT(st.spec_draft_tokens, 0);
    EXPECT_GT(st.num_preemptions, 0);
    // Per draft position: the totals split exactly, and position j+1 is only ever accepted
    // after position j was.
    ASSERT_EQ(st.spec_draft_tokens_at.size(), 4u);
    int64_t drafted = 0, accepted = 0;
    for (size_t j = 0; j < 4; ++j) {
      drafted += st.spec_draft_tokens_at[j];
      accepted += st.spec_accepted_tokens_at[j];
      EXPECT_LE(st.spec_accepted_tokens_at[j], st.spec_draft_tokens_at[j]);
      if (j > 0) EXPECT_LE(st.spec_accepted_tokens_at[j], st.spec_accepted_tokens_at[j - 1]);
    }
    EXPECT_EQ(drafted, st.spec_draft_tokens);
    EXPECT_EQ(accepted, st.spec_accepted_tokens);
    EXPECT_EQ(st.kv_blocks_used, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, EngineInvariance,
                         ::testing::Values("stories260K", "fixture-llama-q4_k_m", "fixture-gemma3-q8_0",
                                           "next/fixture-qwen3moe-q4_k", "next/fixture-gemma2-q8_0",
                                           "next/fixture-phi3-f16"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(Engine, StopStringsMaxTokensAndLogprobs) {
  Loaded l = load("stories260K");
  auto c = core(l, {.max_batch_tokens = 64, .max_seqs = 4}, 64);
  GenerationParams p;
  p.prompt = l.tok->encode("Once upon a time");
  p.sampling = {.temperature = 0.f};
  p.stop.max_tokens = 64;
  auto full = run_all(*c, {p}).begin()->second;
  // Greedy: ", there was a little girl named Lily. She loved to play outside..."
  ASSERT_NE(full.text.find("Lily"), std::string::npos) << full.text;
  p.stop.stop_strings = {"Lily"};
  auto stopped = run_all(*c, {p}).begin()->second;
  EXPECT_EQ(stopped.finish, FinishReason::StopString);
  EXPECT_EQ(stopped.text, full.text.substr(0, full.text.find("Lily")));
  p.stop.stop_strings.clear();
  p.stop.max_tokens = 5;
  p.top_logprobs = 3;
  auto short_run = run_all(*c, {p}).begin()->second;
  EXPECT_EQ(short_run.finish, FinishReason::Length);
  EXPECT_EQ(short_run.tokens.size(), 5u);
  ASSERT_EQ(short_run.logprobs.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    const auto& lp = short_run.logprobs[i];
    ASSERT_EQ(lp.top.size(), 3u);
    EXPECT_EQ(lp.top[0].first, lp.token);  // greedy picks the most likely token
    EXPECT_LE(lp.logprob, 0.f);
    EXPECT_GE(lp.top[0].second, lp.top[1].second);
  }
  // Chosen alternatives (a cross-encoder's "yes" and "no"): exactly those ids, in that order, with
  // the logprobs the top-k list gives them.
  const int32_t a = short_run.logprobs[0].top[2].first, b = short_run.logprobs[0].top[0].first;
  p.logprob_tokens = {a, b};
  auto chosen = run_all(*c, {p}).begin()->second;
  ASSERT_EQ(chosen.logprobs.size(), 5u);
  ASSERT_EQ(chosen.logprobs[0].top.size(), 2u);
  EXPECT_EQ(chosen.logprobs[0].top[0].first, a);
  EXPECT_EQ(chosen.logprobs[0].top[1].first, b);
  EXPECT_FLOAT_EQ(chosen.logprobs[0].top[0].second, short_run.logprobs[0].top[2].second);
  EXPECT_FLOAT_EQ(chosen.logprobs[0].top[1].second, short_run.logprobs[0].top[0].second);
  p.logprob_tokens = {int32_t(l.tok->n_vocab())};
  EXPECT_FALSE(c->add_request(p));
}

TEST(Engine, StopTokensAndMinTokens) {
  Loaded l = load("stories260K");
  auto c = core(l, {.max_batch_tokens = 64, .max_seqs = 4}, 64);
  GenerationParams p;
  p.prompt = l.tok->encode("Once upon a time");
  p.stop.max_tokens = 300;
  // llama2.c's stories end where the model predicts <s> (id 1), the story separator: a stop token.
  p.stop.stop_token_ids = {1};
  // Find a seed whose story ends within 300 tokens (most do).
  Result_ r;
  for (uint64_t seed = 1; seed < 20 && r.finish != FinishReason::Stop; ++seed) {
    p.sampling = {.temperature = 0.8f, .seed = seed};
    r = run_all(*c, {p}).begin()->second;
  }
  ASSERT_EQ(r.finish, FinishReason::Stop);
  EXPECT_EQ(r.usage.completion_tokens, int32_t(r.tokens.size()) + 1);  // the stop token counts, unseen
  const size_t natural = r.tokens.size();
  p.stop.min_tokens = int32_t(natural) + 5;
  auto longer = run_all(*c, {p}).begin()->second;
  EXPECT_GE(longer.tokens.size(), natural + 5);
  p.stop.min_tokens = 0;
  p.stop.stop_token_ids.clear();
  p.stop.max_tokens = int32_t(natural) + 10;
  auto ignored = run_all(*c, {p}).begin()->second;
  EXPECT_EQ(ignored.finish, FinishReason::Length);
  EXPECT_EQ(ignored.tokens.size(), natural + 10);
}

TEST(Engine, RejectsBadRequests) {
  Loaded l = load("stories260K");
  auto c = core(l, {.max_batch_tokens = 64, .max_seqs = 4}, 8);  // 128-token context
  GenerationParams p;
  EXPECT_FALSE(c->add_request(p).ok());  // empty
  p.prompt = {1, 100000};
  EXPECT_FALSE(c->add_request(p).ok());
  p.prompt.assign(128, 5);
  auto r = c->add_request(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("context_length_exceeded"), std::string::npos);
  p.prompt = {1, 2};
  p.sampling.temperature = -1;
  EXPECT_FALSE(c->add_request(p).ok());
  EXPECT_FALSE(c->has_unfinished());
}

TEST(Engine, ThreadedSubmitStreamAndAbortFreeEveryBlock) {
  Loaded l = load("stories260K");
  auto c = core(l, {.max_batch_tokens = 64, .max_seqs = 16}, 128);
  Engine engine(std::move(c));
  std::vector<std::thread> clients;
  std::atomic<int> finished{0}, aborted{0};
  for (int i = 0; i < 12; ++i) {
    clients.emplace_back([&, i] {
      GenerationParams p;
      p.prompt = engine.tokenizer().encode("Once upon a time");
      p.sampling = {.temperature = 0.8f, .seed = uint64_t(i)};
      p.stop = {.max_tokens = 200, .ignore_eos = true};
      auto s = engine.submit(p);
      ASSERT_TRUE(s.ok());
      Delta d;
      int n = 0;
      while ((*s)->next(d)) {
        n += int(d.tokens.size());
        if (i % 2 == 0 && n >= 3) engine.abort((*s)->id());  // disconnecting client
        if (d.finish == FinishReason::Abort) aborted++;
        if (d.finish != FinishReason::None) finished++;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(finished.load(), 12);
  EXPECT_EQ(aborted.load(), 6);
  const auto st = engine.stats();
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(st.num_running, 0);
}

TEST(StopMatcher, HoldsBackPossiblePrefixes) {
  StopMatcher m({"END", "\n\n"});
  EXPECT_EQ(m.push("hello E"), "hello ");
  EXPECT_EQ(m.push("N"), "");
  EXPECT_EQ(m.push("x"), "ENx");
  EXPECT_EQ(m.push("a\n"), "a");
  EXPECT_EQ(m.push("\nmore"), "");
  EXPECT_TRUE(m.stopped());
  StopMatcher n({"stop"});
  EXPECT_EQ(n.push("sto"), "");
  EXPECT_EQ(n.flush(), "sto");
}

// The default model (Gemma 3 270M Q4_K_M, installed by make): greedy tokens with n-gram drafts
// equal those without, on a prompt that copies its context; acceptance is reported.
TEST(Engine, SpeculationKeepsGreedyTokensOnTheDefaultModel) {
  const std::string path = std::string(KVASIR_SOURCE_DIR) + "/models/gemma-3-270m-q4_k_m.gguf";
  if (!std::ifstream(path)) GTEST_SKIP() << "the default model is not installed";
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.error();
  auto t = Tokenizer::from_gguf((*m)->gguf());
  ASSERT_TRUE(t.ok()) << t.error();
  Loaded l{std::move(*m), std::make_unique<Tokenizer>(std::move(*t))};
  GenerationParams p;
  p.prompt = l.tok->encode(
      "Repeat the list exactly.\nList: apples, pears, plums, cherries, grapes, figs, dates, limes.\n"
      "Again: apples, pears,");
  p.stop = {.max_tokens = 24};
  p.sampling = {.temperature = 0.f};
  auto plain = core(l, {.max_batch_tokens = 128, .max_seqs = 2}, 64);
  const auto ref = run_all(*plain, {p}).begin()->second;
  EngineOptions o{.max_batch_tokens = 128, .max_seqs = 2};
  o.spec = {.method = SpecMethod::ngram, .max_k = 4, .adaptive = false};
  auto spec = core(l, o, 64);
  const auto got = run_all(*spec, {p}).begin()->second;
  EXPECT_EQ(got.tokens, ref.tokens) << ref.text << " | " << got.text;
  EXPECT_GT(spec->stats().spec_accepted_tokens, 0);
}
