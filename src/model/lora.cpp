#include "model/lora.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "core/fnv.h"
#include "format/mapped_file.h"
#include "kernels/quant/quant.h"

namespace kvasir {
namespace {

constexpr std::string_view kA = ".lora_a", kB = ".lora_b";

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A 2-D tensor as F32 rows.
Result<std::vector<float>> to_f32(const gguf::TensorInfo& t) {
  const auto* tr = kernels::quant_traits(t.type);
  if (!tr || !tr->dequantize_row) return Error{"tensor '" + t.name + "' has unsupported type " + std::string(dtype_name(t.type))};
  std::vector<float> out(size_t(t.ne[0] * t.ne[1]));
  const size_t rb = row_bytes(t.type, t.ne[0]);
  for (int64_t r = 0; r < t.ne[1]; ++r) tr->dequantize_row(t.data + size_t(r) * rb, out.data() + r * t.ne[0], t.ne[0]);
  return out;
}

// Every matrix view the forward multiplies, with the tensor it lies in.
std::vector<const Matrix*> matrices_of(const Weights& w) {
  std::vector<const Matrix*> out;
  for (const LayerWeights& l : w.layers)
    for (const Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      if (m->data) out.push_back(m);
  if (w.output.data && w.output.data != w.token_embd.data) out.push_back(&w.output);
  return out;
}

uint64_t fnv(uint64_t h, const void* p, size_t n) { return fnv1a_words(h, p, n); }

// splitmix64: the same stream on every machine.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform() { return float(next() >> 40) * (2.f / float(1 << 24)) - 1.f; }  // [-1, 1)
};

}  // namespace

size_t LoraAdapter::bytes() const {
  size_t n = 0;
  for (const auto& [_, f] : by_matrix_) n += (f.a.size() + f.bt.size()) * sizeof(float);
  return n;
}

Result<std::shared_ptr<const LoraAdapter>> LoraAdapter::load(const std::string& path, const Model& model, float scale) {
  auto fail = [&](const std::string& what) { return Error{path + ": " + what, ErrorCode::invalid_argument}; };
  if (!std::isfinite(scale)) return fail("the scale is not a finite number");
  auto mapped = MappedFile::open(path);
  if (!mapped) return Error{mapped.error()};
  auto parsed = gguf::parse(mapped->bytes());
  if (!parsed) return fail(parsed.error());
  const gguf::File& f = *parsed;
  auto type = f.get_string("general.type");
  if (!type || *type != "adapter") return fail("not an adapter (general.type is not 'adapter')");
  auto kind = f.get_string("adapter.type");
  if (!kind || *kind != "lora") return fail("not a LoRA adapter (adapter.type is not 'lora')");
  auto arch = f.get_string("general.architecture");
  if (!arch) return fail(arch.error());
  if (*arch != model.config().arch_name)
    return fail("an adapter for '" + *arch + "', the model is '" + model.config().arch_name + "'");
  if (f.find("adapter.alora.invocation_tokens")) return fail("activated LoRA (aLoRA) adapters are not supported");

  auto a = std::shared_ptr<LoraAdapter>(new LoraAdapter());
  a->path_ = path;
  if (f.find("adapter.lora.alpha")) {
    auto alpha = f.get_float("adapter.lora.alpha");
    if (!alpha || !std::isfinite(*alpha)) return fail("adapter.lora.alpha is not a number");
    a->alpha_ = float(*alpha);
  }
  const auto views = matrices_of(model.weights());
  const gguf::File& base = model.gguf();
  uint64_t h = fnv(kFnvOffset, &scale, sizeof scale);
  for (const gguf::TensorInfo& ta : f.tensors) {
    if (ends_with(ta.name, kB)) {
      if (!f.tensor(ta.name.substr(0, ta.name.size() - kB.size()) + std::string(kA)))
        return fail("tensor '" + ta.name + "' has no matching " + std::string(kA));
      continue;
    }
    if (!ends_with(ta.name, kA)) return fail("tensor '" + ta.name + "' is neither a lora_a nor a lora_b");
    const std::string name = ta.name.substr(0, ta.name.size() - kA.size());
    const gguf::TensorInfo* tb = f.tensor(name + std::string(kB));
    if (!tb) return fail("tensor '" + ta.name + "' has no matching " + std::string(kB));
    const gguf::TensorInfo* tw = base.tensor(name);
    if (!tw) return fail("tensor '" + ta.name + "' adapts '" + name + "', which the model does not have");
    if (name == "token_embd.weight") return fail("LoRA on the token embeddings is not supported");
    if (tw->n_dims != 2) return fail("LoRA on '" + name + "' (not a 2-D matrix: experts) is not supported");
    if (ta.n_dims != 2 || tb->n_dims != 2) return fail("tensor '" + ta.name + "' or its lora_b is not 2-D");
    const int64_t n_in = tw->ne[0], n_out = tw->ne[1], rank = ta.ne[1];
    if (ta.ne[0] != n_in || tb->ne[1] != n_out)
      return fail("tensor '" + ta.name + "' does not fit '" + name + "' [" + std::to_string(n_in) + ", " +
                  std::to_string(n_out) + "]");
    if (tb->ne[0] != rank || rank < 1 || rank > n_in) return fail("tensor '" + ta.name + "': lora_a and lora_b disagree on the rank");
    auto ra = to_f32(ta), rb_ = to_f32(*tb);
    if (!ra) return fail(ra.error());
    if (!rb_) return fail(rb_.error());
    std::vector<float> fa = std::move(*ra), fb = std::move(*rb_);
    for (float v : fa) if (!std::isfinite(v)) return fail("tensor '" + ta.name + "' holds a non-finite value");
    for (float v : fb) if (!std::isfinite(v)) return fail("tensor '" + tb->name + "' holds a non-finite value");
    h = fnv(fnv(fnv(h, name.data(), name.size()), fa.data(), fa.size() * 4), fb.data(), fb.size() * 4);
    const float s = scale * (a->alpha_ != 0 ? a->alpha_ / float(rank) : 1.f);
    // The matrices the forward multiplies that lie in this tensor (a fused tensor has several).
    const size_t rb = row_bytes(tw->type, n_in);
    int found = 0;
    for (const Matrix* m : views) {
      const auto* d = static_cast<const uint8_t*>(m->data);
      if (d < tw->data || d >= tw->data + tw->nbytes) continue;
      const int64_t first = int64_t(size_t(d - tw->data) / rb);
      LoraFactors lf{.rank = rank, .n_in = n_in, .n_out = m->n_out, .row0 = first, .scale = s, .a = fa, .bt = {}};
      lf.bt.resize(size_t(rank * m->n_out));
      for (int64_t o = 0; o < m->n_out; ++o)
        for (int64_t k = 0; k < rank; ++k) lf.bt[size_t(k * m->n_out + o)] = fb[size_t((first + o) * rank + k)];
      auto [it, fresh] = a->by_matrix_.emplace(m->data, std::move(lf));
      if (!fresh) return fail("tensor '" + name + "' is adapted twice");
      a->entries_.emplace_back(name, &it->second);
      a->max_rank_ = std::max(a->max_rank_, rank);
      ++found;
    }
    if (!found) return fail("LoRA on '" + name + "' is not supported (the forward does not multiply by it)");
  }
  if (a->by_matrix_.empty()) return fail("the adapter holds no lora_a/lora_b pairs");
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  a->identity_ = std::string("lora@") + hex;
  return std::shared_ptr<const LoraAdapter>(std::move(a));
}

Status write_merged_lora(const Model& model, const LoraAdapter& adapter, const std::string& path,
                         std::optional<DType> out_type) {
  const gguf::File& base = model.gguf();
  gguf::Writer w;
  for (const gguf::KeyValue& kv : base.kv) w.set(kv.key, kv.value);
  std::vector<const gguf::TensorInfo*> order;
  std::vector<DType> types;
  for (const gguf::TensorInfo& t : base.tensors) {
    bool adapted = false;
    for (const auto& [name, f] : adapter.entries()) adapted |= name == t.name;
    DType type = t.type;
    if (adapted) {
      type = out_type.value_or(t.type);
      const auto* tr = kernels::quant_traits(type);
      if (!tr || !tr->quantize_row || t.ne[0] % dtype_info(type).block_size != 0)
        return Error{"cannot write '" + t.name + "' as " + std::string(dtype_name(type)), ErrorCode::invalid_argument};
    }
    std::vector<int64_t> shape(t.ne, t.ne + std::max(1, t.n_dims));
    w.add_tensor_header(t.name, type, shape);
    order.push_back(&t);
    types.push_back(type);
  }
  return w.write_streaming(path, [&](size_t i) -> Result<std::vector<uint8_t>> {
    const gguf::TensorInfo& t = *order[i];
    std::vector<const LoraFactors*> parts;
    for (const auto& [name, f] : adapter.entries())
      if (name == t.name) parts.push_back(f);
    if (parts.empty()) return std::vector<uint8_t>(t.data, t.data + t.nbytes);
    const int64_t n_in = t.ne[0], rows = t.ne[1];
    std::vector<float> wf(size_t(n_in * rows));
    const auto* src = kernels::quant_traits(t.type);
    const size_t in_rb = row_bytes(t.type, n_in);
    for (int64_t r = 0; r < rows; ++r) src->dequantize_row(t.data + size_t(r) * in_rb, wf.data() + r * n_in, n_in);
    for (const LoraFactors* f : parts)
      for (int64_t o = 0; o < f->n_out; ++o) {
        float* row = wf.data() + (f->row0 + o) * n_in;
        for (int64_t k = 0; k < f->rank; ++k) {
          const float c = f->scale * f->bt[size_t(k * f->n_out + o)];
          const float* a = f->a.data() + k * n_in;
          for (int64_t j = 0; j < n_in; ++j) row[j] += c * a[j];
        }
      }
    const auto* dst = kernels::quant_traits(types[i]);
    const size_t out_rb = row_bytes(types[i], n_in);
    std::vector<uint8_t> out(out_rb * size_t(rows));
    for (int64_t r = 0; r < rows; ++r) dst->quantize_row(wf.data() + r * n_in, out.data() + size_t(r) * out_rb, n_in);
    return out;
  }, base.alignment);
}

Status write_random_lora(const Model& model, const std::string& path, int64_t rank, float alpha, uint64_t seed) {
  if (rank < 1) return Error{"the rank must be at least 1", ErrorCode::invalid_argument};
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::of_string(model.config().arch_name));
  w.set("general.type", gguf::Value::of_string("adapter"));
  w.set("adapter.type", gguf::Value::of_string("lora"));
  w.set("adapter.lora.alpha", gguf::Value::of_f32(alpha));
  Rng rng{seed};
  static constexpr std::string_view kTargets[] = {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                                                 "attn_qkv.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"};
  auto bytes_of = [](const std::vector<float>& v) {
    std::vector<uint8_t> out(v.size() * sizeof(float));
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  };
  for (const gguf::TensorInfo& t : model.gguf().tensors) {
    if (t.n_dims != 2 || t.name.rfind("blk.", 0) != 0) continue;
    bool target = false;
    for (auto s : kTargets) target |= ends_with(t.name, s);
    if (!target) continue;
    const int64_t n_in = t.ne[0], n_out = t.ne[1], r = std::min(rank, n_in);
    // A x has unit variance per rank on unit-variance inputs; B then moves each output by about
    // 0.15 of a unit-variance value at alpha = rank.
    std::vector<float> a(size_t(r * n_in)), b(size_t(n_out * r));
    const float sa = std::sqrt(3.f / float(n_in)), sb = 0.15f * std::sqrt(3.f / float(r));
    for (float& v : a) v = sa * rng.uniform();
    for (float& v : b) v = sb * rng.uniform();
    w.add_tensor(t.name + std::string(kA), DType::F32, {n_in, r}, bytes_of(a));
    w.add_tensor(t.name + std::string(kB), DType::F32, {r, n_out}, bytes_of(b));
  }
  return w.write(path);
}

}  // namespace kvasir
