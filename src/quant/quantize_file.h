// `kvasir quantize`: a GGUF file rewritten with its matrices in other types (RTN, the reference
// quantizers, byte-identical to llama.cpp's), metadata carried over as llama-quantize does
// (general.quantization_version and general.file_type set last), tensors in llama.cpp's order
// (by layer, then name), streamed: memory holds one tensor at a time.
#pragma once
#include <cstddef>
#include <functional>
#include <string>

#include "core/status.h"
#include "quant/mix.h"

namespace kvasir::quant {

struct QuantizeOptions {
  TensorRules rules;
  bool allow_requantize = false;  // refused by default when a tensor is already quantized
  int num_threads = 0;
  // Called before each tensor: (index, count, name, from type, to type).
  std::function<void(size_t, size_t, const std::string&, DType, DType)> progress;
};

Status quantize_file(const std::string& in_path, const std::string& out_path, const QuantizeOptions& options);

}  // namespace kvasir::quant
