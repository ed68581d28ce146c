#include "cli/synth.h"

#include <cmath>
#include <cstring>

#include "core/thread_pool.h"
#include "format/gguf.h"
#include "format/mapped_file.h"
#include "kernels/quant/quant.h"

namespace kvasir::cli {
namespace {

using gguf::Value;
using gguf::ValueType;

// SplitMix64: a fast, well-mixed stream per (seed, tensor, row).
uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Chooses each tensor's type the way llama.cpp's mixes do (output and some attn_v / ffn_down
// layers get more bits); a plain type name puts every matrix in that type.
struct TypePlan {
  DType base;
  DType output;
  DType more_bits;  // attn_v / ffn_down on the layers use_more_bits() picks
  bool mix = false;

  DType for_tensor(const std::string& name, int64_t layer, int64_t n_layers) const {
    if (name == "output.weight") return output;
    if (mix && (name.ends_with("attn_v.weight") || name.ends_with("ffn_down.weight") || name.ends_with("ffn_down_exps.weight"))) {
      const bool more = layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
      if (more) return more_bits;
    }
    return base;
  }
};

Result<TypePlan> plan_types(const std::string& type) {
  if (type == "q4_k_m") return TypePlan{DType::Q4_K, DType::Q6_K, DType::Q6_K, true};
  if (type == "q5_k_m") return TypePlan{DType::Q5_K, DType::Q6_K, DType::Q6_K, true};
  if (type == "q4_k_s") return TypePlan{DType::Q4_K, DType::Q6_K, DType::Q4_K, false};
  auto t = dtype_from_name(type);
  if (!t || !kernels::quant_traits(*t) || !kernels::quant_traits(*t)->quantize_row || !kernels::quant_traits(*t)->vec_dot)
    return Error{"unsupported synth type '" + type + "'"};
  // llama.cpp keeps the output matrix at Q6_K for the 4- and 5-bit types.
  const bool low_bits = *t == DType::Q4_0 || *t == DType::Q4_1 || *t == DType::Q5_0 || *t == DType::Q5_1 ||
                        *t == DType::Q4_K || *t == DType::Q5_K || *t == DType::Q2_K || *t == DType::Q3_K;
  return TypePlan{*t, low_bits ? DType::Q6_K : *t, *t, false};
}

std::vector<uint8_t> random_matrix(DType type, int64_t n_in, int64_t n_out, uint64_t seed, ThreadPool& pool) {
  const auto* tr = kernels::quant_traits(type);
  const size_t rb = row_bytes(type, n_in);
  std::vector<uint8_t> data(rb * size_t(n_out));
  // Uniform weights with std 0.02, like a freshly initialized transformer.
  const float amp = 0.02f * std::sqrt(3.f);
  pool.parallel_for(n_out, 16, [&](int64_t b, int64_t e, int) {
    std::vector<float> row(static_cast<size_t>(n_in));
    for (int64_t r = b; r < e; ++r) {
      uint64_t s = seed * 0x100000001B3ull + uint64_t(r);
      for (auto& x : row) x = amp * (float(splitmix(s) >> 40) / float(1 << 24) * 2.f - 1.f);
      tr->quantize_row(row.data(), data.data() + size_t(r) * rb, n_in);
    }
  });
  return data;
}

std::vector<uint8_t> ones(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n), 1.f);
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A minimal SentencePiece-style vocabulary: <unk> <s> </s>, the 256 byte tokens, then filler
// pieces, so tokenize/detokenize work on a synthetic model.
void generated_vocab(gguf::Writer& w, int64_t n_vocab) {
  std::vector<Value> tokens, scores, types;
  auto add = [&](std::string text, float score, int32_t type) {
    tokens.push_back(Value::of_string(std::move(text)));
    scores.push_back(Value::of_f32(score));
    types.push_back(Value::of_i32(type));
  };
  add("<unk>", 0, 2);
  add("<s>", 0, 3);
  add("</s>", 0, 3);
  for (int b = 0; b < 256 && int64_t(tokens.size()) < n_vocab; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    add(buf, 0, 6);
  }
  for (int64_t i = int64_t(tokens.size()); i < n_vocab; ++i) add("\xe2\x96\x81tok" + std::to_string(i), -float(i), 1);
  w.set("tokenizer.ggml.model", Value::of_string("llama"));
  w.set("tokenizer.ggml.tokens", Value::of_array(ValueType::STRING, std::move(tokens)));
  w.set("tokenizer.ggml.scores", Value::of_array(ValueType::F32, std::move(scores)));
  w.set("tokenizer.ggml.token_type", Value::of_array(ValueType::I32, std::move(types)));
  w.set("tokenizer.ggml.bos_token_id", Value::of_u32(1));
  w.set("tokenizer.ggml.eos_token_id", Value::of_u32(2));
  w.set("tokenizer.ggml.unknown_token_id", Value::of_u32(0));
}

// Copies tokenizer.* keys; returns the vocabulary size.
Result<int64_t> copy_vocab(gguf::Writer& w, const std::string& path) {
  auto file = MappedFile::open(path);
  if (!file) return Error{file.error()};
  auto g = gguf::parse(file->bytes());
  if (!g) return Error{path + ": " + g.error()};
  auto tokens = g->get_array("tokenizer.ggml.tokens", ValueType::STRING);
  if (!tokens) return Error{path + ": " + tokens.error()};
  for (const auto& kv : g->kv)
    if (kv.key.rfind("tokenizer.", 0) == 0) w.set(kv.key, kv.value);
  return int64_t((*tokens)->items.size());
}

}  // namespace

std::vector<std::string> synth_preset_names() {
  return {"tinyllama-1.1b", "llama3-8b", "small", "gemma3-270m", "qwen3-0.6b", "qwen3moe-1.2b", "tiny"};
}

Result<SynthShape> synth_preset(const std::string& name) {
  SynthShape s;
  if (name == "tinyllama-1.1b") {
    s = {.arch = "llama", .n_embd = 2048, .n_layers = 22, .n_heads = 32, .n_kv_heads = 4, .head_dim = 64,
         .n_ff = 5632, .n_vocab = 32000, .n_ctx = 2048};
  } else if (name == "llama3-8b") {  // Llama 3 8B's shape
    s = {.arch = "llama", .n_embd = 4096, .n_layers = 32, .n_heads = 32, .n_kv_heads = 8, .head_dim = 128,
         .n_ff = 14336, .n_vocab = 128256, .n_ctx = 8192, .rope_base = 500000.f};
  } else if (name == "small") {
    s = {.arch = "llama", .n_embd = 768, .n_layers = 12, .n_heads = 12, .n_kv_heads = 12, .head_dim = 64,
         .n_ff = 2048, .n_vocab = 32000, .n_ctx = 2048};
  } else if (name == "gemma3-270m") {
    s = {.arch = "gemma3", .n_embd = 640, .n_layers = 18, .n_heads = 4, .n_kv_heads = 1, .head_dim = 256,
         .n_ff = 2048, .n_vocab = 262144, .n_ctx = 32768, .tied_output = true, .rope_base = 1e6f,
         .sliding_window = 512};
  } else if (name == "qwen3-0.6b") {  // Qwen3-0.6B's shape
    s = {.arch = "qwen3", .n_embd = 1024, .n_layers = 28, .n_heads = 16, .n_kv_heads = 8, .head_dim = 128,
         .n_ff = 3072, .n_vocab = 151936, .n_ctx = 40960, .tied_output = true, .rope_base = 1e6f};
  } else if (name == "qwen3moe-1.2b") {
    // Qwen3-30B-A3B's layer design scaled down: 16 experts of width 768, 4 used per token (about
    // 1.2B parameters, 0.5B read per token, a third of them the tied output head).
    s = {.arch = "qwen3moe", .n_embd = 1024, .n_layers = 24, .n_heads = 16, .n_kv_heads = 4, .head_dim = 128,
         .n_ff = 3072, .n_vocab = 151936, .n_ctx = 40960, .tied_output = true, .rope_base = 1e6f,
         .n_experts = 16, .n_experts_used = 4, .n_ff_exp = 768};
  } else if (name == "tiny") {
    s = {.arch = "llama", .n_embd = 64, .n_layers = 5, .n_heads = 8, .n_kv_heads = 4, .head_dim = 8, .n_ff = 192,
         .n_vocab = 512, .n_ctx = 2048};
  } else {
    std::string names;
    for (const auto& n : synth_preset_names()) names += (names.empty() ? "" : ", ") + n;
    return Error{"unknown preset '" + name + "' (presets: " + names + ")"};
  }
  return s;
}

Status write_synthetic_model(const SynthOptions& o, const std::string& path) {
  auto plan = plan_types(o.type);
  if (!plan) return Error{plan.error()};
  SynthShape s = o.shape;
  gguf::Writer w;
  const std::string a = s.arch;
  if (a != "llama" && a != "qwen2" && a != "qwen3" && a != "qwen3moe" && a != "gemma3")
    return Error{"synth: unsupported architecture '" + a + "'"};
  const bool moe = a == "qwen3moe";
  if (moe && (s.n_experts <= 0 || s.n_experts_used <= 0 || s.n_experts_used > s.n_experts || s.n_ff_exp <= 0))
    return Error{"synth: qwen3moe needs n_experts >= n_experts_used > 0 and n_ff_exp > 0"};
  w.set("general.architecture", Value::of_string(a));
  w.set("general.name", Value::of_string("kvasir-synth-" + a));
  if (!o.vocab_from.empty()) {
    auto n = copy_vocab(w, o.vocab_from);
    if (!n) return Error{n.error()};
    s.n_vocab = *n;
  } else {
    generated_vocab(w, s.n_vocab);
  }
  w.set(a + ".context_length", Value::of_u32(uint32_t(s.n_ctx)));
  w.set(a + ".embedding_length", Value::of_u32(uint32_t(s.n_embd)));
  w.set(a + ".block_count", Value::of_u32(uint32_t(s.n_layers)));
  w.set(a + ".feed_forward_length", Value::of_u32(uint32_t(s.n_ff)));
  w.set(a + ".attention.head_count", Value::of_u32(uint32_t(s.n_heads)));
  w.set(a + ".attention.head_count_kv", Value::of_u32(uint32_t(s.n_kv_heads)));
  w.set(a + ".attention.key_length", Value::of_u32(uint32_t(s.head_dim)));
  w.set(a + ".attention.value_length", Value::of_u32(uint32_t(s.head_dim)));
  w.set(a + ".rope.dimension_count", Value::of_u32(uint32_t(s.head_dim)));
  w.set(a + ".rope.freq_base", Value::of_f32(s.rope_base));
  w.set(a + ".attention.layer_norm_rms_epsilon", Value::of_f32(a == "gemma3" ? 1e-6f : 1e-5f));
  if (s.sliding_window > 0) w.set(a + ".attention.sliding_window", Value::of_u32(uint32_t(s.sliding_window)));
  if (moe) {
    w.set(a + ".expert_count", Value::of_u32(uint32_t(s.n_experts)));
    w.set(a + ".expert_used_count", Value::of_u32(uint32_t(s.n_experts_used)));
    w.set(a + ".expert_feed_forward_length", Value::of_u32(uint32_t(s.n_ff_exp)));
  }

  ThreadPool pool(o.num_threads > 0 ? o.num_threads : ThreadPool::default_threads());
  uint64_t tensor_seed = o.seed * 1000003;
  // n_stack > 1: a 3-D tensor of n_stack matrices (the experts of a MoE layer).
  auto matrix = [&](const std::string& name, int64_t n_in, int64_t n_out, int64_t layer, int64_t n_stack = 1) {
    DType t = plan->for_tensor(name, layer, s.n_layers);
    // Rows that are not a whole number of 256-element super-blocks fall back as llama.cpp does.
    if (n_in % dtype_info(t).block_size != 0) {
      t = t == DType::Q4_K ? DType::Q5_0 : t == DType::Q5_K ? DType::Q5_1 : t == DType::Q6_K ? DType::Q8_0 : DType::Q4_0;
    }
    if (n_stack == 1) return w.add_tensor(name, t, {n_in, n_out}, random_matrix(t, n_in, n_out, ++tensor_seed, pool));
    std::vector<uint8_t> all;
    for (int64_t e = 0; e < n_stack; ++e) {
      const auto one = random_matrix(t, n_in, n_out, ++tensor_seed, pool);
      all.insert(all.end(), one.begin(), one.end());
    }
    w.add_tensor(name, t, {n_in, n_out, n_stack}, std::move(all));
  };
  const int64_t q_dim = s.n_heads * s.head_dim, kv_dim = s.n_kv_heads * s.head_dim;
  matrix("token_embd.weight", s.n_embd, s.n_vocab, 0);
  w.add_tensor("output_norm.weight", DType::F32, {s.n_embd}, ones(s.n_embd));
  if (!s.tied_output) matrix("output.weight", s.n_embd, s.n_vocab, 0);
  for (int64_t il = 0; il < s.n_layers; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    w.add_tensor(p + "attn_norm.weight", DType::F32, {s.n_embd}, ones(s.n_embd));
    matrix(p + "attn_q.weight", s.n_embd, q_dim, il);
    matrix(p + "attn_k.weight", s.n_embd, kv_dim, il);
    matrix(p + "attn_v.weight", s.n_embd, kv_dim, il);
    matrix(p + "attn_output.weight", q_dim, s.n_embd, il);
    if (a == "qwen2") {
      w.add_tensor(p + "attn_q.bias", DType::F32, {q_dim}, std::vector<uint8_t>(size_t(q_dim) * 4, 0));
      w.add_tensor(p + "attn_k.bias", DType::F32, {kv_dim}, std::vector<uint8_t>(size_t(kv_dim) * 4, 0));
      w.add_tensor(p + "attn_v.bias", DType::F32, {kv_dim}, std::vector<uint8_t>(size_t(kv_dim) * 4, 0));
    }
    if (a == "gemma3" || a == "qwen3" || moe) {
      w.add_tensor(p + "attn_q_norm.weight", DType::F32, {s.head_dim}, ones(s.head_dim));
      w.add_tensor(p + "attn_k_norm.weight", DType::F32, {s.head_dim}, ones(s.head_dim));
    }
    if (a == "gemma3") {
      w.add_tensor(p + "post_attention_norm.weight", DType::F32, {s.n_embd}, ones(s.n_embd));
      w.add_tensor(p + "post_ffw_norm.weight", DType::F32, {s.n_embd}, ones(s.n_embd));
    }
    w.add_tensor(p + "ffn_norm.weight", DType::F32, {s.n_embd}, ones(s.n_embd));
    if (moe) {
      // The router stays F32, as llama.cpp's quantizer leaves ffn_gate_inp.
      w.add_tensor(p + "ffn_gate_inp.weight", DType::F32, {s.n_embd, s.n_experts},
                   random_matrix(DType::F32, s.n_embd, s.n_experts, ++tensor_seed, pool));
      matrix(p + "ffn_gate_exps.weight", s.n_embd, s.n_ff_exp, il, s.n_experts);
      matrix(p + "ffn_up_exps.weight", s.n_embd, s.n_ff_exp, il, s.n_experts);
      matrix(p + "ffn_down_exps.weight", s.n_ff_exp, s.n_embd, il, s.n_experts);
      continue;
    }
    matrix(p + "ffn_gate.weight", s.n_embd, s.n_ff, il);
    matrix(p + "ffn_up.weight", s.n_embd, s.n_ff, il);
    matrix(p + "ffn_down.weight", s.n_ff, s.n_embd, il);
  }
  return w.write(path);
}

}  // namespace kvasir::cli
