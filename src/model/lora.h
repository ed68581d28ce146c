// LoRA adapters in llama.cpp's GGUF format (general.type "adapter", adapter.type "lora",
// adapter.lora.alpha; tensors "<base tensor>.lora_a" [n_in -> rank] and ".lora_b" [rank -> n_out]).
// An adapter adds scale · B (A x) to a matrix product, scale = alpha / rank (alpha 0: 1), times
// the user's scale: what llama.cpp computes. Loaded against one model: every pair must name one
// of its matrices with matching shapes; the factors are kept in F32 (a rank-16 adapter of a 1B
// model is tens of MB), keyed by the base matrix's data so that the forward finds them from the
// Matrix it multiplies (a fused q|k|v tensor's adapter is split by the same rows).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "model/model.h"

namespace kvasir {

struct LoraFactors {
  int64_t rank = 0, n_in = 0, n_out = 0;
  int64_t row0 = 0;      // the first row of the base tensor these outputs are (fused tensors)
  float scale = 1.f;     // alpha / rank times the user's scale
  std::vector<float> a;  // [rank][n_in]
  std::vector<float> bt;  // B transposed, [rank][n_out]: the up-projection is then row-wise axpys
};

class LoraAdapter {
 public:
  // Reads `path` and binds it to `model`; errors name the file and the tensor. `scale` multiplies
  // every delta (llama.cpp's --lora-scaled).
  static Result<std::shared_ptr<const LoraAdapter>> load(const std::string& path, const Model& model, float scale = 1.f);

  // The factors for the base matrix whose data begins at `w_data`, or null.
  const LoraFactors* find(const void* w_data) const {
    auto it = by_matrix_.find(w_data);
    return it == by_matrix_.end() ? nullptr : &it->second;
  }
  const std::string& path() const { return path_; }
  // What the adapter changes, as the prefix cache must tell apart: a hash of its factors and scale.
  const std::string& identity() const { return identity_; }
  float alpha() const { return alpha_; }
  int64_t max_rank() const { return max_rank_; }
  size_t num_matrices() const { return by_matrix_.size(); }
  size_t bytes() const;
  // Every (base tensor name, factors) pair, in file order (export-lora merges them).
  const std::vector<std::pair<std::string, const LoraFactors*>>& entries() const { return entries_; }

 private:
  std::string path_, identity_;
  float alpha_ = 0;
  int64_t max_rank_ = 0;
  std::unordered_map<const void*, LoraFactors> by_matrix_;
  std::vector<std::pair<std::string, const LoraFactors*>> entries_;
};

// Writes `model` with `adapter` merged into its weights (W + scale · B A) to `path`: every other
// tensor and every metadata key copied as it is; a merged tensor is re-quantized to its own type
// (`out_type` unset) or written as `out_type` (F32, F16, BF16 or a quantized type).
Status write_merged_lora(const Model& model, const LoraAdapter& adapter, const std::string& path,
                         std::optional<DType> out_type = std::nullopt);

// Writes a LoRA adapter for `model` in llama.cpp's format: rank-`rank` random factors (seeded,
// the same bytes on every machine) for every attention and FFN matrix of every layer, sized so
// that the delta moves the outputs clearly without wrecking them. What tests and benchmarks use.
Status write_random_lora(const Model& model, const std::string& path, int64_t rank, float alpha, uint64_t seed);

}  // namespace kvasir
