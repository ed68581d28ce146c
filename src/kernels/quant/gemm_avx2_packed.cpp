// Packed panels for prefill (placeholder until the packed kernels land).
#include "kernels/quant/simd.h"

#if KVASIR_HAVE_AVX2
#include "kernels/quant/gemm_avx2.h"

namespace kvasir::kernels::simd {

bool gemm_packed(const GemmTile&, void*) { return false; }
size_t gemm_packed_scratch_bytes(DType, int64_t, int64_t) { return 0; }

}  // namespace kvasir::kernels::simd
#endif
