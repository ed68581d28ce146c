// The EAGLE-style draft head: its backward against finite differences (through the soft-cap,
// norms, FFN and the fused input, on a llama and a Gemma 3 model; two positions unrolled through
// the state the first feeds the second), its file round trip and the
// files it refuses, and distillation on stories260K: the held-out KL falls steadily and the
// head's top token agrees with the target's far more often after training than before.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <optional>
#include <random>

#include "compress/distill_head.h"
#include "compress/eagle_head.h"
#include "tokenizer/tokenizer.h"

using namespace kvasir;
using namespace kvasir::compress;

namespace {

std::string shared(const std::string& rel) { return std::string(KVASIR_SHARED_DIR) + "/" + rel; }

std::vector<int32_t> first_tokens(const Model& m, int32_t n) {
  std::vector<int32_t> t;
  for (int32_t i = 0; i < n; ++i) t.push_back(i * 7 % int32_t(m.config().n_vocab));
  return t;
}

// stories260K and the tokens of the shared sampled text; false without ../shared.
bool load_stories(std::unique_ptr<Model>& model, std::vector<int32_t>& tokens) {
  std::ifstream text_in(shared("golden/perplexity/stories-sampled.txt"), std::ios::binary);
  if (!std::ifstream(shared("models/stories260K.gguf")) || !text_in) return false;
  const std::string text((std::istreambuf_iterator<char>(text_in)), std::istreambuf_iterator<char>());
  auto m = Model::load(shared("models/stories260K.gguf"));
  if (!m.ok()) {
    ADD_FAILURE() << m.error();
    return false;
  }
  auto tok = Tokenizer::from_gguf((*m)->gguf());
  if (!tok.ok()) {
    ADD_FAILURE() << tok.error();
    return false;
  }
  tokens = tok->encode(text);
  model = std::move(*m);
  return true;
}

// stories260K's features on the first 80% of the shared text (training) and the rest (held
// out), and every token id as a head's vocabulary; false without ../shared.
struct StoriesSplit {
  std::unique_ptr<Model> model;
  std::optional<TeacherFeatures> train, held;
  std::vector<int32_t> all;
};
bool load_stories_split(StoriesSplit& st) {
  std::vector<int32_t> tokens;
  if (!load_stories(st.model, tokens)) return false;
  const size_t split = tokens.size() * 8 / 10;
  auto train = teacher_features(*st.model, std::span(tokens).first(split), {.n_ctx = 128, .bos = 1, .num_threads = 2});
  auto held = teacher_features(*st.model, std::span(tokens).subspan(split), {.n_ctx = 128, .bos = 1, .num_threads = 2});
  if (!train.ok() || !held.ok()) {
    ADD_FAILURE() << "teacher features";
    st.model.reset();
    return true;
  }
  st.train = std::move(*train), st.held = std::move(*held);
  st.all.resize(size_t(st.model->config().n_vocab));
  std::iota(st.all.begin(), st.all.end(), 0);
  return true;
}

// Each tensor's analytic gradient against central differences of loss() at about 25 of its
// elements, within 0.5% of the tensor's largest gradient.
template <class Loss>
void expect_gradients(std::vector<std::span<float>> ps, const std::vector<std::span<float>>& gs, Loss&& loss) {
  for (size_t k = 0; k < ps.size(); ++k) {
    double scale = 1e-6;
    for (float v : gs[k]) scale = std::max(scale, double(std::fabs(v)));
    for (size_t i = 0; i < ps[k].size(); i += std::max<size_t>(1, ps[k].size() / 25)) {
      const float keep = ps[k][i], step = 1e-2f;
      ps[k][i] = keep + step;
      const double up = loss();
      ps[k][i] = keep - step;
      const double down = loss();
      ps[k][i] = keep;
      ASSERT_NEAR(gs[k][i], (up - down) / (2.0 * step), 5e-3 * scale + 1e-4) << "tensor " << k << " element " << i;
    }
  }
}

}  // namespace

TEST(EagleHead, BackwardMatchesFiniteDifferences) {
  for (const char* rel : {"models/stories260K.gguf", "models/fixture-gemma3-f32.gguf"}) {
    SCOPED_TRACE(rel);
    const std::string path = shared(rel);
    if (!std::ifstream(path)) GTEST_SKIP() << "../shared is not available";
    auto model = Model::load(path);
    ASSERT_TRUE(model.ok());
    const int64_t d = (*model)->config().n_embd, B = 3;
    auto head = EagleHead::init(**model, 24, first_tokens(**model, 40), 7);
    ASSERT_TRUE(head.ok()) << head.error();
    std::mt19937_64 rng(3);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto p : head->params().all())
      for (float& v : p) v += 0.1f * nd(rng);  // away from the identity start
    std::vector<float> h(size_t(B * d)), e(size_t(B * d)), r(size_t(B * head->n_tokens())), z(r.size());
    for (auto* v : {&h, &e, &r})
      for (float& x : *v) x = nd(rng);
    auto loss = [&] {
      head->forward(h.data(), e.data(), B, z.data(), nullptr);
      double s = 0;
      for (size_t i = 0; i < z.size(); ++i) s += double(z[i]) * r[i];
      return s;
    };
    loss();
    EagleHeadParams g = zeros_like(head->params());
    head->backward(r.data(), B, g, nullptr);
    expect_gradients(head->params().all(), g.all(), loss);
  }
}

// Two draft positions unrolled as training runs them: the second fed the first's output state. The
// parameters' gradient (both positions' backward, the second's state gradient handed to the first)
// and the gradient on the first position's input state against central differences.
TEST(EagleHead, UnrolledBackwardMatchesFiniteDifferences) {
  const std::string path = shared("models/fixture-gemma3-f32.gguf");
  if (!std::ifstream(path)) GTEST_SKIP() << "../shared is not available";
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok());
  const int64_t d = (*model)->config().n_embd, B = 2;
  auto head = EagleHead::init(**model, 16, first_tokens(**model, 30), 5);
  ASSERT_TRUE(head.ok());
  std::mt19937_64 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto p : head->params().all())
    for (float& v : p) v += 0.1f * nd(rng);
  const size_t Z = size_t(B * head->n_tokens());
  std::vector<float> h(size_t(B * d)), e1(h.size()), e2(h.size()), r1(Z), r2(Z), z1(Z), z2(Z);
  for (auto* v : {&h, &e1, &e2, &r1, &r2})
    for (float& x : *v) x = nd(rng);
  EagleHead::Tape t1, t2;
  auto loss = [&] {
    head->forward(h.data(), e1.data(), B, z1.data(), nullptr, t1);
    head->forward(t1.o.data(), e2.data(), B, z2.data(), nullptr, t2);
    double s = 0;
    for (size_t i = 0; i < Z; ++i) s += double(z1[i]) * r1[i] + double(z2[i]) * r2[i];
    return s;
  };
  loss();
  EagleHeadParams g = zeros_like(head->params());
  std::vector<float> d_state(h.size()), d_h(h.size());
  head->backward(r2.data(), g, nullptr, t2, nullptr, d_state.data());
  head->backward(r1.data(), g, nullptr, t1, d_state.data(), d_h.data());
  auto ps = head->params().all();
  auto gs = g.all();
  ps.push_back(std::span<float>(h));  // the input state last
  gs.push_back(std::span<float>(d_h));
  expect_gradients(ps, gs, loss);
}

TEST(EagleHead, FileRoundTripAndRefusals) {
  const std::string path = shared("models/stories260K.gguf"), other = shared("models/fixture-gemma3-f32.gguf");
  if (!std::ifstream(path) || !std::ifstream(other)) GTEST_SKIP() << "../shared is not available";
  auto model = Model::load(path), gemma = Model::load(other);
  ASSERT_TRUE(model.ok() && gemma.ok());
  auto head = EagleHead::init(**model, 16, first_tokens(**model, 30), 1);
  ASSERT_TRUE(head.ok());
  const std::string file = ::testing::TempDir() + "/kvasir_eagle_" + std::to_string(getpid()) + ".gguf";
  ASSERT_TRUE(head->save(file, {{"steps", "0"}}).ok());
  auto back = EagleHead::load(file, **model);
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back->shape().tokens, head->shape().tokens);
  const int64_t d = (*model)->config().n_embd;
  std::vector<float> h(size_t(d), 0.5f), e(size_t(d), -0.25f), z1(30), z2(30);
  head->forward(h.data(), e.data(), 1, z1.data(), nullptr);
  back->forward(h.data(), e.data(), 1, z2.data(), nullptr);
  EXPECT_EQ(z1, z2);
  auto wrong = EagleHead::load(file, **gemma);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().find("width"), std::string::npos) << wrong.error();
  auto not_head = EagleHead::load(path, **model);
  ASSERT_FALSE(not_head.ok());
  EXPECT_NE(not_head.error().find("not a kvasir EAGLE head"), std::string::npos) << not_head.error();
  EXPECT_FALSE(EagleHead::init(**model, 16, {5, 3}, 1).ok());  // not ascending
  std::filesystem::remove(file);
}

TEST(EagleHead, DistillationLowersKlAndRaisesAgreement) {
  StoriesSplit st;
  if (!load_stories_split(st)) GTEST_SKIP() << "../shared is not available";
  ASSERT_TRUE(st.model);
  auto head = EagleHead::init(*st.model, 128, st.all, 1);
  ASSERT_TRUE(head.ok());
  auto r = train_head(*head, *st.train, *st.held,
                      {.steps = 600, .batch = 32, .warmup = 30, .lr = 3e-3, .eval_every = 100, .eval_positions = 1500,
                       .num_threads = 2});
  ASSERT_TRUE(r.ok()) << r.error();
  std::printf("held-out KL %.3f -> %.3f, agreement %.1f%% -> %.1f%%\n", r->before.kl, r->after.kl, 100 * r->before.accept,
              100 * r->after.accept);
  ASSERT_EQ(r->curve.size(), 6u);
  EXPECT_LT(r->curve.front().eval->kl, r->before.kl);
  for (size_t i = 1; i < r->curve.size(); ++i) EXPECT_LT(r->curve[i].eval->kl, r->curve[i - 1].eval->kl * 1.02) << i;
  EXPECT_LT(r->after.kl, 0.6 * r->before.kl);
  EXPECT_GT(r->after.accept, r->before.accept + 0.2);
}

// Training on its own predicted states too (a fraction of the inputs replaced by the head's own
// output from the position before) still distils: the held-out KL falls well below the start.
TEST(EagleHead, SelfFedTrainingStillLearns) {
  std::unique_ptr<Model> model;
  std::vector<int32_t> tokens;
  if (!load_stories(model, tokens)) GTEST_SKIP() << "../shared is not available";
  auto f = teacher_features(*model, tokens, {.n_ctx = 128, .bos = 1, .num_threads = 2});
  ASSERT_TRUE(f.ok());
  std::vector<int32_t> all(model->config().n_vocab);
  std::iota(all.begin(), all.end(), 0);
  auto head = EagleHead::init(*model, 64, all, 2);
  ASSERT_TRUE(head.ok());
  auto r = train_head(*head, *f, *f, {.steps = 300, .batch = 32, .warmup = 20, .lr = 3e-3, .self_feed = 0.5,
                                      .eval_every = 0, .eval_positions = 1000, .num_threads = 2});
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_LT(r->after.kl, 0.6 * r->before.kl);
  EXPECT_GT(r->after.accept, r->before.accept + 0.2);
}

// Trained unrolled over two draft positions (the second fed the first's predicted state, the loss
// backpropagated through it), the head keeps both of its first two drafts far more often than one
// trained on single positions with the same steps and examples, and still distils the first.
TEST(EagleHead, UnrolledTrainingRaisesTheSecondPosition) {
  StoriesSplit st;
  if (!load_stories_split(st)) GTEST_SKIP() << "../shared is not available";
  ASSERT_TRUE(st.model);
  HeadEval after[2];
  for (int64_t unroll : {1, 2}) {
    auto head = EagleHead::init(*st.model, 128, st.all, 1);
    ASSERT_TRUE(head.ok());
    auto r = train_head(*head, *st.train, *st.held,
                        {.steps = 600, .batch = 32, .warmup = 30, .lr = 3e-3, .unroll = unroll, .eval_every = 0,
                         .eval_positions = 1500, .num_threads = 2});
    ASSERT_TRUE(r.ok()) << r.error();
    after[unroll - 1] = r->after;
    std::printf("unroll %lld: held-out KL %.3f, first %.1f%%, both of two %.1f%%\n", (long long)unroll, r->after.kl,
                100 * r->after.accept, 100 * r->after.accept2);
  }
  EXPECT_GT(after[1].accept2, after[0].accept2 + 0.05);
  EXPECT_GT(after[1].accept, after[0].accept - 0.05);
  EXPECT_LT(after[1].kl, 1.1 * after[0].kl);
}
