// The traits table: which kernels serve each type, and the SIMD versions where compiled in.
#include "kernels/quant/quant.h"

#include "kernels/quant/ref.h"
#include "kernels/quant/simd.h"

namespace kvasir::kernels {
namespace {

// The SIMD kernel where compiled in, else the scalar twin.
#if KVASIR_HAVE_AVX2
#define KV_FAST(simd_fn, ref_fn) simd::simd_fn
#else
#define KV_FAST(simd_fn, ref_fn) ref::ref_fn
#endif

// {type, dequantize, quantize_ref, vec_dot_type, vec_dot, vec_dot_ref, quantize_fast}
const QuantTraits kTraits[] = {
    {DType::F32, ref::dequantize_f32, ref::quantize_f32, DType::F32, KV_FAST(dot_f32, dot_f32),
     ref::dot_f32, ref::quantize_f32},
    {DType::F16, ref::dequantize_f16, ref::quantize_f16, DType::F16, KV_FAST(dot_f16, dot_f16),
     ref::dot_f16, KV_FAST(quantize_f16, quantize_f16)},
    {DType::BF16, ref::dequantize_bf16, ref::quantize_bf16, DType::BF16,
     KV_FAST(dot_bf16, dot_bf16), ref::dot_bf16, KV_FAST(quantize_bf16, quantize_bf16)},
    {DType::Q4_0, ref::dequantize_q4_0, ref::quantize_q4_0, DType::Q8_0,
     KV_FAST(dot_q4_0_q8_0, dot_q4_0_q8_0), ref::dot_q4_0_q8_0, ref::quantize_q4_0},
    {DType::Q4_1, ref::dequantize_q4_1, ref::quantize_q4_1, DType::Q8_1,
     KV_FAST(dot_q4_1_q8_1, dot_q4_1_q8_1), ref::dot_q4_1_q8_1, ref::quantize_q4_1},
    {DType::Q5_0, ref::dequantize_q5_0, ref::quantize_q5_0, DType::Q8_0,
     KV_FAST(dot_q5_0_q8_0, dot_q5_0_q8_0), ref::dot_q5_0_q8_0, ref::quantize_q5_0},
    {DType::Q5_1, ref::dequantize_q5_1, ref::quantize_q5_1, DType::Q8_1,
     KV_FAST(dot_q5_1_q8_1, dot_q5_1_q8_1), ref::dot_q5_1_q8_1, ref::quantize_q5_1},
    {DType::Q8_0, ref::dequantize_q8_0, ref::quantize_q8_0, DType::Q8_0,
     KV_FAST(dot_q8_0_q8_0, dot_q8_0_q8_0), ref::dot_q8_0_q8_0, KV_FAST(quantize_q8_0, quantize_q8_0)},
    {DType::Q8_1, ref::dequantize_q8_1, ref::quantize_q8_1, DType::Q8_1, nullptr, nullptr,
     KV_FAST(quantize_q8_1, quantize_q8_1)},
    {DType::Q2_K, ref::dequantize_q2_k, ref::quantize_q2_k, DType::Q8_K,
     KV_FAST(dot_q2_k_q8_k, dot_q2_k_q8_k), ref::dot_q2_k_q8_k, ref::quantize_q2_k},
    {DType::Q3_K, ref::dequantize_q3_k, ref::quantize_q3_k, DType::Q8_K,
     KV_FAST(dot_q3_k_q8_k, dot_q3_k_q8_k), ref::dot_q3_k_q8_k, ref::quantize_q3_k},
    {DType::Q4_K, ref::dequantize_q4_k, ref::quantize_q4_k, DType::Q8_K,
     KV_FAST(dot_q4_k_q8_k, dot_q4_k_q8_k), ref::dot_q4_k_q8_k, ref::quantize_q4_k},
    {DType::Q5_K, ref::dequantize_q5_k, ref::quantize_q5_k, DType::Q8_K,
     KV_FAST(dot_q5_k_q8_k, dot_q5_k_q8_k), ref::dot_q5_k_q8_k, ref::quantize_q5_k},
    {DType::Q6_K, ref::dequantize_q6_k, ref::quantize_q6_k, DType::Q8_K,
     KV_FAST(dot_q6_k_q8_k, dot_q6_k_q8_k), ref::dot_q6_k_q8_k, ref::quantize_q6_k},
    {DType::Q8_K, ref::dequantize_q8_k, ref::quantize_q8_k, DType::Q8_K, nullptr, nullptr,
     KV_FAST(quantize_q8_k, quantize_q8_k)},
};

#undef KV_FAST

}  // namespace

const QuantTraits* quant_traits(DType type) {
  for (const auto& t : kTraits)
    if (t.type == type) return &t;
  return nullptr;
}

const char* kernel_isa() {
  if (KVASIR_HAVE_VNNI) return "avx2+avx512+vnni";
  return KVASIR_HAVE_AVX512_FLOAT ? "avx2+avx512" : KVASIR_HAVE_AVX2 ? "avx2" : "scalar";
}

QuantizeWeightedFn weighted_quantizer(DType type) {
  switch (type) {
    case DType::Q4_0: return ref::quantize_q4_0_weighted;
    case DType::Q4_1: return ref::quantize_q4_1_weighted;
    case DType::Q5_0: return ref::quantize_q5_0_weighted;
    case DType::Q5_1: return ref::quantize_q5_1_weighted;
    case DType::Q2_K: return ref::quantize_q2_k_weighted;
    case DType::Q3_K: return ref::quantize_q3_k_weighted;
    case DType::Q4_K: return ref::quantize_q4_k_weighted;
    case DType::Q5_K: return ref::quantize_q5_k_weighted;
    case DType::Q6_K: return ref::quantize_q6_k_weighted;
    default: return nullptr;
  }
}

}  // namespace kvasir::kernels
