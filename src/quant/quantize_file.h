// `kvasir quantize`: a GGUF file rewritten with its matrices in other types (RTN, the reference
// quantizers, byte-identical to llama.cpp's), metadata carried over as llama-quantize does
// (general.quantization_version and general.file_type set last), tensors in llama.cpp's order
// (by layer, then name), streamed: memory holds one tensor at a time.
#pragma once
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "format/gguf.h"
#include "quant/mix.h"

namespace kvasir::quant {

// An importance matrix as llama-quantize uses it: per tensor name, [n_mat][n_in] weights (the
// mean squared activation of each input column; 1 for a matrix no token reached), and the facts
// it writes into the output's quantize.imatrix.* keys.
struct Importance {
  std::map<std::string, std::vector<float>> weights = {};
  std::string file = {}, dataset = {};
  uint32_t chunks = 0;
};

struct QuantizeOptions {
  TensorRules rules;
  // With an importance matrix, matrices it covers are quantized by the types' weighted
  // quantizers (Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K; Q8_0 ignores the weights as ggml does; a
  // covered matrix of another quantized type is an error, since its bytes would not be
  // llama-quantize's).
  std::optional<Importance> importance;
  // Tensors a calibrated method made (GPTQ, AWQ: matrices, and the norms AWQ folded scales
  // into), by name: their bytes in the planned type, written as they are (a wrong size is an error).
  const std::map<std::string, std::vector<uint8_t>>* precomputed = nullptr;
  // Written after the quantize.* keys (e.g. quantize.method).
  std::vector<std::pair<std::string, gguf::Value>> extra_metadata = {};
  bool allow_requantize = false;  // refused by default when a tensor is already quantized
  int num_threads = 0;
  // Called before each tensor: (index, count, name, from type, to type).
  std::function<void(size_t, size_t, const std::string&, DType, DType)> progress;
};

// Every tensor of `in` with the type it gets, in llama.cpp's order (by layer, then name).
struct PlannedTensor {
  const gguf::TensorInfo* tensor;
  DType type;
};
std::vector<PlannedTensor> plan_tensors(const gguf::File& in, const TensorRules& rules);

Status quantize_file(const std::string& in_path, const std::string& out_path, const QuantizeOptions& options);

}  // namespace kvasir::quant
