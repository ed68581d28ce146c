// The pruned-copy student (compress/distill_student.h): its gradient against finite differences,
// distillation that heals a pruned stories260K toward the full model on held-out text, and the
// folded file: its output rows are W · (I + A) and it scores like the trained adapter.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "compress/distill_student.h"
#include "compress/prune_file.h"
#include "eval/perplexity.h"
#include "kernels/quant/quant.h"
#include "tokenizer/tokenizer.h"

using namespace kvasir;
using namespace kvasir::compress;

namespace {

std::string shared(const std::string& rel) { return std::string(KVASIR_SHARED_DIR) + "/" + rel; }

struct Fixture {
  std::string dir, full, pruned;
  std::unique_ptr<Model> teacher, student;
  std::vector<int32_t> tokens;
};

// stories260K and a copy with its layer 2 removed; the text's tokens.
bool make_fixture(Fixture& f, const std::string& tag) {
  f.full = shared("models/stories260K.gguf");
  std::ifstream text_in(shared("golden/perplexity/stories-sampled.txt"), std::ios::binary);
  if (!std::ifstream(f.full) || !text_in) return false;
  f.dir = ::testing::TempDir() + "/kvasir_student_" + tag + "_" + std::to_string(::getpid());
  std::filesystem::create_directories(f.dir);
  f.pruned = f.dir + "/pruned.gguf";
  EXPECT_TRUE(prune_file(f.full, f.pruned, {.remove_layers = {2}, .num_threads = 2}).ok());
  auto t = Model::load(f.full);
  auto s = Model::load(f.pruned);
  EXPECT_TRUE(t.ok() && s.ok());
  f.teacher = std::move(*t), f.student = std::move(*s);
  const std::string text((std::istreambuf_iterator<char>(text_in)), std::istreambuf_iterator<char>());
  auto tok = Tokenizer::from_gguf(f.teacher->gguf());
  EXPECT_TRUE(tok.ok());
  f.tokens = tok->encode(text);
  return true;
}

}  // namespace

TEST(DistillStudent, GradientMatchesFiniteDifferences) {
  Fixture f;
  if (!make_fixture(f, "grad")) GTEST_SKIP() << "../shared is not available";
  const std::span<const int32_t> t(f.tokens.data(), 128);
  auto teacher = teacher_features(*f.teacher, t, {.n_ctx = 64, .num_threads = 1});
  auto student = teacher_features(*f.student, t, {.n_ctx = 64, .num_threads = 1});
  ASSERT_TRUE(teacher.ok() && student.ok());
  const int64_t d = f.student->config().n_embd;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> nd(0.f, 0.05f);
  std::vector<float> a(size_t(d * d));
  for (float& x : a) x = nd(rng);
  const std::vector<int64_t> pos = {3, 17, 40, 64 + 9, 64 + 50};
  for (const grad::LossOptions lo : {grad::LossOptions{}, grad::LossOptions{.ce_weight = 0.3, .temperature = 2.0},
                                     grad::LossOptions{.ce_weight = 0.2, .tvd = true}}) {
    std::vector<float> g(a.size()), unused(a.size());
    ASSERT_TRUE(student_loss(*f.student, a, *teacher, *student, pos, lo, g).ok());
    int checked = 0;
    for (size_t i = 0; i < a.size(); i += 397) {
      const float keep = a[i], eps = 1e-2f;
      a[i] = keep + eps;
      const double up = *student_loss(*f.student, a, *teacher, *student, pos, lo, unused);
      a[i] = keep - eps;
      const double down = *student_loss(*f.student, a, *teacher, *student, pos, lo, unused);
      a[i] = keep;
      const double fd = (up - down) / (2 * eps);
      EXPECT_NEAR(g[i], fd, 2e-3 + 0.02 * std::abs(fd)) << "A[" << i << "], tvd " << lo.tvd;
      ++checked;
    }
    EXPECT_GT(checked, 8);
  }
  std::filesystem::remove_all(f.dir);
}

// 300 steps on 16 chunks of 128: the held-out KL falls at every evaluation and ends below 0.75 of
// the pruned copy's, same top-1 rises by 3 points or more; the written file's output rows are
// W · (I + A) (within its F32 rounding) and it scores the held-out text closer to the teacher than
// the pruned copy does. (Measured: KL 0.305 -> 0.184, same top-1 83.9% -> 89.1%; a planted sign error in
// the backward leaves the KL rising.)
TEST(DistillStudent, AnAdapterHealsAPrunedCopy) {
  Fixture f;
  if (!make_fixture(f, "heal")) GTEST_SKIP() << "../shared is not available";
  const int64_t n_ctx = 128;
  const std::span<const int32_t> all(f.tokens);
  const auto held_tokens = all.subspan(all.size() - size_t(4 * n_ctx));
  const auto train_tokens = all.first(all.size() - size_t(4 * n_ctx));
  const FeatureOptions fo{.n_ctx = n_ctx, .max_chunks = 64, .num_threads = 2};
  auto tt = teacher_features(*f.teacher, train_tokens, fo), st = teacher_features(*f.student, train_tokens, fo);
  auto th = teacher_features(*f.teacher, held_tokens, fo), sh = teacher_features(*f.student, held_tokens, fo);
  ASSERT_TRUE(tt.ok() && st.ok() && th.ok() && sh.ok());
  auto r = train_student_adapter(*f.student, *tt, *st, *th, *sh,
                                 {.steps = 300, .batch = 32, .warmup = 20, .lr = 3e-3, .eval_every = 100, .num_threads = 2});
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(r->curve.size(), 3u);
  double last = r->before.kl;
  for (const auto& p : r->curve) {
    EXPECT_LT(p.eval->kl, last) << "step " << p.step;
    last = p.eval->kl;
  }
  EXPECT_LT(r->after.kl, 0.75 * r->before.kl) << r->before.kl << " -> " << r->after.kl;
  EXPECT_GT(r->after.accept, r->before.accept + 0.03) << r->before.accept << " -> " << r->after.accept;

  const std::string out = f.dir + "/student.gguf";
  ASSERT_TRUE(write_student(f.pruned, out, *f.student, r->adapter, {{"steps", "300"}}, 2).ok());
  auto healed = Model::load(out);
  ASSERT_TRUE(healed.ok()) << healed.error();
  const Matrix& w0 = f.student->weights().output;
  const Matrix& w1 = (*healed)->weights().output;
  ASSERT_EQ(w1.n_out, w0.n_out);
  const int64_t d = w0.n_in;
  std::vector<float> row0(static_cast<size_t>(d)), row1(static_cast<size_t>(d));
  for (int64_t v : {int64_t(0), int64_t(7), w0.n_out - 1}) {
    kernels::quant_traits(w0.type)->dequantize_row(static_cast<const uint8_t*>(w0.data) + size_t(v) * row_bytes(w0.type, d), row0.data(), d);
    kernels::quant_traits(w1.type)->dequantize_row(static_cast<const uint8_t*>(w1.data) + size_t(v) * row_bytes(w1.type, d), row1.data(), d);
    for (int64_t k = 0; k < d; ++k) {
      double want = row0[size_t(k)];
      for (int64_t j = 0; j < d; ++j) want += double(row0[size_t(j)]) * r->adapter[size_t(j * d + k)];
      EXPECT_NEAR(row1[size_t(k)], want, 1e-4 * (1 + std::abs(want))) << "row " << v << " column " << k;
    }
  }
  auto tok = Tokenizer::from_gguf(f.teacher->gguf());
  const std::vector<int32_t> held(held_tokens.begin(), held_tokens.end());
  const eval::EvalOptions eo{.n_ctx = n_ctx, .num_threads = 2, .bos = tok->add_bos() ? tok->bos() : -1};
  auto before = eval::evaluate(*f.student, f.teacher.get(), held, eo);
  auto after = eval::evaluate(**healed, f.teacher.get(), held, eo);
  ASSERT_TRUE(before.ok() && after.ok());
  EXPECT_LT(after->kl->mean_kld(), 0.8 * before->kl->mean_kld());
  std::filesystem::remove_all(f.dir);
}
