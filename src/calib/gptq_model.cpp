#include "calib/gptq_model.h"

#include <algorithm>
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

// One matrix of the block being quantized: where its rows go, and the statistics of its input
// (shared by the matrices of one linear() call).
struct Job {
  Matrix* matrix;
  TensorSlice slice;
  DType to;
  std::shared_ptr<quant::HessianAccumulator> h;
};

}  // namespace

Result<GptqModel> gptq_quantize_model(Model& model, std::span<const int32_t> tokens, const GptqModelOptions& o) {
  if (o.n_ctx < 16) return Error{"the calibration chunk must be at least 16 tokens", ErrorCode::invalid_argument};
  if (!o.target) return Error{"GPTQ needs each tensor's target type", ErrorCode::invalid_argument};
  int64_t chunks = int64_t(tokens.size()) / o.n_ctx;
  if (o.max_chunks >= 0) chunks = std::min(chunks, o.max_chunks);
  if (chunks < 1)
    return Error{"the calibration text has " + std::to_string(tokens.size()) + " tokens; GPTQ needs at least one chunk of " +
                     std::to_string(o.n_ctx),
                 ErrorCode::invalid_argument};
  const ModelConfig& c = model.config();
  Forward fwd(model, {.max_batch_tokens = o.n_ctx, .num_threads = o.num_threads});
  constexpr int64_t kBlock = 16;
  auto kv = KvCache::create(c, {(o.n_ctx + kBlock - 1) / kBlock, kBlock, DType::F16});
  if (!kv) return Error{kv.error()};
  std::vector<int32_t> table(size_t(kv->num_blocks()));
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i);
  Batch batch;
  auto load_chunk = [&](int64_t ci) {
    batch.clear();
    batch.block_tables.push_back(&table);
    for (int64_t t = 0; t < o.n_ctx; ++t)
      batch.add(t == 0 && o.bos >= 0 ? o.bos : tokens[size_t(ci * o.n_ctx + t)], int32_t(t), 0, false);
  };
  const size_t chunk_floats = size_t(o.n_ctx * c.n_embd);
  std::vector<float> residual(size_t(chunks) * chunk_floats), scratch(chunk_floats);

  TensorIndex index(model.gguf(), false);
  GptqModel out;
  out.chunks = chunks;
  std::map<std::string, int64_t> rows_written;
  for (int64_t il = 0; il < c.n_layers; ++il) {
    std::vector<Job> jobs;
    std::map<const void*, size_t> job_of;  // by the float matrix's data
    for (Matrix* m : block_matrices(model.mutable_weights().layers[size_t(il)])) {
      const auto slice = index.find(*m);
      if (!slice) continue;
      const DType to = o.target(slice->tensor->name);
      if (to == m->type || !kernels::has_block_grid(to)) continue;
      if (m->n_in % dtype_info(to).block_size != 0)
        return Error{"tensor '" + slice->tensor->name + "': rows of " + std::to_string(m->n_in) + " are not whole " +
                         std::string(dtype_name(to)) + " blocks",
                     ErrorCode::invalid_argument};
      job_of[m->data] = jobs.size();
      jobs.push_back({m, *slice, to, nullptr});
    }
    // Pass 1: the float block over its quantized predecessors' output, collecting H.
    fwd.set_activation_hook([&](std::span<const Matrix* const> ws, const float* x, int64_t rows) {
      std::shared_ptr<quant::HessianAccumulator> h;
      for (const Matrix* w : ws)
        if (auto it = job_of.find(w->data); it != job_of.end() && jobs[it->second].h) h = jobs[it->second].h;
      for (const Matrix* w : ws) {
        auto it = job_of.find(w->data);
        if (it == job_of.end()) continue;
        if (!h) h = std::make_shared<quant::HessianAccumulator>(w->n_in);
        jobs[it->second].h = h;
      }
      if (h) h->add(x, rows, &fwd.pool());
    });
    if (!jobs.empty()) {
      for (int64_t ci = 0; ci < chunks; ++ci) {
        load_chunk(ci);
        std::copy_n(residual.begin() + ptrdiff_t(size_t(ci) * chunk_floats), chunk_floats, scratch.begin());
        if (auto s = fwd.forward_layers(batch, *kv, il, il + 1, scratch.data()); !s) return Error{s.error()};
      }
    }
    fwd.set_activation_hook({});
    // Quantize and swap in.
    for (Job& j : jobs) {
      const Matrix& m = *j.matrix;
      const gguf::TensorInfo& t = *j.slice.tensor;
      std::vector<float> w(size_t(m.n_out * m.n_in));
      const auto* from = kernels::quant_traits(m.type);
      const size_t src_rb = row_bytes(m.type, m.n_in), rb = row_bytes(j.to, m.n_in);
      for (int64_t r = 0; r < m.n_out; ++r)
        from->dequantize_row(static_cast<const uint8_t*>(m.data) + size_t(r) * src_rb, w.data() + r * m.n_in, m.n_in);
      std::vector<uint8_t> q;
      if (j.h) {  // an input reached it
        auto r = quant::gptq_quantize(j.to, w.data(), m.n_out, m.n_in, j.h->matrix(), o.gptq, &fwd.pool());
        if (!r) return Error{"tensor '" + t.name + "': " + r.error(), r.error_code()};
        q = std::move(*r);
      } else {  // an expert no calibration token chose: plain rounding
        q.resize(size_t(m.n_out) * rb);
        for (int64_t r = 0; r < m.n_out; ++r)
          kernels::quant_traits(j.to)->quantize_row(w.data() + r * m.n_in, q.data() + size_t(r) * rb, m.n_in);
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
    // Pass 2: the quantized block's output is the next block's input.
    for (int64_t ci = 0; ci < chunks; ++ci) {
      load_chunk(ci);
      float* chunk = residual.data() + size_t(ci) * chunk_floats;
      if (auto s = fwd.forward_layers(batch, *kv, il, il + 1, chunk); !s) return Error{s.error()};
    }
    if (o.on_layer) o.on_layer(il + 1, c.n_layers);
  }
  for (const gguf::TensorInfo& t : model.gguf().tensors) {
    if (!out.tensors.count(t.name)) continue;
    int64_t rows = 1;
    for (int d = 1; d < t.n_dims; ++d) rows *= t.ne[d];
    const std::string& name = t.name;
    if (rows_written[name] != rows)
      return Error{"tensor '" + name + "': GPTQ covered " + std::to_string(rows_written[name]) + " of its rows"};
  }
  return out;
}

}  // namespace kvasir::calib
