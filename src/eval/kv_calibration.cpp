#include "eval/kv_calibration.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/cpu_runner.h"
#include "runtime/session.h"

namespace kvasir::eval {
namespace {

// Running sums of one layer's attention inputs per KV channel: keys before RoPE, and the squares
// of queries (pooled over each KV head's group), keys and values.
struct LayerSums {
  std::vector<double> k, k2, q2, v, v2;
  int64_t rows = 0;
};

// The channel paired with channel i of a head by RoPE (i itself where it does not rotate).
int64_t rope_partner(int64_t i, const kernels::RopeParams& rope) {
  if (i >= rope.rot_dims) return i;
  if (rope.mode == kernels::RopeMode::Normal) return i ^ 1;
  const int64_t half = rope.rot_dims / 2;
  return i < half ? i + half : i - half;
}

// sqrt(spread / weight) per channel of each head, normalized to a geometric mean of 1 per head.
// Channels with no spread or weight are floored at 1e-6 of the head's largest.
std::vector<float> balanced_scale(const std::vector<double>& spread, const std::vector<double>& weight, int64_t hd) {
  std::vector<float> s(spread.size());
  for (size_t h0 = 0; h0 < s.size(); h0 += size_t(hd)) {
    const auto floor_of = [&](const std::vector<double>& x) {
      return 1e-6 * std::max(1e-30, *std::max_element(x.begin() + long(h0), x.begin() + long(h0) + hd));
    };
    const double fs = floor_of(spread), fw = weight.empty() ? 1.0 : floor_of(weight);
    double log_sum = 0;
    for (size_t i = h0; i < h0 + size_t(hd); ++i) {
      const double w = weight.empty() ? 1.0 : std::max(weight[i], fw);
      s[i] = float(std::sqrt(std::max(spread[i], fs) / w));
      log_sum += std::log(double(s[i]));
    }
    const float norm = float(std::exp(-log_sum / double(hd)));
    for (size_t i = h0; i < h0 + size_t(hd); ++i) s[i] *= norm;
  }
  return s;
}

}  // namespace

Result<std::shared_ptr<const KvTransform>> calibrate_kv(const Model& model, std::span<const int32_t> tokens,
                                                        const KvCalibrationOptions& o) {
  const ModelConfig& c = model.config();
  const int64_t n = std::min<int64_t>(o.n_ctx, int64_t(tokens.size()));
  if (n < 16)
    return Error{"KV calibration: the text has " + std::to_string(tokens.size()) + " tokens; it needs at least 16",
                 ErrorCode::invalid_argument};
  if (o.n_positions < 1 || o.n_positions > (int64_t(1) << 20))
    return Error{"KV calibration: positions must be in [1, 2^20]", ErrorCode::invalid_argument};
  const int64_t hd = c.head_dim, kv_dim = c.kv_dim(), group = c.n_heads / c.n_kv_heads, half = c.rope_dims / 2;
  std::vector<LayerSums> sums(size_t(c.n_layers));
  for (LayerSums& s : sums)
    for (auto* x : {&s.k, &s.k2, &s.q2, &s.v, &s.v2}) x->assign(size_t(kv_dim), 0.0);
  // One sequence through an F32 cache of its own, in chunks of 128 rows (a Forward holds logits
  // for all its rows: Gemma 3, 1 MiB per row).
  const runtime::SessionOptions so{.n_ctx = n, .max_batch_tokens = std::min<int64_t>(n, 128), .n_threads = o.num_threads,
                                   .kv = {.type = DType::F32}};
  auto runner = runtime::CpuRunner::create(model, so.runner_options());  // the CPU's Forward takes the hook
  if (!runner) return Error{"KV calibration: " + runner.error(), runner.error_code()};
  Forward& fwd = (*runner)->forward_pass();
  auto session = runtime::Session::create(std::move(*runner), n);
  if (!session) return Error{"KV calibration: " + session.error(), session.error_code()};
  std::vector<float> cs(static_cast<size_t>(2 * half)), k_pre(static_cast<size_t>(kv_dim));
  fwd.set_attention_hook([&](int64_t il, const float* q, const float* k, const float* v, const int32_t* pos,
                             int64_t rows) {
    LayerSums& s = sums[size_t(il)];
    const kernels::RopeParams rope = fwd.rope_params(il);
    for (int64_t r = 0; r < rows; ++r) {
      const float* qr = q + r * c.q_dim();
      const float* kr = k + r * kv_dim;
      const float* vr = v + r * kv_dim;
      // The key before RoPE: rotated back (the angles negated; mscale divided out twice).
      std::copy_n(kr, kv_dim, k_pre.begin());
      if (half > 0) {
        kernels::rope_angles(pos[r], rope, cs.data(), cs.data() + half);
        const float m2 = rope.mscale * rope.mscale;
        for (int64_t j = 0; j < half; ++j) cs[size_t(j)] /= m2, cs[size_t(half + j)] /= -m2;
        kernels::rope_apply(k_pre.data(), c.n_kv_heads, hd, rope, cs.data(), cs.data() + half);
      }
      for (int64_t i = 0; i < kv_dim; ++i) {
        s.k[size_t(i)] += k_pre[size_t(i)], s.k2[size_t(i)] += double(kr[i]) * kr[i];
        s.v[size_t(i)] += vr[i], s.v2[size_t(i)] += double(vr[i]) * vr[i];
      }
      for (int64_t h = 0; h < c.n_heads; ++h)
        for (int64_t i = 0; i < hd; ++i) s.q2[size_t((h / group) * hd + i)] += double(qr[h * hd + i]) * qr[h * hd + i];
    }
    s.rows += rows;
  });
  std::vector<int32_t> text(tokens.begin(), tokens.begin() + n);
  if (o.bos >= 0) text[0] = o.bos;
  if (auto st = (*session)->eval(text, false, [](int64_t, const float*) {}); !st)
    return Error{"KV calibration: " + st.error(), st.error_code()};

  auto transform = std::make_shared<KvTransform>();
  // A soft cap on the scores would not ignore the shift's constant per query: keys unshifted.
  const bool shift_k = c.attn_softcap == 0.f;
  // The average rotation over the positions served, per distinct RoPE base (Gemma 3: two, for
  // its local and global layers): cos then sin of each pair.
  std::vector<std::pair<float, std::vector<float>>> avg_rotations;
  auto average_rotation = [&](const kernels::RopeParams& rope) -> const std::vector<float>& {
    for (const auto& [base, avg] : avg_rotations)
      if (base == rope.freq_base) return avg;
    std::vector<double> sum(size_t(2 * half), 0.0);
    for (int64_t p = 0; p < o.n_positions; ++p) {
      kernels::rope_angles(p, rope, cs.data(), cs.data() + half);
      for (size_t j = 0; j < sum.size(); ++j) sum[j] += cs[j];
    }
    std::vector<float> avg(sum.size());
    for (size_t j = 0; j < sum.size(); ++j) avg[j] = float(sum[j] / double(o.n_positions));
    return avg_rotations.emplace_back(rope.freq_base, std::move(avg)).second;
  };
  for (int64_t il = 0; il < c.n_layers; ++il) {
    const LayerSums& s = sums[size_t(il)];
    const kernels::RopeParams rope = fwd.rope_params(il);
    const double rows = double(s.rows), q_rows = rows * double(group);
    const size_t n_ch = static_cast<size_t>(kv_dim);
    KvLayerTransform lt;
    if (shift_k) {
      // The pre-RoPE mean through the average rotation over the positions served.
      for (size_t i = 0; i < n_ch; ++i) lt.k_shift.push_back(float(s.k[i] / rows));
      if (half > 0) {
        const std::vector<float>& avg = average_rotation(rope);
        kernels::rope_apply(lt.k_shift.data(), c.n_kv_heads, hd, rope, avg.data(), avg.data() + half);
      }
    }
    // Spreads and weights per rotary pair (shared by its two channels), around the shift.
    std::vector<double> k_spread(n_ch), q_weight(n_ch), v_spread(n_ch);
    for (size_t i = 0; i < n_ch; ++i) {
      const size_t j = size_t(int64_t(i) - int64_t(i) % hd + rope_partner(int64_t(i) % hd, rope));
      const double pair = i == j ? 1.0 : 2.0;
      const double shift2 = shift_k ? double(lt.k_shift[i]) * lt.k_shift[i] + (i == j ? 0.0 : double(lt.k_shift[j]) * lt.k_shift[j]) : 0.0;
      const double k2 = (s.k2[i] + (i == j ? 0.0 : s.k2[j])) / rows;
      k_spread[i] = std::sqrt(std::max(0.0, (k2 - shift2) / pair));
      q_weight[i] = std::sqrt((s.q2[i] + (i == j ? 0.0 : s.q2[j])) / q_rows / pair);
      const double vm = s.v[i] / rows;
      v_spread[i] = std::sqrt(std::max(0.0, s.v2[i] / rows - vm * vm));
      lt.v_shift.push_back(float(vm));
    }
    lt.k_scale = balanced_scale(k_spread, q_weight, hd);
    lt.v_scale = balanced_scale(v_spread, {}, hd);
    transform->layers.push_back(std::move(lt));
  }
  return std::shared_ptr<const KvTransform>(std::move(transform));
}

}  // namespace kvasir::eval
