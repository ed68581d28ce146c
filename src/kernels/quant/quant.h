// Block quantization formats, bit-compatible with ggml: one traits row per type.
// Weights stay in their file type; activations are converted once per row to the weight type's
// `vec_dot_type` (Q8_0 / Q8_1 / Q8_K for quantized weights, F16/BF16/F32 for float weights) and
// the dot product runs directly on blocks.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace kvasir::kernels {

using DequantizeRowFn = void (*)(const void* src, float* dst, int64_t n);
using QuantizeRowFn = void (*)(const float* src, void* dst, int64_t n);
// Dot product of n elements: one row of the weight type with one row of its vec_dot_type.
using VecDotFn = float (*)(int64_t n, const void* w_row, const void* act_row);

struct QuantTraits {
  DType type;
  DequantizeRowFn dequantize_row;  // scalar reference; never null for a supported type
  QuantizeRowFn quantize_row;      // reference quantizer; null where none exists
  DType vec_dot_type;              // what activations are converted to for vec_dot
  VecDotFn vec_dot;                // fastest available implementation
  VecDotFn vec_dot_ref;            // scalar reference twin
  // Same bytes as quantize_row (F16: except NaN payloads), vectorized where that pays (the
  // activation types); what quantize_activations uses. Activations are thus converted exactly
  // like ggml's reference quantizer on every ISA.
  QuantizeRowFn quantize_row_fast;
};

// A quantizer that weighs each element's error by an importance matrix row (n weights, the mean
// squared activation of each input column), as llama-quantize --imatrix does.
using QuantizeWeightedFn = void (*)(const float* src, void* dst, int64_t n, const float* importance);
// The type's weighted quantizer; nullptr where there is none (the type is quantized without one).
QuantizeWeightedFn weighted_quantizer(DType type);

// Traits of a type; nullptr for a type without kernels. The activation-only types Q8_1 and Q8_K
// have traits too, with null vec_dot / vec_dot_ref (nothing is multiplied in those types).
const QuantTraits* quant_traits(DType type);

// "avx2" when the AVX2/FMA/F16C kernels were compiled in ("avx2+avx512" with the 512-bit float
// tiles, "avx2+avx512+vnni" with the vpdpbusd integer kernels too), else "scalar".
const char* kernel_isa();

}  // namespace kvasir::kernels
