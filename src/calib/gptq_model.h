// GPTQ over a whole model, layer by layer as in the paper: the calibration text's activations
// enter block l after blocks 0..l-1 have been quantized, so each block corrects the error of the
// blocks before it. Per block: one pass over the stored activations with the float weights
// collects H = Σ x xᵀ for every matrix input (q/k/v share one, gate/up another; each expert its
// own), the block's matrices are quantized by quant::gptq_quantize and swapped into the model,
// and a second pass with the quantized block gives the next block's input.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model.h"
#include "quant/gptq.h"

namespace kvasir::calib {

struct GptqModelOptions {
  int64_t n_ctx = 512;       // calibration chunk (each evaluated from position 0)
  int64_t max_chunks = -1;   // -1: every whole chunk of the text
  int num_threads = 0;
  int32_t bos = -1;          // replaces each chunk's first token when >= 0
  quant::GptqOptions gptq = {};
  // The type each block tensor gets (by name); tensors whose type has no kernels::BlockGrid, or
  // that keep their type, are left out.
  std::function<DType(const std::string& tensor)> target;
  std::function<void(int64_t layer, int64_t layers)> on_layer = {};
};

struct GptqModel {
  std::map<std::string, std::vector<uint8_t>> tensors;  // whole tensors in their target types
  int64_t chunks = 0;
};

// The model must be F32, F16 or BF16 in its blocks' matrices; its weights are swapped for the
// quantized ones as it goes (the model is spent afterwards).
Result<GptqModel> gptq_quantize_model(Model& model, std::span<const int32_t> tokens, const GptqModelOptions& options);

}  // namespace kvasir::calib
