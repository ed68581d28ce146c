// The engine through the runner seam on a FakeRunner, with no model file: many concurrent
// requests (shared prefixes, tiny prefill chunks, a KV pool so small that requests are preempted)
// produce exactly what the reference model gives each request alone, and every block comes back.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "engine/fake_runner.h"
#include "tokenizer/synthetic_vocab.h"

namespace kvasir::engine {
namespace {

using test::FakeRunner;

struct Vocab {
  Vocab() {
    std::vector<std::string> extra;
    for (char c = 'a'; c <= 'z'; ++c) extra.push_back(std::string(1, c));
    for (char c = 'a'; c <= 'z'; ++c) extra.push_back(std::string("\xE2\x96\x81") + c);  // "▁a": word starts
    auto v = test::SyntheticVocab::spm(extra);
    v.writer.set("tokenizer.ggml.eos_token_id", gguf::Value::of_u32(2));
    auto t = v.tokenizer();
    EXPECT_TRUE(t.ok()) << t.error();
    tok = std::make_unique<Tokenizer>(std::move(*t));
  }
  std::unique_ptr<Tokenizer> tok;
};

const Tokenizer& tokenizer() {
  static Vocab v;
  return *v.tok;
}

constexpr int64_t kBlock = 4;

// A draft runner for SpecMethod::draft: its own model (often right) and KV pool.
struct FakeDraft {
  test::FakeModel model;
  int64_t blocks = 64;
  double cost_scale = 0.1;  // its forwards' virtual time relative to the target's
};

// `elapsed`, when given, is the virtual clock both runners advance (it must outlive the engine).
std::unique_ptr<EngineCore> fake_core(int64_t blocks, int32_t max_batch_tokens, int32_t max_seqs,
                                      test::FakeModel model = {}, SpecOptions spec = {},
                                      std::optional<FakeDraft> draft = std::nullopt, int64_t* elapsed = nullptr) {
  auto runner = std::make_unique<FakeRunner>(tokenizer().n_vocab(), blocks, kBlock, max_batch_tokens, model);
  if (elapsed) runner->clock_ns = elapsed;
  EngineOptions o;
  o.clock = [c = runner->clock_ns] { return *c; };  // the runner lives as long as the engine
  o.spec = spec;
  o.max_batch_tokens = max_batch_tokens;
  o.max_seqs = max_seqs;
  std::unique_ptr<FakeRunner> draft_runner;
  if (draft) {
    draft_runner = std::make_unique<FakeRunner>(tokenizer().n_vocab(), draft->blocks, kBlock, max_batch_tokens, draft->model);
    draft_runner->clock_ns = runner->clock_ns;
    draft_runner->cost_scale = draft->cost_scale;
  }
  auto c = EngineCore::create(std::move(runner), tokenizer(), o, std::move(draft_runner));
  EXPECT_TRUE(c.ok()) << c.error();
  return std::move(*c);
}

// What the reference model generates greedily for `prompt` (lowest id wins a tie, EOS ends).
std::vector<int32_t> greedy_reference(std::vector<int32_t> ctx, int32_t max_tokens, test::FakeModel model = {}) {
  std::vector<int32_t> out;
  for (int32_t k = 0; k < max_tokens; ++k) {
    const std::vector<float> l = FakeRunner::reference_logits(ctx, tokenizer().n_vocab(), model);
    const int32_t t = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
    if (tokenizer().is_eog(t)) break;
    out.push_back(t);
    ctx.push_back(t);
  }
  return out;
}

std::map<RequestId, std::vector<int32_t>> run(EngineCore& c, const std::vector<GenerationParams>& reqs) {
  std::map<RequestId, std::vector<int32_t>> out;
  std::vector<RequestId> ids;
  for (const auto& p : reqs) {
    auto id = c.add_request(p);
    EXPECT_TRUE(id.ok()) << id.error();
    ids.push_back(*id);
  }
  std::vector<Delta> deltas;
  for (int guard = 0; c.has_unfinished() && guard < 100000; ++guard) {
    deltas.clear();
    EXPECT_TRUE(c.step(deltas).ok());
    for (auto& d : deltas) out[d.id].insert(out[d.id].end(), d.tokens.begin(), d.tokens.end());
  }
  EXPECT_FALSE(c.has_unfinished());
  std::map<RequestId, std::vector<int32_t>> by_index;
  for (size_t i = 0; i < ids.size(); ++i) by_index[RequestId(i)] = out[ids[i]];
  return by_index;
}

std::vector<GenerationParams> workload(uint64_t seed, int n, float temperature) {
  std::mt19937_64 rng(seed);
  const int32_t V = tokenizer().n_vocab();
  std::vector<int32_t> shared;
  for (int i = 0; i < 9; ++i) shared.push_back(3 + int32_t(rng() % uint64_t(V - 3)));
  std::vector<GenerationParams> reqs;
  for (int r = 0; r < n; ++r) {
    GenerationParams p;
    if (r % 2 == 0) p.prompt = shared;  // half share a 9-token prefix (two full blocks)
    const int extra = 1 + int(rng() % 12);
    for (int i = 0; i < extra; ++i) p.prompt.push_back(3 + int32_t(rng() % uint64_t(V - 3)));
    p.stop.max_tokens = 1 + int32_t(rng() % 24);
    p.sampling.temperature = temperature;
    p.sampling.top_k = 0;  // the whole distribution, as the server's defaults
    p.sampling.top_p = 1.0f;
    p.sampling.min_p = 0.0f;
    p.sampling.seed = seed * 1000 + uint64_t(r);
    reqs.push_back(std::move(p));
  }
  return reqs;
}

TEST(FakeRunnerEngine, CrowdedGreedyOutputsEqualTheReferenceModel) {
  const auto reqs = workload(7, 24, 0.0f);
  // 30 blocks of 4 tokens for 24 requests of up to 21 + 24 tokens: preemption is certain;
  // 8-token steps chunk every prefill.
  auto crowd = fake_core(30, 8, 8);
  const auto got = run(*crowd, reqs);
  for (size_t i = 0; i < reqs.size(); ++i)
    EXPECT_EQ(got.at(RequestId(i)), greedy_reference(reqs[i].prompt, reqs[i].stop.max_tokens)) << "request " << i;
  const EngineStats s = crowd->stats();
  EXPECT_GT(s.num_preemptions, 0);
  EXPECT_GT(s.prefix_hit_tokens, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);  // every block came back
}

TEST(FakeRunnerEngine, SeededSamplingIsTheSameAloneAndInACrowd) {
  const auto reqs = workload(11, 16, 1.0f);
  auto crowd = fake_core(30, 8, 8);
  const auto together = run(*crowd, reqs);
  bool varied = false;
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto alone_core = fake_core(64, 64, 1);
    const auto alone = run(*alone_core, {reqs[i]});
    EXPECT_EQ(together.at(RequestId(i)), alone.at(0)) << "request " << i;
    varied |= together.at(RequestId(i)) != greedy_reference(reqs[i].prompt, reqs[i].stop.max_tokens);
  }
  EXPECT_TRUE(varied);  // temperature 1 did sample, not just follow the favourite
}

TEST(FakeRunnerEngine, TheRunnerMustMatchTheEngine) {
  EngineOptions o;
  o.spec = {.method = SpecMethod::draft};
  auto wrong_block = EngineCore::create(std::make_unique<FakeRunner>(tokenizer().n_vocab(), 64, 4), tokenizer(), o,
                                        std::make_unique<FakeRunner>(tokenizer().n_vocab(), 64, 16));
  EXPECT_FALSE(wrong_block.ok());  // the draft's blocks must be the target's size
  auto same_block = EngineCore::create(std::make_unique<FakeRunner>(tokenizer().n_vocab(), 64, 4), tokenizer(), o,
                                       std::make_unique<FakeRunner>(tokenizer().n_vocab(), 64, 4));
  EXPECT_TRUE(same_block.ok()) << same_block.error();
  o.spec = {};
  auto small_vocab = EngineCore::create(std::make_unique<FakeRunner>(8, 64, 4), tokenizer(), o);
  EXPECT_FALSE(small_vocab.ok());
  o.max_batch_tokens = 1024;
  auto big_batch = EngineCore::create(std::make_unique<FakeRunner>(tokenizer().n_vocab(), 64, 4, 512), tokenizer(), o);
  EXPECT_FALSE(big_batch.ok());
}

// Speculation (n-gram drafts) on a model that copies its context: greedy outputs are exactly the
// reference model's, in a crowd with chunked prefill, prefix hits and preemption, with the
// controller and with a fixed K; most drafts are accepted; every block comes back.
TEST(FakeRunnerEngine, SpeculationKeepsGreedyOutputsExact) {
  const test::FakeModel copier{.copy_period = 5};
  auto reqs = workload(13, 24, 0.0f);
  for (auto& r : reqs) r.stop.max_tokens = 8 + r.stop.max_tokens;
  for (bool adaptive : {true, false}) {
    auto c = fake_core(12, 8, 8, copier, {.method = SpecMethod::ngram, .max_k = 4, .adaptive = adaptive});
    const auto got = run(*c, reqs);
    for (size_t i = 0; i < reqs.size(); ++i)
      EXPECT_EQ(got.at(RequestId(i)), greedy_reference(reqs[i].prompt, reqs[i].stop.max_tokens, copier))
          << "request " << i << " adaptive " << adaptive;
    const EngineStats s = c->stats();
    EXPECT_GT(s.spec_draft_tokens, 100);
    EXPECT_GT(double(s.spec_accepted_tokens), 0.5 * double(s.spec_draft_tokens));
    EXPECT_GT(s.num_preemptions, 0) << s.num_steps << " steps, " << s.generation_tokens_total << " tokens, max_model_len " << s.max_model_len;
    EXPECT_EQ(s.kv_blocks_used, 0);
    EXPECT_GT(s.generation_tokens_total, s.num_steps);  // more than one token per step on average
  }
}

// A draft model that is right about 3 times in 4: greedy outputs stay exactly the reference
// model's in a crowd with chunked prefill, prefix hits and preemption of the target, and with a
// draft KV pool too small for every request (its least recently drafted sequences are evicted);
// drafts are accepted and rejected; every block of both pools comes back.
TEST(FakeRunnerEngine, DraftModelKeepsGreedyOutputsExact) {
  const test::FakeModel target{.copy_period = 5};
  auto reqs = workload(17, 24, 0.0f);
  for (auto& r : reqs) r.stop.max_tokens = 8 + r.stop.max_tokens;
  for (bool adaptive : {true, false}) {
    auto c = fake_core(16, 8, 8, target, {.method = SpecMethod::draft, .max_k = 4, .adaptive = adaptive},
                       FakeDraft{.model = {.copy_period = 5, .err_every = 4}, .blocks = 12});
    const auto got = run(*c, reqs);
    for (size_t i = 0; i < reqs.size(); ++i)
      EXPECT_EQ(got.at(RequestId(i)), greedy_reference(reqs[i].prompt, reqs[i].stop.max_tokens, target))
          << "request " << i << " adaptive " << adaptive;
    const EngineStats s = c->stats();
    EXPECT_GT(s.spec_draft_tokens, 100) << "adaptive " << adaptive;
    EXPECT_GT(double(s.spec_accepted_tokens), 0.4 * double(s.spec_draft_tokens));
    EXPECT_LT(s.spec_accepted_tokens, s.spec_draft_tokens);  // the draft is wrong now and then
    EXPECT_GT(s.num_preemptions, 0);
    EXPECT_EQ(s.kv_blocks_used, 0);
    EXPECT_EQ(s.draft_kv_blocks_used, 0);
    EXPECT_GT(s.generation_tokens_total, s.num_steps);
  }
}

// Random adds and aborts in a crowd that preempts, with each proposer: when everything has ended,
// every block of the target's pool and of the draft's is free.
TEST(FakeRunnerEngine, RandomAbortsWithEveryProposerReturnEveryBlock) {
  const test::FakeModel target{.copy_period = 4};
  for (SpecMethod method : {SpecMethod::ngram, SpecMethod::draft}) {
    std::optional<FakeDraft> draft;
    if (method == SpecMethod::draft) draft = FakeDraft{.model = {.copy_period = 4, .err_every = 3}, .blocks = 10};
    auto c = fake_core(14, 8, 6, target, {.method = method, .max_k = 3, .adaptive = false}, draft);
    std::mt19937_64 rng(23);
    std::vector<RequestId> ids;
    std::vector<Delta> deltas;
    int added = 0;
    for (int step = 0; step < 3000 && (added < 60 || c->has_unfinished()); ++step) {
      if (added < 60 && rng() % 3 == 0) {
        auto reqs = workload(rng(), 1, 0.0f);
        reqs[0].stop.max_tokens = 4 + int32_t(rng() % 20);
        auto id = c->add_request(reqs[0]);
        ASSERT_TRUE(id.ok()) << id.error();
        ids.push_back(*id);
        ++added;
      }
      if (!ids.empty() && rng() % 5 == 0) c->abort(ids[rng() % ids.size()]);
      deltas.clear();
      ASSERT_TRUE(c->step(deltas).ok());
    }
    EXPECT_FALSE(c->has_unfinished());
    const EngineStats s = c->stats();
    EXPECT_GT(s.spec_draft_tokens, 0) << int(method);
    EXPECT_GT(s.num_preemptions, 0) << int(method);
    EXPECT_EQ(s.kv_blocks_used, 0) << int(method);
    EXPECT_EQ(s.draft_kv_blocks_used, 0) << int(method);
  }
}

// A draft that is always wrong costs rows but never changes a token; the controller learns to
// stop drafting (most steps draft nothing) while a fixed K keeps paying for rejected rows.
TEST(FakeRunnerEngine, AWrongDraftModelIsHarmlessAndTheControllerStopsIt) {
  const test::FakeModel target{};
  auto reqs = workload(19, 16, 0.0f);
  for (auto& r : reqs) r.stop.max_tokens = 40;
  int64_t drafted[2] = {0, 0};
  for (bool adaptive : {true, false}) {
    auto c = fake_core(64, 16, 4, target, {.method = SpecMethod::draft, .max_k = 3, .adaptive = adaptive},
                       FakeDraft{.model = {.err_every = 1}});
    const auto got = run(*c, reqs);
    for (size_t i = 0; i < reqs.size(); ++i)
      EXPECT_EQ(got.at(RequestId(i)), greedy_reference(reqs[i].prompt, reqs[i].stop.max_tokens, target)) << "request " << i;
    const EngineStats s = c->stats();
    EXPECT_EQ(s.spec_accepted_tokens, 0);
    drafted[adaptive] = s.spec_draft_tokens;
    EXPECT_EQ(s.draft_kv_blocks_used, 0);
  }
  EXPECT_GT(drafted[0], 600);                // fixed K: 3 rows for nearly every token
  EXPECT_LT(drafted[1] * 10, drafted[0]);    // the controller: probes only
}

// The controller never makes speculation a loss. Four requests at a time with long prompts (each
// a catch-up the draft pays before its first draft) and a draft that is always right but costs
// what the target costs (the model drafting for itself): with the controller the virtual time is
// within 3% of the time without speculation, where a fixed K takes far longer. A cheap draft that
// is often right saves time under the same controller.
TEST(FakeRunnerEngine, TheControllerMakesSpeculationNoLossUnderConcurrency) {
  const test::FakeModel target{.copy_period = 7};
  std::mt19937_64 rng(41);
  std::vector<GenerationParams> reqs(16);
  for (auto& r : reqs) {
    for (int i = 0; i < 120; ++i) r.prompt.push_back(3 + int32_t(rng() % uint64_t(tokenizer().n_vocab() - 3)));
    r.stop.max_tokens = 48;
    r.sampling.temperature = 0;
  }
  auto elapsed = [&](SpecOptions spec, std::optional<FakeDraft> draft) {
    int64_t ns = 0;
    auto c = fake_core(4096, 512, 4, target, spec, draft, &ns);
    const auto got = run(*c, reqs);
    for (size_t i = 0; i < reqs.size(); ++i)
      EXPECT_EQ(got.at(RequestId(i)), greedy_reference(reqs[i].prompt, reqs[i].stop.max_tokens, target)) << i;
    return double(ns);
  };
  const double plain = elapsed({}, std::nullopt);
  const FakeDraft costly{.model = target, .blocks = 4096, .cost_scale = 1.0};
  const double controlled = elapsed({.method = SpecMethod::draft, .max_k = 4}, costly);
  const double fixed = elapsed({.method = SpecMethod::draft, .max_k = 4, .adaptive = false}, costly);
  EXPECT_LT(controlled, 1.03 * plain) << "fixed K: " << fixed / plain;
  EXPECT_GT(fixed, 1.3 * plain);  // what the controller avoided
  const FakeDraft cheap{.model = {.copy_period = 7, .err_every = 8}, .blocks = 4096, .cost_scale = 0.1};
  EXPECT_LT(elapsed({.method = SpecMethod::draft, .max_k = 4}, cheap), 0.9 * plain);
}

// One rejection must not keep K short for good: a draft position that was never kept stays at the
// rate of its first try only until the positions before it keep getting accepted. 24 single
// requests with a cheap draft that is wrong on about 1 context in 8: in each, most drafts reach
// the third position, and the controller saves a third of the virtual time against plain decoding.
TEST(FakeRunnerEngine, TheControllerLearnsDeeperDraftsAfterAnEarlyRejection) {
  const test::FakeModel target{.copy_period = 7};
  const FakeDraft cheap{.model = {.copy_period = 7, .err_every = 8}, .blocks = 4096, .cost_scale = 0.1};
  std::mt19937_64 rng(5);
  double plain_ns = 0, spec_ns = 0;
  for (int trial = 0; trial < 24; ++trial) {
    GenerationParams p;
    for (int i = 0; i < 24; ++i) p.prompt.push_back(3 + int32_t(rng() % uint64_t(tokenizer().n_vocab() - 3)));
    p.stop.max_tokens = 200;
    p.sampling.temperature = 0;
    int64_t ns = 0;
    auto plain = fake_core(4096, 512, 4, target, {}, std::nullopt, &ns);
    run(*plain, {p});
    plain_ns += double(ns);
    ns = 0;
    auto c = fake_core(4096, 512, 4, target, {.method = SpecMethod::draft, .max_k = 4}, cheap, &ns);
    const auto got = run(*c, {p});
    EXPECT_EQ(got.at(0), greedy_reference(p.prompt, 200, target));
    spec_ns += double(ns);
    const EngineStats st = c->stats();
    ASSERT_GE(st.spec_draft_tokens_at.size(), 3u);
    // Without the drift, 4 of these 24 requests stayed short after an early rejection (4 of 94
    // drafts reached the third position in the worst); with it the fewest is 38 of 53.
    EXPECT_GT(st.spec_draft_tokens_at[2], st.spec_draft_tokens_at[0] / 2)
        << "trial " << trial << ": " << st.spec_draft_tokens_at[2] << " of " << st.spec_draft_tokens_at[0] << " drafts reached the third position";
  }
  EXPECT_LT(spec_ns, 0.67 * plain_ns);
}

// Sampling at temperature 1 keeps its distribution under speculation: the joint distribution of
// the first 3 tokens over 20,000 seeded requests without drafts and with n-gram drafts, then with
// a draft model's (K = 3 always), agree under a two-sample chi-square test at p = 1e-4 (64 cells: 4 possible tokens per position).
TEST(FakeRunnerEngine, SpeculationKeepsTheSampledDistribution) {
  const test::FakeModel model{.copy_period = 3, .support = 4};
  const int kSamples = 20000;
  auto histogram = [&](SpecOptions spec, std::optional<FakeDraft> draft = std::nullopt) {
    std::map<std::vector<int32_t>, int> h;
    auto c = fake_core(4096, 256, 64, model, spec, draft);
    std::vector<GenerationParams> reqs;
    for (int i = 0; i < kSamples; ++i) {
      GenerationParams p;
      p.prompt = {3, 4, 5, 3, 4, 5, 3, 4};
      p.stop.max_tokens = 3;
      p.stop.ignore_eos = true;
      p.sampling = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = uint64_t(i) * 7919 + 1};
      reqs.push_back(std::move(p));
      if (reqs.size() == 512 || i + 1 == kSamples) {
        for (const auto& [id, toks] : run(*c, reqs)) h[toks]++;
        reqs.clear();
      }
    }
    return std::make_pair(h, c->stats());
  };
  const auto [plain, plain_stats] = histogram({});
  EXPECT_EQ(plain_stats.spec_draft_tokens, 0);
  const std::pair<SpecOptions, std::optional<FakeDraft>> variants[] = {
      {{.method = SpecMethod::ngram, .max_k = 3, .adaptive = false}, std::nullopt},
      {{.method = SpecMethod::draft, .max_k = 3, .adaptive = false}, FakeDraft{.model = {.copy_period = 3, .support = 4, .err_every = 3}, .blocks = 1024}},
  };
  for (const auto& [options, draft] : variants) {
    const auto [spec, spec_stats] = histogram(options, draft);
    EXPECT_GT(spec_stats.spec_draft_tokens, kSamples / 2);  // it did speculate
    EXPECT_GT(spec_stats.spec_accepted_tokens, 0);
    EXPECT_LT(spec_stats.spec_accepted_tokens, spec_stats.spec_draft_tokens);  // and it did reject
    std::map<std::vector<int32_t>, std::pair<int, int>> cells;
    for (const auto& [k, n] : plain) cells[k].first = n;
    for (const auto& [k, n] : spec) cells[k].second = n;
    double chi2 = 0;
    for (const auto& [k, n] : cells) {
      const double a = n.first, b = n.second, e = (a + b) / 2;  // equal sample sizes
      chi2 += (a - e) * (a - e) / e + (b - e) * (b - e) / e;
    }
    const double dof = double(cells.size()) - 1;
    const double critical = dof * std::pow(1 - 2 / (9 * dof) + 3.719 * std::sqrt(2 / (9 * dof)), 3);  // p = 1e-4
    EXPECT_GE(cells.size(), 40u);
    EXPECT_LT(chi2, critical) << "cells " << cells.size() << " method " << int(options.method);
  }
}

// Prefill/decode disaggregation: a pin_kv prefill reports its blocks as its chunks compute them
// (each report extends the last, ids never change, every reported block already holds its
// tokens' K/V and keeps it while a crowd is preempted around it), the final delta names every
// full block, and the pin outlives the request until released, also after an abort.
TEST(FakeRunnerEngine, APinnedPrefillReportsItsBlocksAsChunksComputeThem) {
  GenerationParams pin;
  for (int32_t i = 0; i < 38; ++i) pin.prompt.push_back(3 + (i * 7) % 40);  // 9 full blocks and 2 tokens
  pin.stop.max_tokens = 0;
  pin.pin_kv = true;
  auto c = fake_core(24, 8, 6);
  const auto& runner = dynamic_cast<FakeRunner&>(c->runner());
  auto holds_prompt = [&](const std::vector<int32_t>& blocks) {
    for (size_t b = 0; b < blocks.size(); ++b)
      for (int32_t o = 0; o < int32_t(kBlock); ++o)
        if (runner.kv_token(blocks[b], o) != pin.prompt[b * size_t(kBlock) + size_t(o)]) return false;
    return true;
  };
  auto id = c->add_request(pin);
  ASSERT_TRUE(id.ok()) << id.error();
  for (auto& r : workload(29, 12, 0.0f)) ASSERT_TRUE(c->add_request(r).ok());
  std::vector<int32_t> reported;
  int64_t hold = 0;
  int reports = 0;
  bool finished = false;
  std::vector<Delta> deltas;
  for (int guard = 0; c->has_unfinished() && guard < 10000; ++guard) {
    deltas.clear();
    ASSERT_TRUE(c->step(deltas).ok());
    for (const Delta& d : deltas) {
      if (d.id != *id) continue;
      if (d.finish != FinishReason::None) {
        finished = true;
        EXPECT_EQ(d.finish, FinishReason::Length);
      }
      if (!d.kv_hold) continue;
      if (hold) EXPECT_EQ(d.kv_hold, hold);
      hold = d.kv_hold;
      ASSERT_GT(d.kv_blocks.size(), reported.size());
      EXPECT_TRUE(std::equal(reported.begin(), reported.end(), d.kv_blocks.begin())) << "a reported block moved";
      reported = d.kv_blocks;
      ++reports;
      EXPECT_TRUE(holds_prompt(reported)) << "a block was reported before it was computed (report " << reports << ")";
    }
  }
  EXPECT_TRUE(finished);
  EXPECT_GE(reports, 5);  // 9 blocks in steps of at most 8 tokens (2 blocks)
  EXPECT_EQ(reported.size(), 9u);
  EXPECT_GT(c->stats().num_preemptions, 0);
  EXPECT_TRUE(holds_prompt(reported)) << "a pinned block was overwritten";
  EXPECT_GT(c->stats().kv_blocks_used, 0);
  c->release_kv(hold);
  EXPECT_EQ(c->stats().kv_blocks_used, 0);

  // Aborted half-way: the blocks reported so far stay pinned until released.
  auto c2 = fake_core(24, 8, 2);
  auto id2 = c2->add_request(pin);
  ASSERT_TRUE(id2.ok());
  int64_t hold2 = 0;
  for (int guard = 0; hold2 == 0 && guard < 100; ++guard) {
    deltas.clear();
    ASSERT_TRUE(c2->step(deltas).ok());
    for (const Delta& d : deltas) hold2 = d.kv_hold ? d.kv_hold : hold2;
  }
  ASSERT_NE(hold2, 0);
  c2->abort(*id2);
  for (int guard = 0; c2->has_unfinished() && guard < 100; ++guard) {
    deltas.clear();
    ASSERT_TRUE(c2->step(deltas).ok());
  }
  EXPECT_GT(c2->stats().kv_blocks_used, 0);
  c2->release_kv(hold2);
  EXPECT_EQ(c2->stats().kv_blocks_used, 0);
}


// Admission under a flood (virtual time: 1 ms a step, 20 us a row; 8 seats that turn over every
// ~20 steps): a request of the flooding tenant with a 100 ms TTFT deadline is refused at once, with
// a Retry-After; the same request from another tenant is forecast by its fair share (the next free
// seat), accepted, and served within the deadline; nothing leaks.
TEST(FakeRunnerEngine, AdmissionRefusesAtOnceWhatItsForecastSaysIsLateAndServesTheRest) {
  int64_t elapsed = 0;
  Engine engine(fake_core(8192, 64, 8, {}, {}, std::nullopt, &elapsed));
  std::mt19937_64 rng(7);
  auto request = [&](const std::string& tenant, double deadline_ms, int32_t max_tokens = 20) {
    GenerationParams p;
    for (int i = 0; i < 40; ++i) p.prompt.push_back(3 + int32_t(rng() % uint64_t(tokenizer().n_vocab() - 3)));
    p.stop.max_tokens = max_tokens;
    p.stop.ignore_eos = true;
    p.sampling.temperature = 0;
    p.tenant = tenant;
    p.ttft_deadline_ms = deadline_ms;
    return p;
  };
  std::vector<std::shared_ptr<RequestStream>> flood;
  for (int i = 0; i < 2000; ++i) {
    auto s = engine.submit(request("flood", 0));  // ~5,000 steps of work: still queued below
    ASSERT_TRUE(s.ok()) << s.error();
    flood.push_back(*s);
  }
  for (int i = 0; i < 2000 && engine.stats().num_steps < 20; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_GE(engine.stats().num_steps, 20);

  const auto t0 = std::chrono::steady_clock::now();
  auto late = engine.submit(request("flood", 100));
  const double submit_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.error_code(), ErrorCode::exhausted);
  EXPECT_GT(late.error_info().retry_after_ms, 0);
  EXPECT_LT(submit_ms, 5.0);  // an answer, not a wait
  EXPECT_EQ(engine.stats().num_refused, 1);

  auto polite = engine.submit(request("polite", 100));
  ASSERT_TRUE(polite.ok()) << polite.error();
  Delta d;
  double ttft_ms = -1;
  while ((*polite)->next(d))
    if (d.finish != FinishReason::None) ttft_ms = d.timings.ttft_ms;
  EXPECT_GE(ttft_ms, 0);
  EXPECT_LE(ttft_ms, 100.0);
  // Without fair share (everyone one tenant) the same request is refused: it would queue behind
  // the flood.
  auto fcfs = engine.submit(request("flood", 100));
  EXPECT_FALSE(fcfs.ok());
  engine.abort_all();
  for (auto& s : flood)
    while (s->next(d)) {
    }
  EXPECT_TRUE(engine.drain(std::chrono::steady_clock::now() + std::chrono::seconds(10)));
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
}

// A proposer that scores its drafts (as the trained head does): the reference model's token with
// probability 0.95 where a hash of the context says "easy", a wrong one with probability 0.05
// where it says "hard" (about half the contexts), K drafts each, going on from its own drafts.
class ScoredFake final : public spec::Proposer {
 public:
  explicit ScoredFake(test::FakeModel m) : model_(m) {}
  std::vector<int32_t> propose(int64_t id, std::span<const int32_t> context, int32_t max_k) override {
    spec::DraftJob job{.id = id, .context = context, .k = max_k};
    (void)fill(std::span<spec::DraftJob>(&job, 1));
    return job.draft;
  }
  bool scores_drafts() const override { return true; }
  Status fill(std::span<spec::DraftJob> jobs) override {
    const int64_t V = tokenizer().n_vocab();
    for (spec::DraftJob& j : jobs) {
      j.draft.clear();
      j.confidence.clear();
      std::vector<int32_t> ctx(j.context.begin(), j.context.end());
      for (int32_t i = 0; i < j.k; ++i) {
        const std::vector<float> l = FakeRunner::reference_logits(ctx, V, model_);
        int32_t t = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
        uint64_t h = 7;
        for (int32_t c : ctx) h = (h ^ uint64_t(uint32_t(c))) * 1099511628211ull;
        const bool easy = (h >> 13) % 2 == 0;
        if (!easy) t = 3 + (t - 3 + 1) % int32_t(V - 3);
        j.draft.push_back(t);
        j.confidence.push_back(easy ? 0.95f : 0.05f);
        ++offered, offered_right += easy;
        ctx.push_back(t);
      }
    }
    return {};
  }
  int64_t offered = 0, offered_right = 0;

 private:
  test::FakeModel model_;
};

// The controller prices a scoring proposer's drafts by their probabilities, calibrated against
// what verification kept: of drafts that are right about half the time it keeps the sure ones
// and learns to pass the unsure ones over (prior 0.3 for a probability of 0.05, learnt down to
// ~0), so that most of what it verifies is accepted, where pricing by the positions' record
// alone would verify the proposer's mix. Lossless, and faster than plain decoding in virtual time.
TEST(FakeRunnerEngine, ScoredDraftsArePricedByTheirCalibratedProbability) {
  const test::FakeModel target{};
  std::mt19937_64 rng(9);
  std::vector<GenerationParams> reqs;
  for (int r = 0; r < 6; ++r) {
    GenerationParams p;
    for (int i = 0; i < 12; ++i) p.prompt.push_back(3 + int32_t(rng() % uint64_t(tokenizer().n_vocab() - 3)));
    p.stop = {.max_tokens = 150, .ignore_eos = true};
    p.sampling.temperature = 0;
    reqs.push_back(std::move(p));
  }
  int64_t plain_ns = 0, spec_ns = 0;
  std::map<RequestId, std::vector<int32_t>> ref;
  for (const auto& p : reqs) {  // one at a time: batch 1
    auto plain = fake_core(4096, 512, 1, target, {}, std::nullopt, &plain_ns);
    ref[RequestId(ref.size())] = run(*plain, {p}).at(0);
  }
  auto runner = std::make_unique<FakeRunner>(tokenizer().n_vocab(), 4096, kBlock, 512, target);
  runner->clock_ns = &spec_ns;
  EngineOptions o;
  o.clock = [&spec_ns] { return spec_ns; };
  o.spec = {.method = SpecMethod::head, .max_k = 4};
  o.max_batch_tokens = 512;
  o.max_seqs = 1;
  auto fake = std::make_unique<ScoredFake>(target);
  ScoredFake* proposer = fake.get();
  auto c = EngineCore::create(std::move(runner), tokenizer(), o, nullptr, {}, std::move(fake));
  ASSERT_TRUE(c.ok()) << c.error();
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(run(**c, {reqs[i]}).at(0), ref.at(RequestId(i))) << "request " << i;
  const EngineStats st = (*c)->stats();
  const double offered_right = double(proposer->offered_right) / double(std::max<int64_t>(proposer->offered, 1));
  const double kept = double(st.spec_accepted_tokens) / double(std::max<int64_t>(st.spec_draft_tokens, 1));
  std::printf("offered %lld drafts (%.0f%% right), verified %lld, %.0f%% of them kept; time %.2f of plain\n",
              static_cast<long long>(proposer->offered), 100 * offered_right, static_cast<long long>(st.spec_draft_tokens),
              100 * kept, double(spec_ns) / double(plain_ns));
  EXPECT_GT(offered_right, 0.35);
  EXPECT_LT(offered_right, 0.65);
  EXPECT_GT(st.spec_draft_tokens, 150);
  EXPECT_GT(kept, 0.8);
  EXPECT_LT(double(spec_ns), 0.8 * double(plain_ns));
}

}  // namespace
}  // namespace kvasir::engine
