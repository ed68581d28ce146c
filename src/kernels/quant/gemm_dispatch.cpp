// Which tile kernel serves a matmul: the float tiles, the packed panels (batches of at least
// kPackMinRows rows, types that have them) or the direct kernels; the scalar twin where no SIMD
// was compiled in. All of them compute the same bits (gemm.h), so the choice is only speed.
#include <algorithm>
#include <cstdlib>

#include "kernels/quant/gemm.h"
#include "kernels/quant/simd.h"
#if KVASIR_HAVE_AVX2
#include "kernels/quant/gemm_avx2.h"
#endif

namespace kvasir::kernels {
namespace {

// Packing a panel costs about one pass over its weights; from 4 rows on it pays for itself.
constexpr int64_t kPackMinRows = 4;

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

}  // namespace

bool gemm_has_simd(DType wtype) {
#if KVASIR_HAVE_AVX2
  switch (wtype) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q4_0: case DType::Q4_1: case DType::Q5_0:
    case DType::Q5_1: case DType::Q8_0: case DType::Q2_K: case DType::Q3_K: case DType::Q4_K: case DType::Q5_K:
    case DType::Q6_K:
      return true;
    default:
      return false;
  }
#else
  (void)wtype;
  return false;
#endif
}

size_t gemm_scratch_bytes(DType wtype, int64_t n, int64_t n_rows) {
#if KVASIR_HAVE_AVX2
  if (is_float(wtype)) return size_t(4 * n) * sizeof(float);  // one widened row group
  return n_rows >= kPackMinRows ? simd::gemm_packed_scratch_bytes(wtype, n, n_rows) : 0;
#else
  (void)wtype, (void)n, (void)n_rows;
  return 0;
#endif
}

void gemm_simd(const GemmTile& t, void* scratch) {
#if KVASIR_HAVE_AVX2
  if (is_float(t.wtype)) return simd::gemm_float(t, scratch);
  if (t.n_rows >= kPackMinRows && simd::gemm_packed(t, scratch)) return;
  simd::gemm_direct(t);
#else
  (void)scratch;
  gemm_ref(t);
#endif
}

}  // namespace kvasir::kernels
