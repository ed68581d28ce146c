#include "compress/layer_importance.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "compress/chunk_pass.h"

namespace kvasir::compress {
namespace {

// Mean over rows of arccos(cos(a_t, b_t)) / π.
double mean_angular_distance(const float* a, const float* b, int64_t rows, int64_t n) {
  double sum = 0;
  for (int64_t t = 0; t < rows; ++t) {
    double ab = 0, aa = 0, bb = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double x = a[t * n + i], y = b[t * n + i];
      ab += x * y, aa += x * x, bb += y * y;
    }
    const double cos = aa > 0 && bb > 0 ? std::clamp(ab / std::sqrt(aa * bb), -1.0, 1.0) : 1.0;
    sum += std::acos(cos) / M_PI;
  }
  return sum;
}

}  // namespace

Result<LayerDistances> layer_distances(const Model& model, std::span<const int32_t> tokens, const LayerDistanceOptions& o) {
  const ModelConfig& c = model.config();
  if (o.max_span < 1 || o.max_span > c.n_layers)
    return Error{"a run of " + std::to_string(o.max_span) + " layers does not fit a model of " + std::to_string(c.n_layers),
                 ErrorCode::invalid_argument};
  auto n_chunks = count_chunks(tokens.size(), o.n_ctx, o.max_chunks, "the calibration text");
  if (!n_chunks) return Error{n_chunks.error(), n_chunks.error_code()};
  const int64_t chunks = *n_chunks;
  auto pass = ChunkPass::create(model, o.n_ctx, o.num_threads);
  if (!pass) return Error{pass.error()};

  LayerDistances out{.n_layers = c.n_layers, .max_span = o.max_span, .tokens = chunks * o.n_ctx,
                     .d = std::vector<double>(size_t(o.max_span * c.n_layers), 0.0)};
  const int64_t n = c.n_embd, T = o.n_ctx;
  // The residual stream entering every layer and leaving the last: [n_layers + 1][T][n_embd].
  std::vector<float> h(size_t((c.n_layers + 1) * T * n));
  for (int64_t ci = 0; ci < chunks; ++ci) {
    const Batch& batch = (*pass)->load(tokens.subspan(size_t(ci * T), size_t(T)), o.bos, false);
    // Layer 0's input (forward_layers embeds it itself, but keeps no copy).
    for (int64_t t = 0; t < T; ++t) embed_token(model, batch.tokens[size_t(t)], h.data() + t * n);
    for (int64_t il = 0; il < c.n_layers; ++il) {
      float* next = h.data() + (il + 1) * T * n;
      std::copy_n(h.data() + il * T * n, T * n, next);
      if (auto s = (*pass)->forward().forward_layers(batch, (*pass)->kv(), il, il + 1, next); !s) return Error{s.error()};
    }
    for (int64_t span = 1; span <= o.max_span; ++span)
      for (int64_t il = 0; il + span <= c.n_layers; ++il)
        out.d[size_t((span - 1) * c.n_layers + il)] += mean_angular_distance(h.data() + il * T * n, h.data() + (il + span) * T * n, T, n);
    if (o.on_chunk) o.on_chunk(ci + 1, chunks);
  }
  for (int64_t span = 1; span <= o.max_span; ++span)
    for (int64_t il = 0; il < c.n_layers; ++il) {
      double& d = out.d[size_t((span - 1) * c.n_layers + il)];
      d = il + span <= c.n_layers ? d / double(out.tokens) : std::numeric_limits<double>::quiet_NaN();
    }
  return out;
}

std::vector<int64_t> layers_to_remove(const LayerDistances& d, int64_t count, bool contiguous) {
  const int64_t candidates = d.n_layers - 1;  // never the last layer
  if (count <= 0 || count > candidates) return {};
  if (contiguous) {
    if (count > d.max_span) return {};
    int64_t best = 0;
    for (int64_t il = 1; il + count <= candidates; ++il)
      if (d.at(il, count) < d.at(best, count)) best = il;
    std::vector<int64_t> out(static_cast<size_t>(count));
    std::iota(out.begin(), out.end(), best);
    return out;
  }
  std::vector<int64_t> order(static_cast<size_t>(candidates));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return d.at(a, 1) < d.at(b, 1); });
  order.resize(size_t(count));
  std::sort(order.begin(), order.end());
  return order;
}

}  // namespace kvasir::compress
