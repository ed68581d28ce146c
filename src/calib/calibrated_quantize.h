// Calibrated quantization of a whole model, layer by layer: the calibration text's activations
// enter block l after blocks 0..l-1 have been quantized, so each block's choices see (and, with
// GPTQ, correct) the error of the blocks before it, as the GPTQ and AWQ papers do. Per block:
//  1. one pass of the float block over the stored activations collects, per matrix input
//     (q/k/v share one, gate/up another, each expert its own): H = Σ x xᵀ (GPTQ), mean |x| and a
//     strided sample of rows (AWQ);
//  2. AWQ: scales searched per input (quant/awq.h) and folded, exactly: q/k/v's into attn_norm,
//     gate/up's into ffn_norm, down's into up's rows, o's into v's rows (shared across the query
//     heads of a KV head); mixture-of-experts FFNs are left unscaled;
//  3. every matrix is quantized to its target type (GPTQ, or round-to-nearest after AWQ) and
//     swapped into the model;
//  4. a second pass with the quantized block gives the next block's input.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model.h"
#include "quant/awq.h"
#include "quant/gptq.h"

namespace kvasir::calib {

enum class Method { gptq, awq, awq_gptq };

struct CalibratedOptions {
  Method method = Method::gptq;
  int64_t n_ctx = 512;       // calibration chunk (each evaluated from position 0)
  int64_t max_chunks = -1;   // -1: every whole chunk of the text
  int num_threads = 0;
  int32_t bos = -1;          // replaces each chunk's first token when >= 0
  quant::GptqOptions gptq = {};
  quant::AwqOptions awq = {};
  int64_t awq_sample_rows = 512;  // rows of each input the AWQ search measures the error on
  // The type each tensor gets (by name), as quant::plan_tensors says.
  std::function<DType(const std::string& tensor)> target;
  // false: AWQ's search and folds only, the matrices kept in F32 (what shows the folds exact).
  bool quantize = true;
  std::function<void(int64_t layer, int64_t layers)> on_layer = {};
};

struct CalibratedModel {
  // Whole tensors in their target types: the quantized matrices, and the norms and biases AWQ
  // folded scales into.
  std::map<std::string, std::vector<uint8_t>> tensors;
  int64_t chunks = 0;
  std::vector<double> awq_alphas;  // the α chosen for each scaled input, in order
  std::vector<std::vector<float>> kept;  // quantize = false: the scaled F32 matrices the model reads
};

// The model's block matrices must be F32, F16 or BF16 (any type is read, but the point is a
// full-precision source); its weights are swapped for the results as it goes (the model is spent
// afterwards, and its swapped matrices point into the result).
Result<CalibratedModel> calibrated_quantize(Model& model, std::span<const int32_t> tokens, const CalibratedOptions& options);

}  // namespace kvasir::calib
