// Weights bound to tensors of the mapped GGUF file (used in place; nothing copied except the
// small 1-D norm and bias vectors, which are converted to F32 once at load).
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "format/gguf.h"
#include "model/config.h"

namespace kvasir {

// A 2-D weight matrix: n_out rows of n_in elements, each row contiguous in the file's type. It
// may be a run of rows of a larger tensor (fused QKV, fused gate|up, one expert of a 3-D tensor).
struct Matrix {
  DType type = DType::F32;
  const void* data = nullptr;
  int64_t n_in = 0;   // row length (ne[0])
  int64_t n_out = 0;  // number of rows (ne[1])
};

using Vector = std::vector<float>;  // empty when the model has no such tensor

struct LayerWeights {
  Vector attn_norm;                   // [n_embd]
  Matrix wq, wk, wv, wo;              // q: [n_embd -> q_dim], k/v: [n_embd -> kv_dim], o: [q_dim -> n_embd]
  Vector bq, bk, bv;                  // qwen2 biases
  Vector q_norm, k_norm;              // [head_dim] (gemma3 QK-norm)
  Vector post_attn_norm;              // [n_embd] (gemma3)
  Vector ffn_norm;                    // [n_embd]
  Matrix w_gate, w_up, w_down;        // gate/up: [n_embd -> n_ff], down: [n_ff -> n_embd]
  Vector post_ffn_norm;               // [n_embd] (gemma3)
  // Mixture of experts (qwen3moe): the router and one matrix per expert, each a view of its slice
  // of the file's 3-D tensor; w_gate/w_up/w_down are then unset.
  Matrix router;                      // [n_embd -> n_experts]
  std::vector<Matrix> gate_exps, up_exps, down_exps;  // [n_embd -> n_ff_exp] x2, [n_ff_exp -> n_embd]
};

struct Weights {
  Matrix token_embd;   // [n_embd] x n_vocab rows
  Vector output_norm;  // [n_embd]
  Matrix output;       // n_vocab rows of n_embd (token_embd when tied)
  Vector rope_freqs;   // [rope_dims / 2] Llama 3 frequency factors, or empty
  std::vector<LayerWeights> layers;
};

// Binds and shape-checks every tensor the architecture needs; errors name the tensor.
Result<Weights> bind_weights(const gguf::File& file, const ModelConfig& config);

}  // namespace kvasir
