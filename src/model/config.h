// Model hyperparameters read from GGUF metadata. An architecture is this config plus a few
// switches; the forward pass is shared.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "format/gguf.h"
#include "kernels/ops.h"

namespace kvasir {

enum class Arch { Llama, Qwen2, Qwen3, Qwen3Moe, Gemma2, Gemma3, Phi3 };
enum class FfnAct { Silu, GeluTanh };

struct ModelConfig {
  Arch arch = Arch::Llama;
  std::string arch_name;
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;   // key/value length per head
  int64_t n_ff = 0;
  int64_t n_ctx_train = 0;
  float norm_eps = 1e-5f;
  // <arch>.pooling_type as llama.cpp numbers it (0 none, 1 mean, 2 cls, 3 last, 4 rank); -1: the
  // file declares none (a generative model).
  int32_t pooling_type = -1;

  kernels::RopeMode rope_mode = kernels::RopeMode::Normal;
  int64_t rope_dims = 0;
  float rope_base = 10000.f;
  float rope_base_swa = 10000.f;  // sliding-window layers (Gemma 3)
  float rope_freq_scale = 1.f;    // linear rope scaling
  float rope_mscale = 1.f;        // cos/sin factor (Phi-3 LongRoPE's rope.scaling.attn_factor)

  int64_t sliding_window = 0;          // 0 = none
  std::vector<bool> layer_is_swa;      // per layer
  float attn_scale = 0.f;              // multiplies q·k
  float attn_softcap = 0.f;            // 0 = none, else scores = cap * tanh(scores / cap) (Gemma 2)
  float final_logit_softcap = 0.f;     // 0 = none
  float embed_scale = 1.f;             // token embeddings are multiplied by this

  // Architecture switches.
  bool qkv_bias = false;
  bool qk_norm = false;
  bool post_norms = false;  // post-attention and post-FFN norms (Gemma 3)
  FfnAct ffn_act = FfnAct::Silu;

  // Mixture of experts (0 experts = a dense FFN): a router picks n_experts_used of n_experts
  // per token (softmax over the router logits, top-k, weights renormalized to sum to 1), each
  // expert a gated FFN of width n_ff_exp.
  int64_t n_experts = 0;
  int64_t n_experts_used = 0;
  int64_t n_ff_exp = 0;
  bool moe() const { return n_experts > 0; }

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
};

// Reads and validates the config; unknown architectures list the supported ones.
Result<ModelConfig> config_from_gguf(const gguf::File& file);

}  // namespace kvasir
