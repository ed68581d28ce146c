#include "model/weights.h"

#include <initializer_list>
#include <string>

#include "kernels/quant/quant.h"

namespace kvasir {
namespace {

std::string shape_str(const gguf::TensorInfo& t) {
  std::string s = "[";
  for (int d = 0; d < t.n_dims; ++d) s += (d ? ", " : "") + std::to_string(t.ne[d]);
  return s + "]";
}

class Binder {
 public:
  explicit Binder(const gguf::File& f) : f_(f) {}

  Result<Matrix> matrix(const std::string& name, int64_t n_in, int64_t n_out) const {
    const gguf::TensorInfo* t = f_.tensor(name);
    if (!t) return Error{"missing tensor '" + name + "'"};
    if (t->n_dims != 2 || t->ne[0] != n_in || t->ne[1] != n_out)
      return Error{"tensor '" + name + "' has shape " + shape_str(*t) + ", expected [" + std::to_string(n_in) + ", " +
                   std::to_string(n_out) + "]"};
    if (!kernels::quant_traits(t->type))
      return Error{"tensor '" + name + "' has type " + std::string(dtype_name(t->type)) + ", which has no kernels"};
    return Matrix{t->type, t->data, n_in, n_out};
  }

  // A 2-D tensor cut into consecutive runs of rows (a fused QKV or gate|up projection).
  Result<std::vector<Matrix>> split_rows(const std::string& name, int64_t n_in, std::initializer_list<int64_t> rows) const {
    int64_t total = 0;
    for (int64_t r : rows) total += r;
    auto whole = matrix(name, n_in, total);
    if (!whole) return Error{whole.error()};
    std::vector<Matrix> parts;
    const size_t rb = row_bytes(whole->type, n_in);
    int64_t at = 0;
    for (int64_t r : rows) {
      parts.push_back({whole->type, static_cast<const uint8_t*>(whole->data) + size_t(at) * rb, n_in, r});
      at += r;
    }
    return parts;
  }

  // A 3-D tensor [n_in, n_out, n] as n matrices (one per expert).
  Result<std::vector<Matrix>> stacked(const std::string& name, int64_t n_in, int64_t n_out, int64_t n) const {
    const gguf::TensorInfo* t = f_.tensor(name);
    if (!t) return Error{"missing tensor '" + name + "'"};
    if (t->n_dims != 3 || t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != n)
      return Error{"tensor '" + name + "' has shape " + shape_str(*t) + ", expected [" + std::to_string(n_in) + ", " +
                   std::to_string(n_out) + ", " + std::to_string(n) + "]"};
    if (!kernels::quant_traits(t->type))
      return Error{"tensor '" + name + "' has type " + std::string(dtype_name(t->type)) + ", which has no kernels"};
    std::vector<Matrix> parts;
    const size_t bytes = row_bytes(t->type, n_in) * size_t(n_out);
    for (int64_t e = 0; e < n; ++e)
      parts.push_back({t->type, static_cast<const uint8_t*>(t->data) + size_t(e) * bytes, n_in, n_out});
    return parts;
  }

  bool has(const std::string& name) const { return f_.tensor(name) != nullptr; }

  // A 1-D tensor converted to F32; empty when absent and optional.
  Result<Vector> vector(const std::string& name, int64_t n, bool required) const {
    const gguf::TensorInfo* t = f_.tensor(name);
    if (!t) {
      if (required) return Error{"missing tensor '" + name + "'"};
      return Vector{};
    }
    if (t->num_elements() != n || t->ne[0] != n)
      return Error{"tensor '" + name + "' has shape " + shape_str(*t) + ", expected [" + std::to_string(n) + "]"};
    const auto* tr = kernels::quant_traits(t->type);
    if (!tr) return Error{"tensor '" + name + "' has unsupported type " + std::string(dtype_name(t->type))};
    Vector v(static_cast<size_t>(n));
    tr->dequantize_row(t->data, v.data(), n);
    return v;
  }

 private:
  const gguf::File& f_;
};

#define KV_TRY(dst, expr)                       \
  do {                                          \
    auto r_ = (expr);                           \
    if (!r_) return Error{r_.error()};          \
    dst = std::move(*r_);                       \
  } while (0)

}  // namespace

Result<Weights> bind_weights(const gguf::File& file, const ModelConfig& c) {
  Binder b(file);
  Weights w;
  KV_TRY(w.token_embd, b.matrix("token_embd.weight", c.n_embd, c.n_vocab));
  KV_TRY(w.output_norm, b.vector("output_norm.weight", c.n_embd, true));
  if (file.tensor("output.weight")) {
    KV_TRY(w.output, b.matrix("output.weight", c.n_embd, c.n_vocab));
  } else {
    w.output = w.token_embd;  // tied embeddings
  }
  KV_TRY(w.rope_freqs, b.vector("rope_freqs.weight", c.rope_dims / 2, false));
  if (w.rope_freqs.empty()) KV_TRY(w.rope_freqs, b.vector("rope_factors_short.weight", c.rope_dims / 2, false));
  w.layers.resize(size_t(c.n_layers));
  for (int64_t il = 0; il < c.n_layers; ++il) {
    LayerWeights& l = w.layers[size_t(il)];
    const std::string p = "blk." + std::to_string(il) + ".";
    KV_TRY(l.attn_norm, b.vector(p + "attn_norm.weight", c.n_embd, true));
    if (b.has(p + "attn_qkv.weight")) {  // phi3: one fused projection, q then k then v rows
      std::vector<Matrix> qkv;
      KV_TRY(qkv, b.split_rows(p + "attn_qkv.weight", c.n_embd, {c.q_dim(), c.kv_dim(), c.kv_dim()}));
      l.wq = qkv[0], l.wk = qkv[1], l.wv = qkv[2];
    } else {
      KV_TRY(l.wq, b.matrix(p + "attn_q.weight", c.n_embd, c.q_dim()));
      KV_TRY(l.wk, b.matrix(p + "attn_k.weight", c.n_embd, c.kv_dim()));
      KV_TRY(l.wv, b.matrix(p + "attn_v.weight", c.n_embd, c.kv_dim()));
    }
    KV_TRY(l.wo, b.matrix(p + "attn_output.weight", c.q_dim(), c.n_embd));
    KV_TRY(l.bq, b.vector(p + "attn_q.bias", c.q_dim(), c.qkv_bias));
    KV_TRY(l.bk, b.vector(p + "attn_k.bias", c.kv_dim(), c.qkv_bias));
    KV_TRY(l.bv, b.vector(p + "attn_v.bias", c.kv_dim(), c.qkv_bias));
    KV_TRY(l.q_norm, b.vector(p + "attn_q_norm.weight", c.head_dim, c.qk_norm));
    KV_TRY(l.k_norm, b.vector(p + "attn_k_norm.weight", c.head_dim, c.qk_norm));
    KV_TRY(l.post_attn_norm, b.vector(p + "post_attention_norm.weight", c.n_embd, c.post_norms));
    KV_TRY(l.ffn_norm, b.vector(p + "ffn_norm.weight", c.n_embd, true));
    if (c.moe()) {
      KV_TRY(l.router, b.matrix(p + "ffn_gate_inp.weight", c.n_embd, c.n_experts));
      KV_TRY(l.gate_exps, b.stacked(p + "ffn_gate_exps.weight", c.n_embd, c.n_ff_exp, c.n_experts));
      KV_TRY(l.up_exps, b.stacked(p + "ffn_up_exps.weight", c.n_embd, c.n_ff_exp, c.n_experts));
      KV_TRY(l.down_exps, b.stacked(p + "ffn_down_exps.weight", c.n_ff_exp, c.n_embd, c.n_experts));
    } else if (c.arch == Arch::Phi3) {  // fused gate|up, the gate's rows first
      std::vector<Matrix> gate_up;
      KV_TRY(gate_up, b.split_rows(p + "ffn_up.weight", c.n_embd, {c.n_ff, c.n_ff}));
      l.w_gate = gate_up[0], l.w_up = gate_up[1];
      KV_TRY(l.w_down, b.matrix(p + "ffn_down.weight", c.n_ff, c.n_embd));
    } else {
      KV_TRY(l.w_gate, b.matrix(p + "ffn_gate.weight", c.n_embd, c.n_ff));
      KV_TRY(l.w_up, b.matrix(p + "ffn_up.weight", c.n_embd, c.n_ff));
      KV_TRY(l.w_down, b.matrix(p + "ffn_down.weight", c.n_ff, c.n_embd));
    }
    KV_TRY(l.post_ffn_norm, b.vector(p + "post_ffw_norm.weight", c.n_embd, c.post_norms));
  }
  return w;
}

}  // namespace kvasir
