// Synthetic models: GGUF files with random (fixed-seed) weights of realistic shapes, so anyone can
// benchmark big shapes without downloading a model.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace kvasir::cli {

struct SynthShape {
  std::string arch = "llama";  // llama, qwen2, qwen3, qwen3moe or gemma3
  int64_t n_embd = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, n_ff = 0, n_vocab = 0;
  int64_t n_ctx = 2048;
  bool tied_output = false;
  float rope_base = 10000.f;
  int64_t sliding_window = 0;  // gemma3
  int64_t n_experts = 0, n_experts_used = 0, n_ff_exp = 0;  // qwen3moe
};

// Presets: tinyllama-1.1b, small, gemma3-270m, qwen3-0.6b, qwen3moe-1.2b (16 experts, 4 active),
// stories260K-shape ("tiny").
Result<SynthShape> synth_preset(const std::string& name);
std::vector<std::string> synth_preset_names();

struct SynthOptions {
  SynthShape shape;
  std::string type = "q4_0";   // a tensor type name, or a llama.cpp mix: q4_k_m, q4_k_s, q5_k_m
  std::string vocab_from;      // GGUF whose tokenizer.* keys are copied; empty = generated vocab
  uint64_t seed = 1;
  int num_threads = 0;
};

Status write_synthetic_model(const SynthOptions& options, const std::string& path);

}  // namespace kvasir::cli
