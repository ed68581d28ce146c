// Quantized KV blocks (Q8_0, Q4_0, and Q4_0 with Hadamard-rotated K and V) read directly by the
// paged attention kernel: against the reference twin on exactly what the cache holds (the stored
// rows dequantized, rotated back, and with a KV transform scaled and shifted back; for Q8_0,
// whose products are integer, with its queries and attention weights rounded as the kernel
// rounds them: q8_twin) the result agrees to float noise (1e-5), against the unquantized K/V to
// what the type's rounding costs;
// with outlier channels in K (what LLM keys have), the rotation cuts 4-bit K's error (the check
// fails without it); a KV transform leaves F32 attention unchanged (its shift of K moves every
// score of a query alike), and with keys that share a large mean (Gemma 3's), shifting it out
// cuts 4-bit error several times over.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "kernels/attention.h"
#include "kernels/quant/blocks.h"
#include "kernels/quant/quant.h"

using namespace kvasir;
using namespace kvasir::kernels;

namespace {

constexpr int64_t kHeads = 4, kKvHeads = 2, kHd = 64, kBlock = 16, kTokens = 70;

double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num = std::max(num, double(std::fabs(a[i] - b[i]))), den = std::max(den, double(std::fabs(b[i])));
  return num / std::max(den, 1e-30);
}

// Orthonormal Walsh-Hadamard transform (its own inverse), the twin of the kernel's.
void hadamard(float* x, int64_t n) {
  for (int64_t h = 1; h < n; h *= 2)
    for (int64_t i = 0; i < n; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b, x[j + h] = a - b;
      }
  for (int64_t i = 0; i < n; ++i) x[i] /= std::sqrt(float(n));
}

struct Result {
  double vs_held, vs_float;
};

// A KV transform per KV head: K and V shifted by `shift` (with noise) and divided by scales in
// [0.5, 2]; empty vectors when unset.
struct Transform {
  std::vector<float> k_shift, k_scale, v_shift, v_scale;
};
Transform random_transform(uint32_t seed, float shift) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.5f, 2.f);
  std::normal_distribution<float> nd(0.f, 1.f);
  Transform t;
  for (int64_t i = 0; i < kKvHeads * kHd; ++i) {
    t.k_shift.push_back(shift * (1.f + 0.1f * nd(rng))), t.v_shift.push_back(shift * 0.5f * nd(rng));
    t.k_scale.push_back(u(rng)), t.v_scale.push_back(u(rng));
  }
  return t;
}

// What Q8_0 attention computes, in double on what the cache holds (K and V in their stored basis:
// dequantized, not turned back), for query heads h of KV head h / group at position pos: the
// query in the stored basis (scaled, rotated) rounded to 15-bit codes per 32 dims; per step of
// 64 keys an online-softmax update whose weights exp(s - running max), times each key's V scale
// per 32 dims, are rounded to 8 bits against the step's largest; the output in the stored basis
// (o_st), for the caller to turn back.
constexpr int64_t kStep = 64;
void q8_twin(const float* q, const std::vector<float>& k_st, const std::vector<float>& v_st, const std::vector<float>& dv,
             const KvLayerView& view, int64_t pos, float scale, float* o_st) {
  const int64_t kv_dim = kKvHeads * kHd, group = kHeads / kKvHeads, nb = kHd / 32;
  for (int64_t h = 0; h < kHeads; ++h) {
    const int64_t g = h / group;
    std::vector<float> qs(q + h * kHd, q + (h + 1) * kHd);
    if (view.k_scale)
      for (int64_t i = 0; i < kHd; ++i) qs[size_t(i)] *= view.k_scale[g * kHd + i];
    if (view.rotate_k) hadamard(qs.data(), kHd);
    std::vector<double> qr(static_cast<size_t>(kHd));
    for (int64_t b = 0; b < nb; ++b) {
      float amax = 0;
      for (int64_t i = 32 * b; i < 32 * b + 32; ++i) amax = std::max(amax, std::fabs(qs[size_t(i)]));
      for (int64_t i = 32 * b; i < 32 * b + 32; ++i)
        qr[size_t(i)] = amax > 0 ? std::nearbyint(qs[size_t(i)] * (127.f * 128.f / amax)) * (double(amax) / (127 * 128)) : 0;
    }
    double mx = -INFINITY, sum = 0;
    std::vector<double> acc(static_cast<size_t>(kHd), 0.0);
    for (int64_t start = 0; start <= pos; start += kStep) {
      const int64_t end = std::min(pos, start + kStep - 1);
      std::vector<double> sc;
      for (int64_t t = start; t <= end; ++t) {
        double x = 0;
        for (int64_t d = 0; d < kHd; ++d) x += qr[size_t(d)] * k_st[size_t(t * kv_dim + g * kHd + d)];
        sc.push_back(x * scale);
      }
      const double new_mx = std::max(mx, *std::max_element(sc.begin(), sc.end()));
      const double corr = std::exp(mx - new_mx);
      sum *= corr;
      for (auto& a : acc) a *= corr;
      mx = new_mx;
      std::vector<double> w;
      for (double x : sc) w.push_back(std::exp(x - mx)), sum += w.back();
      for (int64_t b = 0; b < nb; ++b) {
        double umax = 0;
        for (size_t i = 0; i < w.size(); ++i) umax = std::max(umax, w[i] * dv[size_t(((start + int64_t(i)) * kKvHeads + g) * nb + b)]);
        for (size_t i = 0; i < w.size() && umax > 0; ++i) {
          const int64_t t = start + int64_t(i);
          const double dvt = dv[size_t((t * kKvHeads + g) * nb + b)];
          const double code_w = std::nearbyint(w[i] * dvt * 255 / umax) * umax / 255;  // the rounded w * dv
          for (int64_t d = 32 * b; d < 32 * b + 32; ++d)
            acc[size_t(d)] += code_w / dvt * v_st[size_t(t * kv_dim + g * kHd + d)];  // (v_st = dv * code)
        }
      }
    }
    for (int64_t d = 0; d < kHd; ++d) o_st[h * kHd + d] = float(acc[size_t(d)] / sum);
  }
}

// k_mean: added to every key's channels (a mean shared by all keys, large on real models).
Result run(DType type, bool rotate, float outlier, uint32_t seed, const Transform* tf = nullptr, float k_mean = 0.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t kv_dim = kKvHeads * kHd, blocks = (kTokens + kBlock - 1) / kBlock + 2;
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  const int64_t run = kBlock * kHd;
  std::vector<uint8_t> pool(row_bytes(type, 2 * blocks * kBlock * kv_dim));
  KvLayerView view{pool.data(), pool.data() + row_bytes(type, run), type, kBlock, kKvHeads, kHd, 2 * run, rotate};
  view.rotate_v = rotate;
  if (tf) view.k_shift = tf->k_shift.data(), view.k_scale = tf->k_scale.data(), view.v_shift = tf->v_shift.data(),
          view.v_scale = tf->v_scale.data();
  std::vector<float> k(size_t(kTokens * kv_dim)), v(k.size()), q(size_t(kHeads * kHd));
  for (size_t i = 0; i < k.size(); ++i)
    k[i] = nd(rng) * (i % kHd == 5 || i % kHd == 40 ? outlier : 1.f) + (tf ? tf->k_shift[i % size_t(kv_dim)] : k_mean);
  for (auto& x : v) x = nd(rng);
  for (auto& x : q) x = nd(rng);
  for (int64_t t = 0; t < kTokens; ++t) kv_store(view, table.data(), t, &k[size_t(t * kv_dim)], &v[size_t(t * kv_dim)]);
  // What the cache holds, read back: each stored row dequantized (rotated back, then scaled and
  // shifted back).
  std::vector<float> k_held(k.size()), v_held(v.size()), k_st(k.size()), v_st(v.size());
  std::vector<float> dv(size_t(kTokens * kKvHeads * (kHd / 32)));  // Q8_0: V's scale per (token, KV head, 32 dims)
  const auto* tr = quant_traits(type);
  auto back = [&](float* x, const std::vector<float>* scale, const std::vector<float>* shift, int64_t g) {
    if (rotate) hadamard(x, kHd);
    for (int64_t i = 0; i < kHd && scale; ++i) x[i] = x[i] * (*scale)[size_t(g * kHd + i)] + (*shift)[size_t(g * kHd + i)];
  };
  for (int64_t t = 0; t < kTokens; ++t)
    for (int64_t g = 0; g < kKvHeads; ++g) {
      std::vector<uint8_t> k_row(row_bytes(type, kHd)), v_row(k_row.size());
      kv_load(view, table.data(), t, g, k_row.data(), v_row.data());
      float* kr = &k_held[size_t(t * kv_dim + g * kHd)];
      float* vr = &v_held[size_t(t * kv_dim + g * kHd)];
      tr->dequantize_row(k_row.data(), kr, kHd);
      tr->dequantize_row(v_row.data(), vr, kHd);
      std::copy_n(kr, kHd, &k_st[size_t(t * kv_dim + g * kHd)]);
      std::copy_n(vr, kHd, &v_st[size_t(t * kv_dim + g * kHd)]);
      for (int64_t b = 0; type == DType::Q8_0 && b < kHd / 32; ++b)
        dv[size_t((t * kKvHeads + g) * (kHd / 32) + b)] = fp16_to_f32(reinterpret_cast<const BlockQ8_0*>(v_row.data())[b].d);
      back(kr, tf ? &tf->k_scale : nullptr, tf ? &tf->k_shift : nullptr, g);
      back(vr, tf ? &tf->v_scale : nullptr, tf ? &tf->v_shift : nullptr, g);
    }
  const AttentionParams p{kHeads, 0, 1.f / std::sqrt(float(kHd)), 0.f};
  std::vector<float> scratch(size_t(attention_scratch_floats(view, p))), out(q.size()), held(q.size()), exact(q.size());
  Result r{0, 0};
  for (int64_t pos : {int64_t(0), int64_t(17), kTokens - 1}) {
    attention(q.data(), view, table.data(), pos, p, out.data(), scratch.data());
    if (type == DType::Q8_0) {
      q8_twin(q.data(), k_st, v_st, dv, view, pos, p.scale, held.data());
      for (int64_t h = 0; h < kHeads; ++h)
        back(&held[size_t(h * kHd)], tf ? &tf->v_scale : nullptr, tf ? &tf->v_shift : nullptr, h / (kHeads / kKvHeads));
    } else {
      attention_ref(q.data(), k_held.data(), v_held.data(), kKvHeads, kHd, pos, p, held.data());
    }
    attention_ref(q.data(), k.data(), v.data(), kKvHeads, kHd, pos, p, exact.data());
    r.vs_held = std::max(r.vs_held, rel_error(out, held));
    r.vs_float = std::max(r.vs_float, rel_error(out, exact));
  }
  return r;
}

}  // namespace

TEST(KvQuantAttention, MatchesTheTwinOnWhatTheCacheHolds) {
  for (DType t : {DType::Q8_0, DType::Q4_0})
    for (bool rotate : {false, true}) {
      const Result r = run(t, rotate, 1.f, 3);
      EXPECT_LT(r.vs_held, 1e-5) << dtype_name(t) << (rotate ? " rotated" : "");
      EXPECT_LT(r.vs_float, t == DType::Q8_0 ? 0.02 : 0.25) << dtype_name(t) << (rotate ? " rotated" : "");
    }
}

// Q8_0 pages interleave their keys (attention_q8.h); each row still reads back as exactly the Q8_0
// row the type's quantizer makes of it, for every page size and at every position of a page.
TEST(KvQuantAttention, Q8PagesHoldEachRowAsItsQ8Row) {
  std::mt19937 rng(31);
  std::normal_distribution<float> nd(0.f, 1.f);
  const auto* q8 = quant_traits(DType::Q8_0);
  for (int64_t bs : {8, 16, 32, 48}) {
    const int64_t kv_dim = kKvHeads * kHd, blocks = (kTokens + bs - 1) / bs, run = bs * kHd;
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    std::vector<uint8_t> pool(row_bytes(DType::Q8_0, 2 * blocks * bs * kv_dim));
    const KvLayerView view{pool.data(), pool.data() + row_bytes(DType::Q8_0, run), DType::Q8_0, bs, kKvHeads, kHd, 2 * run};
    std::vector<float> k(size_t(kTokens * kv_dim)), v(k.size());
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = 3.f * nd(rng);
    for (int64_t t = 0; t < kTokens; ++t) kv_store(view, table.data(), t, &k[size_t(t * kv_dim)], &v[size_t(t * kv_dim)]);
    const size_t row = row_bytes(DType::Q8_0, kHd);
    std::vector<uint8_t> k_row(row), v_row(row), k_want(row), v_want(row);
    for (int64_t t = 0; t < kTokens; ++t)
      for (int64_t g = 0; g < kKvHeads; ++g) {
        kv_load(view, table.data(), t, g, k_row.data(), v_row.data());
        q8->quantize_row(&k[size_t(t * kv_dim + g * kHd)], k_want.data(), kHd);
        q8->quantize_row(&v[size_t(t * kv_dim + g * kHd)], v_want.data(), kHd);
        ASSERT_EQ(k_row, k_want) << "key " << t << " head " << g << " pages of " << bs;
        ASSERT_EQ(v_row, v_want) << "value " << t << " head " << g << " pages of " << bs;
      }
  }
}

TEST(KvQuantAttention, RotationCutsFourBitKeyErrorWithOutlierChannels) {
  double plain = 0, rotated = 0;
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    plain += run(DType::Q4_0, false, 12.f, seed).vs_float;
    rotated += run(DType::Q4_0, true, 12.f, seed).vs_float;
  }
  std::printf("Q4_0 K with outlier channels: error %.4f plain, %.4f rotated\n", plain / 4, rotated / 4);
  EXPECT_LT(rotated, 0.7 * plain);
}

TEST(KvQuantAttention, TransformedStorageMatchesTheTwinOnWhatTheCacheHolds) {
  const Transform tf = random_transform(7, 3.f);
  for (DType t : {DType::Q8_0, DType::Q4_0})
    for (bool rotate : {false, true}) {
      // (A random transform rounds no better than none: only the twin is the point here.)
      EXPECT_LT(run(t, rotate, 1.f, 5, &tf).vs_held, 1e-5) << dtype_name(t) << (rotate ? " rotated" : "");
    }
}

TEST(KvQuantAttention, TransformIsExactInFloat) {
  // F32 rows: nothing rounds but the float arithmetic of the change of basis.
  const Transform tf = random_transform(8, 20.f);
  for (bool rotate : {false, true}) {
    const Result r = run(DType::F32, rotate, 4.f, 6, &tf);
    EXPECT_LT(r.vs_float, 2e-5) << (rotate ? "rotated" : "");
  }
}

TEST(KvQuantAttention, ShiftingTheSharedKeyMeanCutsFourBitError) {
  // Keys = a mean shared by all (8 times their spread) + noise: 4-bit rounding spends its levels
  // on the mean unless it is shifted out. The same keys both ways (run() adds the transform's
  // k_shift, or k_mean without one).
  Transform shift{};
  shift.k_shift.assign(size_t(kKvHeads * kHd), 8.f);
  shift.k_scale.assign(shift.k_shift.size(), 1.f);
  shift.v_shift.assign(shift.k_shift.size(), 0.f);
  shift.v_scale.assign(shift.k_shift.size(), 1.f);
  double plain = 0, shifted = 0;
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    plain += run(DType::Q4_0, true, 1.f, seed, nullptr, 8.f).vs_float;
    shifted += run(DType::Q4_0, true, 1.f, seed, &shift).vs_float;
  }
  std::printf("Q4_0 K with a shared mean: error %.4f stored as is, %.4f shifted\n", plain / 4, shifted / 4);
  EXPECT_LT(shifted, 0.4 * plain);
}
