#include "calib/calibrated_quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "calib/tensor_index.h"
#include "kernels/quant/grid.h"
#include "kernels/quant/quant.h"
#include "model/forward.h"
#include "model/kv_cache.h"

namespace kvasir::calib {
namespace {

std::vector<Matrix*> block_matrices(LayerWeights& l) {
  std::vector<Matrix*> all = {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.router};
  for (auto* experts : {&l.gate_exps, &l.up_exps, &l.down_exps})
    for (Matrix& e : *experts) all.push_back(&e);
  std::erase_if(all, [](const Matrix* m) { return m->data == nullptr; });
  return all;
}

// What pass 1 gathers about one matrix input (shared by the matrices of one linear() call).
struct InputStats {
  explicit InputStats(int64_t n, bool hessian) : n(n), abs_sum(size_t(n), 0.0), sq_sum(size_t(n), 0.0) {
    if (hessian) h = std::make_unique<quant::HessianAccumulator>(n);
  }
  int64_t n;
  std::unique_ptr<quant::HessianAccumulator> h;
  std::vector<double> abs_sum, sq_sum;
  std::vector<float> sample;  // [rows][n]
  int64_t count = 0;
  std::vector<float> mean_sq() const {
    std::vector<float> m(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) m[size_t(k)] = float(sq_sum[size_t(k)] / double(count));
    return m;
  }
};

// One matrix of the block: where its rows go, its float weights (scaled in place by AWQ's
// folds), and its input's statistics.
struct Job {
  Matrix* matrix;
  TensorSlice slice;
  DType to;
  std::vector<float> w;
  std::shared_ptr<InputStats> stats;
  std::vector<float> in_scale;  // AWQ: its columns were multiplied by these (empty: none)
};

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(float));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace

Result<CalibratedModel> calibrated_quantize(Model& model, std::span<const int32_t> tokens, const CalibratedOptions& o) {
  if (o.n_ctx < 16) return Error{"the calibration chunk must be at least 16 tokens", ErrorCode::invalid_argument};
  if (!o.target) return Error{"calibrated quantization needs each tensor's target type", ErrorCode::invalid_argument};
  int64_t chunks = int64_t(tokens.size()) / o.n_ctx;
  if (o.max_chunks >= 0) chunks = std::min(chunks, o.max_chunks);
  if (chunks < 1)
    return Error{"the calibration text has " + std::to_string(tokens.size()) + " tokens; it needs at least one chunk of " +
                     std::to_string(o.n_ctx),
                 ErrorCode::invalid_argument};
  const bool use_gptq = o.method != Method::awq, use_awq = o.method != Method::gptq;
  const ModelConfig& c = model.config();
  Forward fwd(model, {.max_batch_tokens = o.n_ctx, .num_threads = o.num_threads});
  constexpr int64_t kBlock = 16;
  auto kv = KvCache::create(c, {.n_blocks = (o.n_ctx + kBlock - 1) / kBlock, .block_size = kBlock, .type = DType::F16});
  if (!kv) return Error{kv.error()};
  std::vector<int32_t> table(size_t(kv->num_blocks()));
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i);
  Batch batch;
  auto load_chunk = [&](int64_t ci) {
    batch.clear();
    batch.add_sequence(table);
    for (int64_t t = 0; t < o.n_ctx; ++t)
      batch.add(t == 0 && o.bos >= 0 ? o.bos : tokens[size_t(ci * o.n_ctx + t)], int32_t(t), 0, false);
  };
  const size_t chunk_floats = size_t(o.n_ctx * c.n_embd);
  std::vector<float> residual(size_t(chunks) * chunk_floats), scratch(chunk_floats);
  const int64_t stride = std::max<int64_t>(1, chunks * o.n_ctx / std::max<int64_t>(1, o.awq_sample_rows));
  ThreadPool* pool = &fwd.pool();

  TensorIndex index(model.gguf(), false);
  CalibratedModel out;
  out.chunks = chunks;
  std::map<std::string, int64_t> rows_written;
  for (int64_t il = 0; il < c.n_layers; ++il) {
    LayerWeights& lw = model.mutable_weights().layers[size_t(il)];
    std::vector<Job> jobs;
    std::map<const void*, size_t> job_of;  // by the float matrix's data
    for (Matrix* m : block_matrices(lw)) {
      const auto slice = index.find(*m);
      if (!slice) continue;
      const DType to = o.target(slice->tensor->name);
      if (!kernels::quant_traits(to) || (to != DType::F32 && !kernels::quant_traits(to)->quantize_row))
        return Error{"tensor '" + slice->tensor->name + "': no quantizer for " + std::string(dtype_name(to))};
      if (m->n_in % dtype_info(to).block_size != 0)
        return Error{"tensor '" + slice->tensor->name + "': rows of " + std::to_string(m->n_in) + " are not whole " +
                         std::string(dtype_name(to)) + " blocks",
                     ErrorCode::invalid_argument};
      job_of[m->data] = jobs.size();
      jobs.push_back({m, *slice, to, {}, nullptr, {}});
    }
    auto job = [&](const Matrix& m) -> Job* {
      auto it = m.data ? job_of.find(m.data) : job_of.end();
      return it == job_of.end() ? nullptr : &jobs[it->second];
    };

    // 1. The float block over its quantized predecessors' output.
    int64_t chunk_index = 0;
    fwd.set_activation_hook([&](std::span<const Matrix* const> ws, const float* x, int64_t rows) {
      std::shared_ptr<InputStats> st;
      for (const Matrix* w : ws)
        if (Job* j = job(*w); j && j->stats) st = j->stats;
      for (const Matrix* w : ws)
        if (Job* j = job(*w)) {
          if (!st) st = std::make_shared<InputStats>(w->n_in, use_gptq);
          j->stats = st;
        }
      if (!st) return;
      if (st->h) st->h->add(x, rows, pool);
      if (!use_awq || rows != o.n_ctx) return;  // experts' gathered rows: no AWQ
      for (int64_t r = 0; r < rows; ++r) {
        const float* v = x + r * st->n;
        for (int64_t k = 0; k < st->n; ++k) st->abs_sum[size_t(k)] += std::fabs(v[k]), st->sq_sum[size_t(k)] += double(v[k]) * v[k];
        if ((chunk_index * o.n_ctx + r) % stride == 0) st->sample.insert(st->sample.end(), v, v + st->n);
      }
      st->count += rows;
    });
    for (int64_t ci = 0; ci < chunks && !jobs.empty(); ++ci) {
      chunk_index = ci;
      load_chunk(ci);
      std::copy_n(residual.begin() + ptrdiff_t(size_t(ci) * chunk_floats), chunk_floats, scratch.begin());
      if (auto s = fwd.forward_layers(batch, *kv, il, il + 1, scratch.data()); !s) return Error{s.error()};
    }
    fwd.set_activation_hook({});
    for (Job& j : jobs) {  // the float weights
      const Matrix& m = *j.matrix;
      j.w.resize(size_t(m.n_out * m.n_in));
      const auto* from = kernels::quant_traits(m.type);
      const size_t src_rb = row_bytes(m.type, m.n_in);
      for (int64_t r = 0; r < m.n_out; ++r)
        from->dequantize_row(static_cast<const uint8_t*>(m.data) + size_t(r) * src_rb, j.w.data() + r * m.n_in, m.n_in);
    }

    // 2. AWQ: per input with a foldable producer, the scales, and the folds.
    std::vector<std::string> folded;  // vectors rewritten (norms, biases)
    if (use_awq) {
      const std::string p = "blk." + std::to_string(il) + ".";
      // Searches s for the matrices `mats` (sharing one input); multiplies their columns by s.
      auto scale_input = [&](std::vector<Job*> mats, const std::vector<float>* tie) -> Result<std::vector<float>> {
        std::erase(mats, nullptr);
        if (mats.empty() || !mats[0]->stats || mats[0]->stats->count == 0) return std::vector<float>{};
        for (Job* j : mats)
          if (!kernels::has_block_grid(j->to) || j->stats != mats[0]->stats) return std::vector<float>{};
        const InputStats& st = *mats[0]->stats;
        std::vector<float> mean_abs(size_t(st.n));
        for (int64_t k = 0; k < st.n; ++k) mean_abs[size_t(k)] = float(st.abs_sum[size_t(k)] / double(st.count));
        if (tie) mean_abs = *tie;
        std::vector<quant::AwqMatrix> am;
        for (Job* j : mats) am.push_back({j->w.data(), j->matrix->n_out, j->to});
        auto r = quant::awq_search(am, st.n, st.sample.data(), int64_t(st.sample.size()) / st.n, mean_abs,
                                   st.mean_sq(), o.awq, pool);
        if (!r) return Error{r.error()};
        out.awq_alphas.push_back(r->alpha);
        for (Job* j : mats) {
          for (int64_t row = 0; row < j->matrix->n_out; ++row)
            for (int64_t k = 0; k < st.n; ++k) j->w[size_t(row * st.n + k)] *= r->s[size_t(k)];
          j->in_scale = r->s;
        }
        return std::move(r->s);
      };
      auto divide_rows = [](Job* j, const std::vector<float>& s, int64_t first) {  // rows [first, first + s.size())
        const int64_t n = j->matrix->n_in;
        for (size_t r = 0; r < s.size(); ++r)
          for (int64_t k = 0; k < n; ++k) j->w[(size_t(first) + r) * size_t(n) + size_t(k)] /= s[r];
      };
      // q/k/v: into attn_norm.
      auto s_qkv = scale_input({job(lw.wq), job(lw.wk), job(lw.wv)}, nullptr);
      if (!s_qkv) return Error{s_qkv.error()};
      if (!s_qkv->empty()) {
        for (int64_t k = 0; k < c.n_embd; ++k) lw.attn_norm[size_t(k)] /= (*s_qkv)[size_t(k)];
        folded.push_back(p + "attn_norm.weight");
      }
      // o: into v's rows; a query head's channel d reads KV head h / n_gqa's channel d, so the
      // scales are tied across the query heads of a KV head (their magnitudes averaged).
      Job* v = job(lw.wv);
      Job* jo = job(lw.wo);
      if (v && jo && jo->stats && jo->stats->count > 0) {
        const int64_t hd = c.head_dim, n_kv = c.n_kv_heads, gqa = c.n_heads / c.n_kv_heads;
        std::vector<double> kv_mean(size_t(n_kv * hd), 0.0);
        for (int64_t h = 0; h < c.n_heads; ++h)
          for (int64_t d = 0; d < hd; ++d)
            kv_mean[size_t((h / gqa) * hd + d)] += jo->stats->abs_sum[size_t(h * hd + d)] / double(jo->stats->count * gqa);
        std::vector<float> tie(size_t(c.n_heads * hd));
        for (int64_t h = 0; h < c.n_heads; ++h)
          for (int64_t d = 0; d < hd; ++d) tie[size_t(h * hd + d)] = float(kv_mean[size_t((h / gqa) * hd + d)]);
        auto s_o = scale_input({jo}, &tie);
        if (!s_o) return Error{s_o.error()};
        if (!s_o->empty()) {
          std::vector<float> per_kv(size_t(n_kv * hd));
          for (int64_t i = 0; i < n_kv * hd; ++i) per_kv[size_t(i)] = (*s_o)[size_t((i / hd) * gqa * hd + i % hd)];
          divide_rows(v, per_kv, 0);
          if (!lw.bv.empty()) {
            for (size_t i = 0; i < per_kv.size(); ++i) lw.bv[i] /= per_kv[i];
            folded.push_back(p + "attn_v.bias");
          }
        }
      }
      // gate/up: into ffn_norm; down: into up's rows (down reads act(gate) * up). Dense FFNs only.
      if (!c.moe() && lw.w_gate.data) {
        auto s_ffn = scale_input({job(lw.w_gate), job(lw.w_up)}, nullptr);
        if (!s_ffn) return Error{s_ffn.error()};
        if (!s_ffn->empty()) {
          for (int64_t k = 0; k < c.n_embd; ++k) lw.ffn_norm[size_t(k)] /= (*s_ffn)[size_t(k)];
          folded.push_back(p + "ffn_norm.weight");
        }
        Job* up = job(lw.w_up);
        if (up) {
          auto s_down = scale_input({job(lw.w_down)}, nullptr);
          if (!s_down) return Error{s_down.error()};
          if (!s_down->empty()) divide_rows(up, *s_down, 0);
        }
      }
      for (const std::string& name : folded) {
        const Vector& vec = name.ends_with("attn_norm.weight") ? lw.attn_norm
                            : name.ends_with("ffn_norm.weight") ? lw.ffn_norm
                                                                : lw.bv;
        out.tensors[name] = f32_bytes(vec);
      }
    }

    // 3. Quantize and swap in.
    for (Job& j : jobs) {
      const Matrix& m = *j.matrix;
      const gguf::TensorInfo& t = *j.slice.tensor;
      if (!o.quantize) {
        out.kept.push_back(std::move(j.w));
        *j.matrix = Matrix{.type = DType::F32, .data = out.kept.back().data(), .n_in = m.n_in, .n_out = m.n_out};
        continue;
      }
      const size_t rb = row_bytes(j.to, m.n_in);
      std::vector<uint8_t> q;
      if (use_gptq && j.stats && j.stats->h && kernels::has_block_grid(j.to)) {
        std::vector<double> h = j.stats->h->matrix();
        if (!j.in_scale.empty())  // the scaled matrix reads x / s: H' = diag(s)⁻¹ H diag(s)⁻¹
          for (int64_t a = 0; a < m.n_in; ++a)
            for (int64_t b = 0; b < m.n_in; ++b) h[size_t(a * m.n_in + b)] /= double(j.in_scale[size_t(a)]) * j.in_scale[size_t(b)];
        auto r = quant::gptq_quantize(j.to, j.w.data(), m.n_out, m.n_in, std::move(h), o.gptq, pool);
        if (!r) return Error{"tensor '" + t.name + "': " + r.error(), r.error_code()};
        q = std::move(*r);
      } else {  // round to nearest (after AWQ's scaling; an expert no token chose; a float type)
        q.resize(size_t(m.n_out) * rb);
        // AWQ's quantizer: weighted by E[(x / s)²] where the search used it.
        const bool weighted = use_awq && o.awq.weighted && j.stats && j.stats->count > 0;
        const std::vector<float> mean_sq = weighted ? j.stats->mean_sq() : std::vector<float>{};
        const std::vector<float> ones(weighted && j.in_scale.empty() ? size_t(m.n_in) : 0, 1.f);
        const std::span<const float> s = j.in_scale.empty() ? std::span<const float>(ones) : j.in_scale;
        for (int64_t r = 0; r < m.n_out; ++r) {
          uint8_t* y = q.data() + size_t(r) * rb;
          if (j.to == DType::F32) std::memcpy(y, j.w.data() + r * m.n_in, rb);
          else if (dtype_info(j.to).block_size > 1) quant::awq_quantize_row(j.to, j.w.data() + r * m.n_in, y, m.n_in, s, mean_sq);
          else kernels::quant_traits(j.to)->quantize_row(j.w.data() + r * m.n_in, y, m.n_in);
        }
      }
      int64_t tensor_rows = 1;
      for (int d = 1; d < t.n_dims; ++d) tensor_rows *= t.ne[d];
      std::vector<uint8_t>& dst = out.tensors[t.name];
      if (dst.empty()) dst.resize(size_t(tensor_rows) * rb);
      uint8_t* at = dst.data() + size_t(j.slice.first_row) * rb;
      std::copy(q.begin(), q.end(), at);
      rows_written[t.name] += m.n_out;
      *j.matrix = Matrix{.type = j.to, .data = at, .n_in = m.n_in, .n_out = m.n_out};
    }

    // 4. The quantized block's output is the next block's input.
    for (int64_t ci = 0; ci < chunks; ++ci) {
      load_chunk(ci);
      float* chunk = residual.data() + size_t(ci) * chunk_floats;
      if (auto s = fwd.forward_layers(batch, *kv, il, il + 1, chunk); !s) return Error{s.error()};
    }
    if (o.on_layer) o.on_layer(il + 1, c.n_layers);
  }
  for (const gguf::TensorInfo& t : model.gguf().tensors) {
    if (!rows_written.count(t.name)) continue;
    int64_t rows = 1;
    for (int d = 1; d < t.n_dims; ++d) rows *= t.ne[d];
    if (rows_written[t.name] != rows)
      return Error{"tensor '" + t.name + "': the calibrated quantization covered " + std::to_string(rows_written[t.name]) +
                   " of its " + std::to_string(rows) + " rows"};
  }
  return out;
}

}  // namespace kvasir::calib
