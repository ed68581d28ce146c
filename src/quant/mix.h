// Which type each tensor gets when a model is quantized: llama.cpp's file types (the names
// llama-quantize takes, with their general.file_type numbers) and its per-tensor rules, shared by
// `kvasir quantize` and `kvasir synth`.
//
// A file type has a base type; without --pure the output matrix (or the token embedding when the
// output is tied to it) gets Q6_K, and the K-quant mixes give attn_v / ffn_down more bits on the
// layers llama.cpp's use_more_bits() picks (the first and last eighth, and every third between).
// With --pure every matrix gets the base type. Vectors (norms, biases) and the MoE router stay F32.
// A matrix whose rows are not a whole number of the type's blocks falls back as llama.cpp does
// (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0; Q2_K / Q3_K -> Q4_0, where llama.cpp uses IQ4_NL).
// With an importance matrix, Q4_0 / Q5_0 give the first eighth of the layers' ffn_down Q4_1 /
// Q5_1, as llama.cpp does. Not carried over: llama.cpp's special cases for Falcon, 70B models,
// 8-expert MoE and the IQ types' imatrix rules.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace kvasir::quant {

struct FileType {
  std::string name;        // "q4_k_m"
  uint32_t ftype = 0;      // general.file_type
  DType base = DType::F32;
  bool is_mix = false;     // a K-quant mix with per-tensor upgrades
};

// By llama-quantize's names (case-insensitive; q3_k / q4_k / q5_k mean their _m mixes).
Result<FileType> file_type(const std::string& name);
std::vector<std::string> file_type_names();

struct TensorRules {
  FileType type;
  bool pure = false;
  std::vector<std::pair<std::string, DType>> overrides = {};  // --tensor-type REGEX=TYPE, first match wins
  std::optional<DType> output_type = {}, token_embedding_type = {};
  bool has_imatrix = false;  // quantizing with an importance matrix (changes llama.cpp's rules)
};

struct TensorShape {
  std::string name;
  std::vector<int64_t> ne;
  int64_t layer = -1;       // blk.N., -1 for others
  int64_t n_layers = 1;
  bool has_output = true;   // the model has its own output.weight (not tied)
  int64_t n_gqa = 1;        // query heads per KV head
};

// The type `t` gets; F32 for tensors that are never quantized.
DType tensor_type(const TensorRules& rules, const TensorShape& t);

}  // namespace kvasir::quant
