#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>

namespace kvasir {
namespace {

struct ArchName {
  const char* name;
  Arch arch;
};
constexpr ArchName kArchs[] = {{"llama", Arch::Llama}, {"qwen2", Arch::Qwen2},   {"qwen3", Arch::Qwen3},
                               {"qwen3moe", Arch::Qwen3Moe}, {"gemma2", Arch::Gemma2}, {"gemma3", Arch::Gemma3},
                               {"phi3", Arch::Phi3}};

std::string supported_list() {
  std::string s;
  for (const auto& a : kArchs) s += (s.empty() ? "" : ", ") + std::string(a.name);
  return s;
}

// Marks every n-th layer global and the others sliding-window (llama.cpp's swa pattern: layer il
// slides when il % n < n - 1).
void set_swa_pattern(ModelConfig& c, int64_t n) {
  for (int64_t il = 0; il < c.n_layers; ++il) c.layer_is_swa[size_t(il)] = il % n < n - 1;
}

// Reads `<arch>.<suffix>` as an integer, with a default when absent.
struct Meta {
  const gguf::File& f;
  std::string arch;

  Result<int64_t> get_int(const std::string& suffix) const { return f.get_int(arch + "." + suffix); }
  int64_t int_or(const std::string& suffix, int64_t def) const {
    auto r = get_int(suffix);
    return r ? *r : def;
  }
  float float_or(const std::string& suffix, float def) const {
    auto r = f.get_float(arch + "." + suffix);
    return r ? float(*r) : def;
  }
  bool has(const std::string& suffix) const { return f.find(arch + "." + suffix) != nullptr; }
};

Status check_positive(const char* what, int64_t v, int64_t max) {
  if (v <= 0 || v > max) return Error{std::string("model config: ") + what + " = " + std::to_string(v) + " is out of range"};
  return {};
}

// A float hyperparameter read from the file: finite and within [lo, hi] (lo excluded when
// `lo_open`), else an error naming its GGUF key. A NaN epsilon loads and emits only <unk>.
Status check_float(const std::string& key, float v, float lo, float hi, bool lo_open) {
  const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi;
  if (ok) return {};
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", double(v));
  return Error{"model config: " + key + " = " + buf + " is out of range (must be finite, " + (lo_open ? "> " : ">= ") +
               std::to_string(lo) + " and <= " + std::to_string(hi) + ")"};
}

// Every float the forward pass uses, checked once.
Status check_floats(const ModelConfig& c) {
  const std::string a = c.arch_name + ".";
  const struct {
    std::string key;
    float v, lo, hi;
    bool lo_open;
  } checks[] = {
      {a + "attention.layer_norm_rms_epsilon", c.norm_eps, 0.f, 1.f, true},
      {a + "rope.freq_base", c.rope_base, 0.f, 1e12f, true},
      {a + "rope.freq_base_swa", c.rope_base_swa, 0.f, 1e12f, true},
      {a + "rope.scaling.factor", c.rope_freq_scale, 0.f, 1e6f, true},
      {a + "rope.scaling.attn_factor", c.rope_mscale, 0.f, 1e6f, true},
      {a + "attn_logit_softcapping", c.attn_softcap, 0.f, 1e6f, false},
      {a + "final_logit_softcapping", c.final_logit_softcap, 0.f, 1e6f, false},
      {a + "attention.scale", c.attn_scale, 0.f, 1e6f, true},
  };
  for (const auto& k : checks)
    if (auto st = check_float(k.key, k.v, k.lo, k.hi, k.lo_open); !st) return st;
  return {};
}

}  // namespace

Result<ModelConfig> config_from_gguf(const gguf::File& file) {
  auto arch_name = file.get_string("general.architecture");
  if (!arch_name) return Error{arch_name.error()};
  ModelConfig c;
  c.arch_name = *arch_name;
  const auto* known = std::find_if(std::begin(kArchs), std::end(kArchs), [&](const ArchName& a) { return c.arch_name == a.name; });
  if (known == std::end(kArchs))
    return Error{"unsupported architecture '" + c.arch_name + "' (supported: " + supported_list() + ")"};
  c.arch = known->arch;

  const Meta m{file, c.arch_name};
  for (const char* key : {"embedding_length", "block_count", "attention.head_count"})
    if (auto r = m.get_int(key); !r) return Error{r.error()};
  c.n_embd = *m.get_int("embedding_length");
  c.n_layers = *m.get_int("block_count");
  c.n_heads = *m.get_int("attention.head_count");
  if (c.arch == Arch::Qwen3Moe) {
    for (const char* key : {"expert_count", "expert_used_count", "expert_feed_forward_length"})
      if (auto r = m.get_int(key); !r) return Error{r.error()};
    c.n_experts = *m.get_int("expert_count");
    c.n_experts_used = *m.get_int("expert_used_count");
    c.n_ff_exp = *m.get_int("expert_feed_forward_length");
    if (auto s = check_positive("expert_count", c.n_experts, 1 << 12); !s) return Error{s.error()};
    if (auto s = check_positive("expert_used_count", c.n_experts_used, c.n_experts); !s) return Error{s.error()};
    if (auto s = check_positive("expert_feed_forward_length", c.n_ff_exp, 1 << 24); !s) return Error{s.error()};
    c.n_ff = m.int_or("feed_forward_length", c.n_ff_exp);  // unused by the layers; kept for display
  } else {
    auto ff = m.get_int("feed_forward_length");
    if (!ff) return Error{ff.error()};
    c.n_ff = *ff;
  }
  c.n_kv_heads = m.int_or("attention.head_count_kv", c.n_heads);
  c.head_dim = m.int_or("attention.key_length", c.n_heads > 0 ? c.n_embd / c.n_heads : 0);
  c.n_ctx_train = m.int_or("context_length", 2048);
  c.norm_eps = m.float_or("attention.layer_norm_rms_epsilon", 1e-5f);
  if (m.has("pooling_type")) c.pooling_type = int32_t(std::clamp<int64_t>(m.int_or("pooling_type", -1), -1, 4));
  c.rope_base = m.float_or("rope.freq_base", 10000.f);
  c.rope_dims = m.int_or("rope.dimension_count", c.head_dim);
  if (auto* tokens = file.find("tokenizer.ggml.tokens"); tokens && tokens->type == gguf::ValueType::ARRAY)
    c.n_vocab = int64_t(tokens->items.size());
  c.n_vocab = m.int_or("vocab_size", c.n_vocab);
  if (m.has("rope.scaling.factor")) {
    const float factor = m.float_or("rope.scaling.factor", 1.f);
    auto type = file.get_string(c.arch_name + ".rope.scaling.type");
    if (!(std::isfinite(factor) && factor > 0))
      return Error{"model config: " + c.arch_name + ".rope.scaling.factor must be finite and positive"};
    if (!type || *type == "linear") c.rope_freq_scale = 1.f / factor;
  }

  if (auto s = check_positive("embedding_length", c.n_embd, 1 << 20); !s) return Error{s.error()};
  if (auto s = check_positive("block_count", c.n_layers, 4096); !s) return Error{s.error()};
  if (auto s = check_positive("head_count", c.n_heads, 4096); !s) return Error{s.error()};
  if (auto s = check_positive("head_count_kv", c.n_kv_heads, c.n_heads); !s) return Error{s.error()};
  if (auto s = check_positive("key_length", c.head_dim, 1 << 16); !s) return Error{s.error()};
  if (auto s = check_positive("feed_forward_length", c.n_ff, 1 << 24); !s) return Error{s.error()};
  if (auto s = check_positive("vocab_size", c.n_vocab, 1 << 24); !s) return Error{s.error()};
  if (c.n_heads % c.n_kv_heads != 0) return Error{"model config: head_count is not a multiple of head_count_kv"};
  if (c.rope_dims <= 0 || c.rope_dims > c.head_dim || c.rope_dims % 2) return Error{"model config: bad rope.dimension_count"};

  c.layer_is_swa.assign(size_t(c.n_layers), false);
  c.attn_scale = 1.f / std::sqrt(float(c.head_dim));
  switch (c.arch) {
    case Arch::Llama:
      break;
    case Arch::Qwen2:
      c.qkv_bias = true;
      c.rope_mode = kernels::RopeMode::Neox;
      break;
    case Arch::Qwen3:
    case Arch::Qwen3Moe:
      c.rope_mode = kernels::RopeMode::Neox;
      c.qk_norm = true;
      break;
    case Arch::Phi3:
      // (llama.cpp reads phi3.attention.sliding_window but applies no window: neither do we.)
      c.rope_mode = kernels::RopeMode::Neox;
      c.rope_mscale = m.float_or("rope.scaling.attn_factor", 1.f);
      // LongRoPE: the short factors hold up to the original context, the long ones beyond it.
      // Only the short ones are used, so the context is capped where they are valid.
      if (file.tensor("rope_factors_long.weight"))
        c.n_ctx_train = std::min(c.n_ctx_train, m.int_or("rope.scaling.original_context_length", c.n_ctx_train));
      break;
    case Arch::Gemma2:
      c.rope_mode = kernels::RopeMode::Neox;
      c.post_norms = true;
      c.ffn_act = FfnAct::GeluTanh;
      c.embed_scale = std::sqrt(float(c.n_embd));
      c.sliding_window = m.int_or("attention.sliding_window", 0);
      c.rope_base_swa = c.rope_base;
      c.attn_softcap = m.float_or("attn_logit_softcapping", 0.f);
      c.final_logit_softcap = m.float_or("final_logit_softcapping", 0.f);
      // Gemma 2 alternates: even layers slide, odd layers are global.
      if (c.sliding_window > 0) set_swa_pattern(c, 2);
      // llama.cpp scales queries by 1/sqrt(n_embd / n_heads) for the 27B (46 layers) only.
      if (c.n_layers == 46) c.attn_scale = 1.f / std::sqrt(float(c.n_embd) / float(c.n_heads));
      break;
    case Arch::Gemma3:
      c.rope_mode = kernels::RopeMode::Neox;
      c.qk_norm = true;
      c.post_norms = true;
      c.ffn_act = FfnAct::GeluTanh;
      c.embed_scale = std::sqrt(float(c.n_embd));
      c.sliding_window = m.int_or("attention.sliding_window", 0);
      c.rope_base_swa = m.float_or("rope.freq_base_swa", 10000.f);
      c.final_logit_softcap = m.float_or("final_logit_softcapping", 0.f);
      // Gemma 3 interleaves five sliding-window layers with one global layer.
      if (c.sliding_window > 0) set_swa_pattern(c, 6);
      break;
  }
  // A per-layer pattern in the file overrides the family's (a model whose layers were removed by
  // `kvasir prune` keeps each remaining layer's own kind): true / nonzero slides.
  if (const gguf::Value* p = file.find(m.arch + ".attention.sliding_window_pattern");
      p && p->type == gguf::ValueType::ARRAY && c.sliding_window > 0) {
    if (int64_t(p->items.size()) != c.n_layers)
      return Error{"model config: " + m.arch + ".attention.sliding_window_pattern has " +
                   std::to_string(p->items.size()) + " entries for " + std::to_string(c.n_layers) + " layers"};
    for (int64_t il = 0; il < c.n_layers; ++il) c.layer_is_swa[size_t(il)] = p->items[size_t(il)].u != 0 || p->items[size_t(il)].i != 0;
  }
  if (m.has("attention.scale")) c.attn_scale = m.float_or("attention.scale", c.attn_scale);
  if (auto st = check_floats(c); !st) return Error{st.error()};
  return c;
}

}  // namespace kvasir
