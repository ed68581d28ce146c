// Model drafting on real models: a draft model (stories260K-q4_0 for stories260K), the target's
// own first layers (early exit) and all but a few (layer skipping), and n-gram drafts. Greedy and
// seeded sampled tokens equal the plain engine's in a crowd with tiny prefill chunks and
// preemption; at temperature 1 the joint distribution of the first 3 tokens is the plain
// engine's; every block of both pools comes back.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include "backends/engine_factory.h"
#include "engine/engine.h"
#include "runtime/cpu_runner.h"
#include "spec/draft_head.h"
#include "support/engine_runs.h"

using namespace kvasir;
using namespace kvasir::engine;
using kvasir::test_support::run_all;

namespace {

std::string shared_path(const std::string& rel) { return std::string(KVASIR_SHARED_DIR) + "/" + rel; }

std::shared_ptr<const Model> load_model(const std::string& name) {
  const std::string path = shared_path("models/" + name + ".gguf");
  if (!std::filesystem::exists(path)) return nullptr;
  auto m = Model::load(path);
  EXPECT_TRUE(m.ok()) << m.error();
  return m.ok() ? std::shared_ptr<const Model>(std::move(*m)) : nullptr;
}

// An engine on the CPU runner with a KV pool of kv_blocks blocks (0: the default size).
std::unique_ptr<EngineCore> core(const Model& m, const Tokenizer& t, EngineOptions o, int64_t kv_blocks = 0) {
  o.num_threads = 2;
  auto c = backends::create_engine_core(m, t, {.engine = o, .kv = {.n_blocks = kv_blocks}});
  EXPECT_TRUE(c.ok()) << c.error();
  return c.ok() ? std::move(*c) : nullptr;
}

// Half the prompts copy their start (where drafts are right more often), the rest are random.
std::vector<GenerationParams> crowd(int n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<GenerationParams> reqs;
  for (int i = 0; i < n; ++i) {
    GenerationParams p;
    for (int k = 0; k < 8 + int(rng() % 24); ++k) p.prompt.push_back(int32_t(rng() % uint32_t(vocab)));
    if (i % 2 == 0) p.prompt.insert(p.prompt.end(), p.prompt.begin(), p.prompt.begin() + 4);
    p.stop = {.max_tokens = 12 + int(rng() % 20), .ignore_eos = true};
    p.sampling = {.temperature = 0.f};
    reqs.push_back(std::move(p));
  }
  return reqs;
}

struct Case {
  std::string name, target;
  SpecOptions spec;
  std::string draft;  // SpecMethod::draft: the draft model's file
};

class ModelDrafting : public ::testing::TestWithParam<Case> {};

// Lossless token for token, greedy and sampled: every row draws its position's token as a plain
// step would (the argmax, or the seeded uniform of its position), and a draft token is kept only
// when it is that token. So greedy requests, and sampled ones (temperature 0.9, top-k, top-p,
// seeded), give exactly the plain engine's tokens with every proposer, in a crowd with tiny
// chunks and preemption, with the controller choosing K from timings and with K fixed.
TEST_P(ModelDrafting, TokensEqualThePlainEngineInACrowd) {
  const Case& c = GetParam();
  auto target = load_model(c.target);
  if (!target) GTEST_SKIP() << c.target << " is not available";
  auto tok = Tokenizer::from_gguf(target->gguf());
  ASSERT_TRUE(tok.ok()) << tok.error();
  SpecOptions spec = c.spec;
  if (!c.draft.empty()) {
    spec.draft_model = load_model(c.draft);
    if (!spec.draft_model) GTEST_SKIP() << c.draft << " is not available";
  }
  for (const bool sampled : {false, true}) {
    auto reqs = crowd(10, int32_t(target->config().n_vocab), sampled ? 43 : 41);
    if (sampled)
      for (size_t i = 0; i < reqs.size(); ++i)
        reqs[i].sampling = {.temperature = 0.9f, .top_k = 40, .top_p = 0.95f, .min_p = 0.f, .seed = 1000 + i};
    auto plain = core(*target, *tok, {.max_batch_tokens = 64, .max_seqs = 8}, 128);
    const auto ref = run_all(*plain, reqs);
    for (bool adaptive : {true, false}) {
      EngineOptions o{.max_batch_tokens = 16, .max_seqs = 8};
      o.spec = spec;
      o.spec.adaptive = adaptive;
      auto s = core(*target, *tok, o, 7);
      ASSERT_TRUE(s);
      const auto got = run_all(*s, reqs);
      ASSERT_EQ(got.size(), ref.size());
      for (auto a = ref.begin(), b = got.begin(); a != ref.end(); ++a, ++b)
        EXPECT_EQ(a->second, b->second) << "request " << a->first << " adaptive " << adaptive << " sampled " << sampled;
      const EngineStats st = s->stats();
      if (!adaptive) EXPECT_GT(st.spec_draft_tokens, 50);
      EXPECT_GT(st.num_preemptions, 0);
      EXPECT_EQ(st.kv_blocks_used, 0);
      if (c.spec.method == SpecMethod::draft) EXPECT_GT(st.draft_kv_blocks_total, 0);
      else EXPECT_EQ(st.draft_kv_blocks_total, 0);  // a self-draft writes the target's KV
      EXPECT_EQ(st.draft_kv_blocks_used, 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Drafts, ModelDrafting,
    ::testing::Values(
        Case{"draft_model", "stories260K", {.method = SpecMethod::draft, .max_k = 4}, "stories260K-q4_0"},
        Case{"early_exit", "stories260K", {.method = SpecMethod::early_exit, .max_k = 3, .exit_layer = 3}, ""},
        Case{"layer_skip_llama", "fixture-llama-q4_k_m", {.method = SpecMethod::layer_skip, .max_k = 3, .skip_layers = {1}}, ""},
        Case{"early_exit_gemma3_head", "fixture-gemma3-q8_0",
             {.method = SpecMethod::early_exit, .max_k = 3, .exit_layer = 1, .head_tokens = {0, 1, 2, 5, 9, 100, 200}}, ""},
        Case{"early_exit_qwen3moe", "next/fixture-qwen3moe-q4_k", {.method = SpecMethod::early_exit, .max_k = 2, .exit_layer = 1}, ""},
        Case{"ngram", "stories260K", {.method = SpecMethod::ngram, .max_k = 3}, ""}),
    [](const auto& info) { return info.param.name; });

// A self-draft runs on the target's own KV: its first draft row reads the K/V the target wrote
// for every earlier position, and its rows sit where the verify rows go. A "draft" through every
// layer is then the target itself, row for row (the kernels are batch-invariant bitwise): greedy
// verification must accept every draft token, in a crowd with preemption and tiny chunks. A
// draft that read or wrote the wrong positions or blocks would be rejected.
TEST(ModelDrafting, SelfDraftThroughEveryLayerIsAlwaysAccepted) {
  for (const std::string name : {"stories260K", "fixture-gemma3-q8_0"}) {
    auto target = load_model(name);
    if (!target) GTEST_SKIP() << name << " is not available";
    auto tok = Tokenizer::from_gguf(target->gguf());
    ASSERT_TRUE(tok.ok()) << tok.error();
    EngineOptions o{.max_batch_tokens = 16, .max_seqs = 8};
    o.num_threads = 2;
    o.spec = {.method = SpecMethod::early_exit, .max_k = 3, .adaptive = false};
    auto runner = runtime::CpuRunner::create(*target, {.max_batch_tokens = 16, .n_threads = 2, .kv = {.n_blocks = 9}});
    ASSERT_TRUE(runner.ok()) << runner.error();
    std::vector<int32_t> every;
    for (int32_t il = 0; il < int32_t(target->config().n_layers); ++il) every.push_back(il);
    auto draft = (*runner)->self_draft({.layers = every});
    ASSERT_TRUE(draft.ok()) << draft.error();
    auto c = EngineCore::create(std::move(*runner), *tok, o, std::move(*draft));
    ASSERT_TRUE(c.ok()) << c.error();
    const auto reqs = crowd(10, int32_t(target->config().n_vocab), 7);
    const auto got = run_all(**c, reqs);
    EXPECT_EQ(got.size(), reqs.size());
    const EngineStats st = (*c)->stats();
    EXPECT_GT(st.spec_draft_tokens, 50) << name;
    EXPECT_EQ(st.spec_accepted_tokens, st.spec_draft_tokens) << name;
    EXPECT_GT(st.num_preemptions, 0) << name;
    EXPECT_EQ(st.kv_blocks_used, 0) << name;
  }
}

// The joint distribution of the first 3 tokens at temperature 1 from a fixed prompt over 20,000
// seeded requests: without speculation, with stories260K-q4_0 drafting, with its own first 3
// layers drafting and with n-gram drafts (K = 3, fixed; the prompt repeats itself, so n-gram
// drafts where it keeps repeating). Two-sample chi-square over the cells with an expected count of at
// least 5 per run (the rest pooled into one), at p = 1e-4. The same statistic tells temperature
// 1 from temperature 1.15 (shown below): it has the power to see a distribution that is off.
TEST(ModelDrafting, SampledDistributionIsThePlainEngines) {
  auto target = load_model("stories260K");
  auto draft = load_model("stories260K-q4_0");
  if (!target || !draft) GTEST_SKIP() << "stories260K models are not available";
  auto tok = Tokenizer::from_gguf(target->gguf());
  ASSERT_TRUE(tok.ok());
  const std::vector<int32_t> prompt = tok->encode("Once upon a time, there was a girl. Once upon a time");
  // 17 tokens: after the first requests, a prefix-cache hit leaves one prompt row to compute
  // (the test's cost is the forwards: it stays within a few minutes under sanitizers).
  ASSERT_EQ(prompt.size(), 17u);
  constexpr int kSamples = 20000;
  auto histogram = [&](SpecOptions spec, float temperature) {
    auto c = core(*target, *tok, {.max_batch_tokens = 1024, .max_seqs = 250, .spec = spec}, 1024);
    std::map<std::vector<int32_t>, int> h;
    std::vector<GenerationParams> reqs;
    for (int i = 0; i < kSamples; ++i) {
      GenerationParams p;
      p.prompt = prompt;
      p.stop = {.max_tokens = 3, .ignore_eos = true};
      p.sampling = {.temperature = temperature, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = uint64_t(i) * 7919 + 3};
      reqs.push_back(std::move(p));
      if (reqs.size() == 1000 || i + 1 == kSamples) {
        for (const auto& [id, toks] : run_all(*c, reqs)) h[toks]++;
        reqs.clear();
      }
    }
    return std::make_pair(h, c->stats());
  };
  auto chi2_vs = [](const std::map<std::vector<int32_t>, int>& a, const std::map<std::vector<int32_t>, int>& b) {
    std::map<std::vector<int32_t>, std::pair<double, double>> cells;
    for (const auto& [k, n] : a) cells[k].first = n;
    for (const auto& [k, n] : b) cells[k].second = n;
    double chi2 = 0, pooled_a = 0, pooled_b = 0;
    int used = 0;
    for (const auto& [k, n] : cells) {
      if ((n.first + n.second) / 2 < 5) {
        pooled_a += n.first, pooled_b += n.second;
        continue;
      }
      const double e = (n.first + n.second) / 2;
      chi2 += ((n.first - e) * (n.first - e) + (n.second - e) * (n.second - e)) / e;
      ++used;
    }
    if ((pooled_a + pooled_b) / 2 >= 5) {
      const double e = (pooled_a + pooled_b) / 2;
      chi2 += ((pooled_a - e) * (pooled_a - e) + (pooled_b - e) * (pooled_b - e)) / e;
      ++used;
    }
    const double dof = std::max(1, used - 1);
    const double critical = dof * std::pow(1 - 2 / (9 * dof) + 3.719 * std::sqrt(2 / (9 * dof)), 3);  // p = 1e-4
    return std::make_tuple(chi2, critical, used);
  };
  const auto [plain, plain_stats] = histogram({}, 1.0f);
  EXPECT_EQ(plain_stats.spec_draft_tokens, 0);
  const std::pair<SpecOptions, int> variants[] = {  // (options, draft tokens at least)
      {{.method = SpecMethod::draft, .max_k = 3, .adaptive = false, .draft_model = draft}, kSamples},
      {{.method = SpecMethod::early_exit, .max_k = 3, .adaptive = false, .exit_layer = 3}, kSamples},
      {{.method = SpecMethod::ngram, .max_k = 3, .adaptive = false}, kSamples / 40},  // only where the text repeats
  };
  std::vector<double> acceptance;
  for (const auto& [v, min_drafts] : variants) {
    const auto [spec, st] = histogram(v, 1.0f);
    EXPECT_GE(st.spec_draft_tokens, min_drafts) << int(v.method);
    EXPECT_GT(st.spec_accepted_tokens, 0);
    EXPECT_LT(st.spec_accepted_tokens, st.spec_draft_tokens);
    acceptance.push_back(double(st.spec_accepted_tokens) / double(std::max<int64_t>(st.spec_draft_tokens, 1)));
    const auto [chi2, critical, cells] = chi2_vs(plain, spec);
    EXPECT_GE(cells, 12);
    EXPECT_LT(chi2, critical) << "method " << int(v.method) << ", " << cells << " cells";
  }
  std::printf("acceptance: draft model %.3f, early exit %.3f, n-gram %.3f\n", acceptance[0], acceptance[1], acceptance[2]);
  const auto [hotter, hs] = histogram({}, 1.15f);
  const auto [chi2, critical, cells] = chi2_vs(plain, hotter);
  EXPECT_GT(chi2, critical) << cells << " cells";  // the test sees a distribution that is off
}

}  // namespace
