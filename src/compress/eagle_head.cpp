#include "compress/eagle_head.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "compress/chunk_pass.h"
#include "compress/grad.h"
#include "format/mapped_file.h"
#include "kernels/ops.h"
#include "kernels/quant/quant.h"

namespace kvasir::compress {
namespace {

constexpr const char* kArch = "kvasir-eagle-head";

std::vector<uint8_t> bytes_of(std::span<const float> v) {
  std::vector<uint8_t> b(v.size() * sizeof(float));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

struct Named {
  const char* name;
  std::vector<float> EagleHeadParams::*field;
};
constexpr Named kTensors[] = {{"head.fc.weight", &EagleHeadParams::fc},
                              {"head.ffn_norm.weight", &EagleHeadParams::ffn_norm},
                              {"head.ffn_gate.weight", &EagleHeadParams::gate},
                              {"head.ffn_up.weight", &EagleHeadParams::up},
                              {"head.ffn_down.weight", &EagleHeadParams::down},
                              {"head.out_norm.weight", &EagleHeadParams::out_norm}};

}  // namespace

std::vector<std::span<float>> EagleHeadParams::all() {
  std::vector<std::span<float>> out;
  for (const Named& t : kTensors) out.emplace_back(this->*t.field);
  return out;
}

std::vector<std::span<const float>> EagleHeadParams::all() const {
  std::vector<std::span<const float>> out;
  for (const Named& t : kTensors) out.emplace_back(this->*t.field);
  return out;
}

EagleHeadParams zeros_like(const EagleHeadParams& p) {
  EagleHeadParams z;
  for (const Named& t : kTensors) (z.*t.field).assign((p.*t.field).size(), 0.f);
  return z;
}

EagleHead::EagleHead(const Model& target, EagleHeadShape shape) : target_(&target), shape_(std::move(shape)) {
  const ModelConfig& c = target.config();
  const int64_t d = shape_.n_embd, f = shape_.n_ff;
  p_.fc.assign(size_t(d * 2 * d), 0.f);
  p_.ffn_norm.assign(size_t(d), 1.f);
  p_.gate.assign(size_t(f * d), 0.f);
  p_.up.assign(size_t(f * d), 0.f);
  p_.down.assign(size_t(d * f), 0.f);
  p_.out_norm.assign(size_t(d), 1.f);
  eps_ = c.norm_eps;
  softcap_ = c.final_logit_softcap;
  gelu_ = c.ffn_act == FfnAct::GeluTanh;
  // The target's output rows for the head's tokens, in F32.
  const Matrix& out = target.weights().output;
  const auto* tr = kernels::quant_traits(out.type);
  const size_t rb = row_bytes(out.type, out.n_in);
  w_n_.resize(shape_.tokens.size() * size_t(d));
  for (size_t i = 0; i < shape_.tokens.size(); ++i)
    tr->dequantize_row(static_cast<const uint8_t*>(out.data) + size_t(shape_.tokens[i]) * rb, w_n_.data() + i * size_t(d), d);
  w_n_t_.resize(w_n_.size());
  const size_t N = shape_.tokens.size();
  for (size_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < d; ++j) w_n_t_[size_t(j) * N + i] = w_n_[i * size_t(d) + size_t(j)];
}

Result<EagleHead> EagleHead::init(const Model& target, int64_t n_ff, std::vector<int32_t> tokens, uint64_t seed) {
  const ModelConfig& c = target.config();
  if (n_ff < 1 || n_ff > (1 << 16)) return Error{"the head's FFN width must be in [1, 65536]", ErrorCode::invalid_argument};
  if (tokens.empty() || !std::is_sorted(tokens.begin(), tokens.end()) || tokens.front() < 0 || tokens.back() >= c.n_vocab)
    return Error{"the head's tokens must be ascending ids of the target's vocabulary", ErrorCode::invalid_argument};
  EagleHead h(target, EagleHeadShape{c.n_embd, n_ff, std::move(tokens)});
  const int64_t d = c.n_embd;
  for (int64_t i = 0; i < d; ++i) h.p_.fc[size_t(i * 2 * d + i)] = 1.f;  // a = h_t
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> in_dist(0.f, 1.f / std::sqrt(float(d))), out_dist(0.f, 1e-3f / std::sqrt(float(n_ff)));
  for (auto* w : {&h.p_.gate, &h.p_.up}) for (float& v : *w) v = in_dist(rng);
  for (float& v : h.p_.down) v = out_dist(rng);  // near zero: ĥ starts at h_t
  return h;
}

Status EagleHead::save(const std::string& path, const std::vector<std::pair<std::string, std::string>>& info) const {
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::of_string(kArch));
  w.set("eagle.n_embd", gguf::Value::of_u32(uint32_t(shape_.n_embd)));
  w.set("eagle.n_ff", gguf::Value::of_u32(uint32_t(shape_.n_ff)));
  w.set("eagle.target_identity", gguf::Value::of_string(target_->identity()));
  w.set("eagle.target_n_vocab", gguf::Value::of_u32(uint32_t(target_->config().n_vocab)));
  std::vector<gguf::Value> ids;
  for (int32_t t : shape_.tokens) ids.push_back(gguf::Value::of_u32(uint32_t(t)));
  w.set("eagle.token_ids", gguf::Value::of_array(gguf::ValueType::U32, std::move(ids)));
  for (const auto& [k, v] : info) w.set("eagle.train." + k, gguf::Value::of_string(v));
  const int64_t d = shape_.n_embd, f = shape_.n_ff;
  const std::vector<int64_t> shapes[] = {{2 * d, d}, {d}, {d, f}, {d, f}, {f, d}, {d}};
  for (size_t i = 0; i < std::size(kTensors); ++i)
    w.add_tensor(kTensors[i].name, DType::F32, shapes[i], bytes_of(p_.*kTensors[i].field));
  return w.write(path);
}

Result<EagleHead> EagleHead::load(const std::string& path, const Model& target) {
  auto file = MappedFile::open(path);
  if (!file) return Error{file.error()};
  auto g = gguf::parse(file->bytes());
  if (!g) return Error{path + ": " + g.error()};
  auto arch = g->get_string("general.architecture");
  if (!arch || *arch != kArch) return Error{path + " is not a kvasir EAGLE head (general.architecture)", ErrorCode::invalid_argument};
  const ModelConfig& c = target.config();
  auto n_embd = g->get_int("eagle.n_embd"), n_ff = g->get_int("eagle.n_ff"), n_vocab = g->get_int("eagle.target_n_vocab");
  auto identity = g->get_string("eagle.target_identity");
  auto ids = g->get_array("eagle.token_ids", gguf::ValueType::U32);
  if (!n_embd || !n_ff || !n_vocab || !identity || !ids) return Error{path + ": missing eagle.* metadata", ErrorCode::invalid_argument};
  if (*n_embd != c.n_embd || *n_vocab != c.n_vocab)
    return Error{path + " drafts for a model of width " + std::to_string(*n_embd) + " and " + std::to_string(*n_vocab) +
                     " tokens, not this one (" + std::to_string(c.n_embd) + ", " + std::to_string(c.n_vocab) + ")",
                 ErrorCode::invalid_argument};
  if (*identity != target.identity())
    return Error{path + " was trained for other weights than " + target.path() + " (eagle.target_identity)",
                 ErrorCode::invalid_argument};
  if (*n_ff < 1 || *n_ff > (1 << 16)) return Error{path + ": eagle.n_ff out of range", ErrorCode::invalid_argument};
  std::vector<int32_t> tokens;
  for (const auto& v : (*ids)->items) tokens.push_back(int32_t(v.u));
  if (tokens.empty() || !std::is_sorted(tokens.begin(), tokens.end()) || tokens.back() >= c.n_vocab ||
      std::adjacent_find(tokens.begin(), tokens.end()) != tokens.end())
    return Error{path + ": eagle.token_ids must be distinct ascending ids below " + std::to_string(c.n_vocab),
                 ErrorCode::invalid_argument};
  EagleHead h(target, EagleHeadShape{c.n_embd, *n_ff, std::move(tokens)});
  for (const Named& t : kTensors) {
    const gguf::TensorInfo* ti = g->tensor(t.name);
    std::vector<float>& dst = h.p_.*t.field;
    if (!ti || ti->type != DType::F32 || ti->nbytes != dst.size() * sizeof(float))
      return Error{path + ": tensor '" + std::string(t.name) + "' is missing or has the wrong type or size",
                   ErrorCode::invalid_argument};
    std::memcpy(dst.data(), ti->data, ti->nbytes);
    for (float v : dst)
      if (!std::isfinite(v)) return Error{path + ": tensor '" + std::string(t.name) + "' holds a non-finite value"};
  }
  return h;
}

void EagleHead::embed(int32_t token, float* out) const { embed_token(*target_, token, out); }

void EagleHead::forward(const float* h, const float* e, int64_t B, float* z, ThreadPool* pool, Tape& t) {
  const int64_t d = shape_.n_embd, f = shape_.n_ff, N = n_tokens();
  t.B = B;
  t.x.resize(size_t(B * 2 * d));
  for (int64_t b = 0; b < B; ++b) {
    std::copy_n(h + b * d, d, t.x.data() + b * 2 * d);
    std::copy_n(e + b * d, d, t.x.data() + b * 2 * d + d);
  }
  for (auto* v : {&t.a, &t.n, &t.hhat, &t.o}) v->resize(size_t(B * d));
  for (auto* v : {&t.g, &t.u, &t.m}) v->resize(size_t(B * f));
  t.zpre.resize(size_t(B * N));
  grad::linear(t.x.data(), p_.fc.data(), B, 2 * d, d, t.a.data(), pool);
  for (int64_t b = 0; b < B; ++b) kernels::rms_norm(t.a.data() + b * d, p_.ffn_norm.data(), d, eps_, t.n.data() + b * d);
  grad::linear(t.n.data(), p_.gate.data(), B, d, f, t.g.data(), pool);
  grad::linear(t.n.data(), p_.up.data(), B, d, f, t.u.data(), pool);
  (gelu_ ? kernels::gelu_tanh_mul : kernels::silu_mul)(t.g.data(), t.u.data(), B * f, t.m.data());
  grad::linear(t.m.data(), p_.down.data(), B, f, d, t.hhat.data(), pool);
  for (int64_t i = 0; i < B * d; ++i) t.hhat[size_t(i)] += t.a[size_t(i)];
  for (int64_t b = 0; b < B; ++b) kernels::rms_norm(t.hhat.data() + b * d, p_.out_norm.data(), d, eps_, t.o.data() + b * d);
  grad::linear(t.o.data(), w_n_.data(), B, d, N, t.zpre.data(), pool);
  for (int64_t i = 0; i < B * N; ++i) z[i] = softcap_ > 0 ? softcap_ * std::tanh(t.zpre[size_t(i)] / softcap_) : t.zpre[size_t(i)];
}

void EagleHead::backward(const float* dz, EagleHeadParams& gr, ThreadPool* pool, const Tape& t, const float* d_state,
                         float* d_h) {
  const int64_t d = shape_.n_embd, f = shape_.n_ff, N = n_tokens(), B = t.B;
  std::vector<float> dzpre(size_t(B * N));
  for (int64_t i = 0; i < B * N; ++i) {
    const float th = softcap_ > 0 ? std::tanh(t.zpre[size_t(i)] / softcap_) : 0.f;
    dzpre[size_t(i)] = dz[i] * (1.f - th * th);
  }
  std::vector<float> d_o(size_t(B * d)), d_hhat(size_t(B * d)), d_m(size_t(B * f)), d_g(size_t(B * f)), d_u(size_t(B * f));
  std::vector<float> d_n(size_t(B * d)), d_n2(size_t(B * d)), d_a(size_t(B * d));
  grad::linear_backward(t.o.data(), w_n_.data(), dzpre.data(), B, d, N, d_o.data(), nullptr, pool, w_n_t_.data());  // frozen
  if (d_state)
    for (int64_t i = 0; i < B * d; ++i) d_o[size_t(i)] += d_state[i];
  for (int64_t b = 0; b < B; ++b)
    grad::rms_norm_backward(t.hhat.data() + b * d, p_.out_norm.data(), d_o.data() + b * d, d, eps_, d_hhat.data() + b * d,
                            gr.out_norm.data());
  grad::linear_backward(t.m.data(), p_.down.data(), d_hhat.data(), B, f, d, d_m.data(), gr.down.data(), pool);
  (gelu_ ? grad::gelu_tanh_mul_backward : grad::silu_mul_backward)(t.g.data(), t.u.data(), d_m.data(), B * f, d_g.data(),
                                                                   d_u.data());
  grad::linear_backward(t.n.data(), p_.gate.data(), d_g.data(), B, d, f, d_n.data(), gr.gate.data(), pool);
  grad::linear_backward(t.n.data(), p_.up.data(), d_u.data(), B, d, f, d_n2.data(), gr.up.data(), pool);
  for (int64_t i = 0; i < B * d; ++i) d_n[size_t(i)] += d_n2[size_t(i)];
  for (int64_t b = 0; b < B; ++b)
    grad::rms_norm_backward(t.a.data() + b * d, p_.ffn_norm.data(), d_n.data() + b * d, d, eps_, d_a.data() + b * d,
                            gr.ffn_norm.data());
  for (int64_t i = 0; i < B * d; ++i) d_a[size_t(i)] += d_hhat[size_t(i)];  // the residual
  std::vector<float> d_x(d_h ? size_t(B * 2 * d) : 0);
  grad::linear_backward(t.x.data(), p_.fc.data(), d_a.data(), B, 2 * d, d, d_h ? d_x.data() : nullptr, gr.fc.data(), pool);
  if (d_h)
    for (int64_t b = 0; b < B; ++b) std::copy_n(d_x.data() + b * 2 * d, d, d_h + b * d);  // the state half of [h; e]
}

}  // namespace kvasir::compress
