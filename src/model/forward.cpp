#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/quant/quant.h"

namespace kvasir {

Forward::Forward(const Model& model, const ForwardOptions& o)
    : model_(model),
      c_(model.config()),
      max_tokens_(std::max<int64_t>(1, o.max_batch_tokens)),
      pool_(o.num_threads > 0 ? o.num_threads : ThreadPool::default_threads()) {
  const size_t T = size_t(max_tokens_);
  x_.resize(T * c_.n_embd);
  xn_.resize(T * c_.n_embd);
  q_.resize(T * c_.q_dim());
  k_.resize(T * c_.kv_dim());
  v_.resize(T * c_.kv_dim());
  att_.resize(T * c_.q_dim());
  proj_.resize(T * c_.n_embd);
  gate_.resize(T * c_.n_ff);
  up_.resize(T * c_.n_ff);
  logits_.resize(T * c_.n_vocab);
  logit_rows_.reserve(T);
  // The widest activation row any weight converts to: at most 4 bytes per element.
  const int64_t widest = std::max({c_.n_embd, c_.q_dim(), c_.n_ff});
  act_q_.resize(T * size_t(widest) * 4 + 64);
  kernels::KvLayerView probe{nullptr, nullptr, DType::F32, 16, c_.n_kv_heads, c_.head_dim};
  kernels::AttentionParams ap{c_.n_heads, 0, 1.f, 0.f};
  // Block size is a KvCache option; size the scratch for blocks of up to 256 tokens.
  probe.block_size = 256;
  attn_scratch_floats_ = kernels::attention_scratch_floats(probe, ap);
  attn_scratch_.resize(size_t(attn_scratch_floats_) * size_t(pool_.num_threads()));
}

Status Forward::validate(const Batch& b, const KvCache& kv) const {
  const int64_t T = b.size();
  if (T <= 0 || T > max_tokens_)
    return Error{"batch of " + std::to_string(T) + " tokens (1.." + std::to_string(max_tokens_) + " allowed)"};
  if (int64_t(b.positions.size()) != T || int64_t(b.seq_index.size()) != T || int64_t(b.want_logits.size()) != T)
    return Error{"batch arrays have different lengths"};
  if (kv.block_size() > 256) return Error{"KV block size above 256 is not supported"};
  for (int64_t t = 0; t < T; ++t) {
    if (b.tokens[t] < 0 || b.tokens[t] >= c_.n_vocab)
      return Error{"token id " + std::to_string(b.tokens[t]) + " is outside the vocabulary (" + std::to_string(c_.n_vocab) + ")"};
    const int32_t s = b.seq_index[t];
    if (s < 0 || size_t(s) >= b.block_tables.size() || !b.block_tables[size_t(s)])
      return Error{"batch row " + std::to_string(t) + " has no block table"};
    const auto& table = *b.block_tables[size_t(s)];
    const int64_t pos = b.positions[t];
    if (pos < 0 || pos / kv.block_size() >= int64_t(table.size()))
      return Error{"position " + std::to_string(pos) + " is not covered by its block table"};
    for (int64_t blk = 0; blk <= pos / kv.block_size(); ++blk)
      if (table[size_t(blk)] < 0 || table[size_t(blk)] >= kv.num_blocks()) return Error{"block id out of range"};
  }
  return {};
}

void Forward::linear(const Matrix& w, const float* x, int64_t T, float* y) {
  const kernels::QuantTraits* tr = kernels::quant_traits(w.type);
  const DType act_type = tr->vec_dot_type;
  const size_t rb = row_bytes(act_type, w.n_in);
  uint8_t* aq = act_q_.data();
  pool_.parallel_for(T, 1, [&](int64_t b, int64_t e, int) {
    kernels::quantize_activations(act_type, x + b * w.n_in, e - b, w.n_in, aq + size_t(b) * rb);
  });
  // Split output rows across threads; every y element is one full dot product whatever the
  // split, so results do not depend on the thread count or the batch composition.
  pool_.parallel_for(w.n_out, 16, [&](int64_t b, int64_t e, int) {
    kernels::matmul_rows(w.type, w.data, w.n_in, b, e, aq, T, y, w.n_out);
  });
}

void Forward::norm_rows(const float* x, const Vector& weight, int64_t T, int64_t n, float* out) {
  for (int64_t t = 0; t < T; ++t) kernels::rms_norm(x + t * n, weight.data(), n, c_.norm_eps, out + t * n);
}

void Forward::embed(const Batch& b) {
  const Matrix& e = model_.weights().token_embd;
  const auto* tr = kernels::quant_traits(e.type);
  const size_t rb = row_bytes(e.type, e.n_in);
  for (int64_t t = 0; t < b.size(); ++t) {
    float* row = x_.data() + t * c_.n_embd;
    tr->dequantize_row(static_cast<const uint8_t*>(e.data) + size_t(b.tokens[t]) * rb, row, c_.n_embd);
    if (c_.embed_scale != 1.f) kernels::scale_inplace(row, c_.n_embd, c_.embed_scale);
  }
}

void Forward::attention_block(int64_t il, const Batch& b, KvCache& kv) {
  const LayerWeights& l = model_.weights().layers[size_t(il)];
  const int64_t T = b.size(), hd = c_.head_dim;
  norm_rows(x_.data(), l.attn_norm, T, c_.n_embd, xn_.data());
  linear(l.wq, xn_.data(), T, q_.data());
  linear(l.wk, xn_.data(), T, k_.data());
  linear(l.wv, xn_.data(), T, v_.data());

  const bool swa = c_.layer_is_swa[size_t(il)];
  kernels::RopeParams rope{c_.rope_mode, c_.rope_dims, swa ? c_.rope_base_swa : c_.rope_base, c_.rope_freq_scale,
                           model_.weights().rope_freqs.empty() ? nullptr : model_.weights().rope_freqs.data()};
  const kernels::KvLayerView view = kv.layer(il);
  for (int64_t t = 0; t < T; ++t) {
    float* q = q_.data() + t * c_.q_dim();
    float* k = k_.data() + t * c_.kv_dim();
    float* v = v_.data() + t * c_.kv_dim();
    if (c_.qkv_bias) {
      kernels::add_inplace(q, l.bq.data(), c_.q_dim());
      kernels::add_inplace(k, l.bk.data(), c_.kv_dim());
      kernels::add_inplace(v, l.bv.data(), c_.kv_dim());
    }
    if (c_.qk_norm) {
      norm_rows(q, l.q_norm, c_.n_heads, hd, q);
      norm_rows(k, l.k_norm, c_.n_kv_heads, hd, k);
    }
    kernels::rope(q, c_.n_heads, hd, b.positions[t], rope);
    kernels::rope(k, c_.n_kv_heads, hd, b.positions[t], rope);
    // Every row's K/V is stored before any row attends, so a prefill chunk sees itself causally.
    kernels::kv_store(view, b.block_tables[size_t(b.seq_index[t])]->data(), b.positions[t], k, v);
  }
  const kernels::AttentionParams ap{c_.n_heads, swa ? c_.sliding_window : 0, c_.attn_scale, 0.f};
  pool_.parallel_for(T, 1, [&](int64_t begin, int64_t end, int thread) {
    float* scratch = attn_scratch_.data() + size_t(thread) * size_t(attn_scratch_floats_);
    for (int64_t t = begin; t < end; ++t)
      kernels::attention(q_.data() + t * c_.q_dim(), view, b.block_tables[size_t(b.seq_index[t])]->data(),
                         b.positions[t], ap, att_.data() + t * c_.q_dim(), scratch);
  });
  linear(l.wo, att_.data(), T, proj_.data());
  if (c_.post_norms) norm_rows(proj_.data(), l.post_attn_norm, T, c_.n_embd, proj_.data());
  kernels::add_inplace(x_.data(), proj_.data(), T * c_.n_embd);
}

void Forward::ffn_block(int64_t il, int64_t T) {
  const LayerWeights& l = model_.weights().layers[size_t(il)];
  norm_rows(x_.data(), l.ffn_norm, T, c_.n_embd, xn_.data());
  linear(l.w_gate, xn_.data(), T, gate_.data());
  linear(l.w_up, xn_.data(), T, up_.data());
  if (c_.ffn_act == FfnAct::Silu) kernels::silu_mul(gate_.data(), up_.data(), T * c_.n_ff, gate_.data());
  else kernels::gelu_tanh_mul(gate_.data(), up_.data(), T * c_.n_ff, gate_.data());
  linear(l.w_down, gate_.data(), T, proj_.data());
  if (c_.post_norms) norm_rows(proj_.data(), l.post_ffn_norm, T, c_.n_embd, proj_.data());
  kernels::add_inplace(x_.data(), proj_.data(), T * c_.n_embd);
}

void Forward::output_logits(const Batch& b) {
  // Gather the rows that want logits, norm them, and project only those.
  logit_rows_.clear();
  for (int64_t t = 0; t < b.size(); ++t)
    if (b.want_logits[t]) logit_rows_.push_back(t);
  const int64_t n = int64_t(logit_rows_.size());
  for (int64_t i = 0; i < n; ++i)
    kernels::rms_norm(x_.data() + logit_rows_[i] * c_.n_embd, model_.weights().output_norm.data(), c_.n_embd,
                      c_.norm_eps, xn_.data() + i * c_.n_embd);
  if (n == 0) return;
  linear(model_.weights().output, xn_.data(), n, logits_.data());
  if (c_.final_logit_softcap > 0) kernels::softcap_inplace(logits_.data(), n * c_.n_vocab, c_.final_logit_softcap);
}

Result<const float*> Forward::forward(const Batch& batch, KvCache& kv) {
  if (auto s = validate(batch, kv); !s) return Error{s.error()};
  embed(batch);
  for (int64_t il = 0; il < c_.n_layers; ++il) {
    attention_block(il, batch, kv);
    ffn_block(il, batch.size());
  }
  output_logits(batch);
  return static_cast<const float*>(logits_.data());
}

}  // namespace kvasir
