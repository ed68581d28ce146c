// kvasir with a LoRA adapter against llama.cpp with the same adapter (llama-server --lora): the
// greedy continuation and the top-5 log-probabilities of every generated token. The adapter is
// written here again from the seed the golden names (write_random_lora is deterministic), the
// references come from bench/lora_golden.py (tests/model/data/lora_golden_*.json).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "golden_util.h"
#include "model/lora.h"
#include "runtime/cpu_runner.h"

namespace kvasir {
namespace {

namespace fs = std::filesystem;

std::vector<double> log_softmax(const float* x, int64_t n) {
  double m = x[0], s = 0;
  for (int64_t i = 1; i < n; ++i) m = std::max(m, double(x[i]));
  for (int64_t i = 0; i < n; ++i) s += std::exp(double(x[i]) - m);
  std::vector<double> out(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = double(x[i]) - m - std::log(s);
  return out;
}

struct Golden {
  const char* name;
  std::string model;
  double logprob_tol;  // max |Δ log p| over the reference's top 5 at every step
  double tie;          // llama.cpp's greedy token is checked where its top two are further apart
};

// Teacher-forced over llama.cpp's cases (the prompt, then each reference token): the largest
// |Δ log p| over its top 5 at every step, llama.cpp's greedy token checked unless its top two
// are within `tol` (a tie), and how many steps pick another token than `other`'s reference.
struct Agreement {
  double worst = 0;
  int differs_from_other = 0;
};
Agreement agree(runtime::ModelRunner& r, const nlohmann::json& cases, int32_t slot, double tie,
                const nlohmann::json* other = nullptr) {
  Agreement a;
  const int64_t V = r.info().n_vocab;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const auto& c = cases[ci];
    const std::vector<int32_t> prompt = c["prompt"], ref = c["tokens"];
    EXPECT_EQ(ref.size(), c["steps"].size());
    const int32_t blocks[] = {0, 1, 2, 3};
    Batch b;
    b.add_sequence(blocks, slot);
    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), ref.begin(), ref.end() - 1);
    for (size_t i = 0; i < seq.size(); ++i) b.add(seq[i], int32_t(i), 0, i + 1 >= prompt.size());
    auto out = r.forward(b);
    if (!out) throw std::runtime_error(out.error());
    for (size_t k = 0; k < ref.size(); ++k) {
      const float* row = *out + k * size_t(V);
      const int32_t mine = argmax_lowest({row, size_t(V)});
      const auto lp = log_softmax(row, V);
      const auto& top = c["steps"][k]["top"];
      for (const auto& e : top) a.worst = std::max(a.worst, std::fabs(lp[e[0].get<size_t>()] - e[1].get<double>()));
      if (top[0][1].get<double>() - top[1][1].get<double>() > tie)
        EXPECT_EQ(mine, ref[k]) << "prompt " << c["prompt"] << " step " << k << " slot " << slot;
      if (other) a.differs_from_other += (*other)[ci]["tokens"][k].get<int32_t>() != ref[k];
    }
  }
  return a;
}

class LoraGolden : public ::testing::TestWithParam<Golden> {};

TEST_P(LoraGolden, GreedyAndTopLogprobsMatchLlamaCpp) {
  const Golden& g = GetParam();
  if (!fs::exists(g.model)) GTEST_SKIP() << g.model << " is not here";
  const auto golden = load_json(std::string(KVASIR_SOURCE_DIR) + "/tests/model/data/lora_golden_" + g.name + ".json");
  auto model = Model::load(g.model);
  ASSERT_TRUE(model) << model.error();
  const fs::path adapter = fs::temp_directory_path() / ("kvasir_lora_golden_" + std::to_string(::getpid()) + ".gguf");
  ASSERT_TRUE(write_random_lora(**model, adapter.string(), golden["rank"], golden["alpha"], golden["seed"]));
  auto lora = LoraAdapter::load(adapter.string(), **model);
  fs::remove(adapter);
  ASSERT_TRUE(lora) << lora.error();
  auto runner = runtime::CpuRunner::create(**model, {.max_batch_tokens = 64, .n_threads = 2, .kv = {.n_blocks = 16}});
  ASSERT_TRUE(runner) << runner.error();
  ASSERT_TRUE((*runner)->set_adapter(0, *lora));
  const Agreement with = agree(**runner, golden["cases"], 0, g.tie, &golden["base_cases"]);
  const Agreement base = agree(**runner, golden["base_cases"], -1, g.tie);
  // The adapter is what the reference measures: with it, llama.cpp's log-probs without it are far.
  const Agreement moved = agree(**runner, golden["base_cases"], 0, 1e9);
  std::printf("%s: max |Δ log p| over llama.cpp's top 5: %.2e with the adapter, %.2e without; the adapter moves them "
              "by %.2e and changes %d of llama.cpp's greedy tokens\n",
              g.name, with.worst, base.worst, moved.worst, with.differs_from_other);
  EXPECT_LE(with.worst, g.logprob_tol);
  EXPECT_LE(base.worst, g.logprob_tol);
  EXPECT_GT(moved.worst, 2 * g.logprob_tol);
}

INSTANTIATE_TEST_SUITE_P(
    Models, LoraGolden,
    // F32 weights: the tolerance of the F32 logits golden (measured 1.6e-2 and 2.3e-3). The
    // default model is quantized (Q4_K_M): kvasir's base model is itself up to 0.47 from
    // llama.cpp's log-probs on these 12-token continuations, and the adapter (which flattens the
    // distributions) measured 1.78, with three greedy picks where llama.cpp's top three lie within
    // 0.6; so its check is the top-1 agreement beyond a 0.75 gap and a 2.5 bound.
    ::testing::Values(Golden{"stories260K", shared_path("models/stories260K.gguf"), 2e-2, 2e-2},
                      Golden{"gemma3_f32", shared_path("models/fixture-gemma3-f32.gguf"), 2e-2, 2e-2},
                      Golden{"gemma3_270m", std::string(KVASIR_SOURCE_DIR) + "/models/gemma-3-270m-q4_k_m.gguf", 2.5, 0.75}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kvasir
