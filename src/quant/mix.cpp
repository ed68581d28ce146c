#include "quant/mix.h"

#include <algorithm>
#include <cctype>
#include <regex>

namespace kvasir::quant {
namespace {

const std::vector<FileType>& table() {
  static const std::vector<FileType> t = {
      {"f32", 0, DType::F32, false},     {"f16", 1, DType::F16, false},     {"bf16", 32, DType::BF16, false},
      {"q8_0", 7, DType::Q8_0, false},   {"q4_0", 2, DType::Q4_0, false},   {"q4_1", 3, DType::Q4_1, false},
      {"q5_0", 8, DType::Q5_0, false},   {"q5_1", 9, DType::Q5_1, false},   {"q2_k", 10, DType::Q2_K, true},
      {"q3_k_s", 11, DType::Q3_K, true}, {"q3_k_m", 12, DType::Q3_K, true}, {"q3_k_l", 13, DType::Q3_K, true},
      {"q4_k_s", 14, DType::Q4_K, true}, {"q4_k_m", 15, DType::Q4_K, true}, {"q5_k_s", 16, DType::Q5_K, true},
      {"q5_k_m", 17, DType::Q5_K, true}, {"q6_k", 18, DType::Q6_K, false},
  };
  return t;
}

bool use_more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

bool ends_with(const std::string& s, const char* suffix) { return s.ends_with(suffix); }

DType fallback(DType t) {
  switch (t) {
    case DType::Q4_K: return DType::Q5_0;
    case DType::Q5_K: return DType::Q5_1;
    case DType::Q6_K: return DType::Q8_0;
    default: return DType::Q4_0;
  }
}

// llama.cpp's upgrades for the K-quant mixes (dense models).
DType mixed(const FileType& f, const TensorShape& t, DType type) {
  const std::string& n = f.name;
  const int64_t i = t.layer, L = t.n_layers;
  if (ends_with(t.name, "attn_v.weight")) {
    if (n == "q2_k") return t.n_gqa >= 4 ? DType::Q4_K : DType::Q3_K;
    if (n == "q3_k_m") return i < 2 ? DType::Q5_K : DType::Q4_K;
    if (n == "q3_k_l") return DType::Q5_K;
    if ((n == "q4_k_m" || n == "q5_k_m") && use_more_bits(i, L)) return DType::Q6_K;
    if (n == "q4_k_s" && i < 4) return DType::Q5_K;
  } else if (ends_with(t.name, "ffn_down.weight")) {
    if (n == "q2_k") return DType::Q3_K;
    if (n == "q3_k_m") return i < L / 16 ? DType::Q5_K : DType::Q4_K;  // (Falcon: Q3_K off use_more_bits)
    if (n == "q3_k_l") return DType::Q5_K;
    if ((n == "q4_k_m" || n == "q5_k_m") && use_more_bits(i, L)) return DType::Q6_K;
    if (n == "q4_k_s" && i < L / 8) return DType::Q5_K;
  } else if (ends_with(t.name, "attn_output.weight")) {
    if (n == "q2_k") return DType::Q3_K;
    if (n == "q3_k_m") return DType::Q4_K;
    if (n == "q3_k_l") return DType::Q5_K;
  } else if (ends_with(t.name, "attn_qkv.weight")) {
    if (n == "q3_k_m" || n == "q3_k_l") return n == "q3_k_m" ? DType::Q4_K : DType::Q5_K;
    if (n == "q4_k_m") return DType::Q5_K;
    if (n == "q5_k_m") return DType::Q6_K;
  }
  return type;
}

}  // namespace

Result<FileType> file_type(const std::string& name_in) {
  std::string name = name_in;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (name == "q3_k" || name == "q4_k" || name == "q5_k") name += "_m";
  for (const FileType& f : table())
    if (f.name == name) return f;
  std::string all;
  for (const auto& n : file_type_names()) all += (all.empty() ? "" : ", ") + n;
  return Error{"unknown quantization type '" + name_in + "' (" + all + ")", ErrorCode::invalid_argument};
}

std::vector<std::string> file_type_names() {
  std::vector<std::string> v;
  for (const FileType& f : table()) v.push_back(f.name);
  return v;
}

DType tensor_type(const TensorRules& r, const TensorShape& t) {
  const bool matrix = t.ne.size() >= 2;
  if (!matrix || ends_with(t.name, "ffn_gate_inp.weight") || ends_with(t.name, "_norm.weight")) return DType::F32;
  for (const auto& [pattern, type] : r.overrides)
    if (std::regex_search(t.name, std::regex(pattern))) return type;
  const bool output = t.name == "output.weight" || (!t.has_output && t.name == "token_embd.weight");
  DType type = r.type.base;
  if (output && r.output_type) type = *r.output_type;
  else if (t.name == "token_embd.weight" && r.token_embedding_type) type = *r.token_embedding_type;
  else if (!r.pure && dtype_info(r.type.base).block_size > 1) {  // a quantized type: mixes apply
    if (output) type = r.type.base == DType::Q8_0 ? DType::Q8_0 : DType::Q6_K;
    else if (r.type.is_mix) type = mixed(r.type, t, type);
    else if (r.has_imatrix && (r.type.base == DType::Q4_0 || r.type.base == DType::Q5_0) &&
             ends_with(t.name, "ffn_down.weight") && t.layer < t.n_layers / 8)
      type = r.type.base == DType::Q4_0 ? DType::Q4_1 : DType::Q5_1;  // llama.cpp's guard for early ffn_down
  }
  if (t.ne[0] % dtype_info(type).block_size != 0) {
    type = fallback(type);
    if (t.ne[0] % dtype_info(type).block_size != 0) type = DType::F16;
  }
  return type;
}

}  // namespace kvasir::quant
