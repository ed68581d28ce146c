// The float types (F32, F16, BF16) repacked once at load (PackedMatrix), where the 512-bit float
// tiles are compiled in and rows are a multiple of 8 elements. A panel holds 8 weight rows
// interleaved by k-step: for each 8 elements of the row, the 8 rows' 8 elements in row order
// (128 bytes for the 16-bit types). A one-row GEMV then reads one sequential stream instead of 8
// rows of a few KiB each (16 short streams on 2 threads left DRAM half idle: 20-27 GB/s). The
// arithmetic is micro512's (gemm_avx2_float.cpp): a register holds rows 2p and 2p + 1's 8 lanes,
// each output one FMA chain per lane and the same reduction, so the same bits.
#include "kernels/quant/simd.h"

#if KVASIR_HAVE_AVX512_FLOAT
#include <cstddef>
#include <cstring>

#include "core/fp16.h"
#include "kernels/quant/gemm_avx2_packed.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace kvasir::kernels::simd {
namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }
size_t elem_bytes(DType t) { return t == DType::F32 ? 4 : 2; }

// 16 elements at p (rows 2p and 2p + 1's 8 each) widened to f32 (exact).
template <DType kType>
inline __m512 wide16(const uint8_t* p) {
  if constexpr (kType == DType::F32) return _mm512_loadu_ps(p);
  else if constexpr (kType == DType::F16) return _mm512_cvtph_ps(load256(p));
  else return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(load256(p)), 16));
}

// Panel q of a step for R rows: out[r][8q + c] = row r . weight row c.
template <DType kType, int R>
void panel_float(const uint8_t* panel, int64_t n, const float* const a[], float (*out)[8 * kPanelsPerStep], int q) {
  constexpr size_t kStep = kType == DType::F32 ? 256 : 128;  // 8 rows x 8 elements
  __m512 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < 4; ++p) acc[r][p] = _mm512_setzero_ps();
  for (int64_t s = 0; s < n / 8; ++s) {
    const uint8_t* ps = panel + size_t(s) * kStep;
    if (R == 1) prefetch_part<kStep, 1>(ps, 0);
    __m512 w[4];
    for (int p = 0; p < 4; ++p) w[p] = wide16<kType>(ps + p * kStep / 4);
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_broadcast_f32x8(_mm256_loadu_ps(a[r] + 8 * s));
      for (int p = 0; p < 4; ++p) acc[r][p] = _mm512_fmadd_ps(w[p], av, acc[r][p]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < 8; ++c) {
      const __m512 v = acc[r][c / 2];
      out[r][8 * q + c] = hsum(c % 2 == 0 ? _mm512_castps512_ps256(v) : _mm512_extractf32x8_ps(v, 1));
    }
}

template <DType kType>
void run_float(const uint8_t* panels, size_t panel_bytes, int64_t n, int64_t out_begin, int64_t out_end,
               const float* rows, int64_t row_stride, int64_t n_rows, float* y, int64_t y_stride) {
  for_prepacked_panels(panel_bytes, out_begin, out_end, n_rows, y, y_stride,
                       [&](int64_t p, int np, int64_t r0, int R, float (*out)[8 * kPanelsPerStep]) {
    const float* a[kPanelRowGroup];
    for (int r = 0; r < R; ++r) a[r] = rows + (r0 + r) * row_stride;
    for (int q = 0; q < np; ++q)
      with_rows(R, [&]<int kR>() { panel_float<kType, kR>(panels + size_t(p + q) * panel_bytes, n, a, out, q); });
  });
}

}  // namespace

size_t prepacked_float_panel_bytes(DType wtype, int64_t n_in) {
  if (!is_float(wtype) || n_in % 8 != 0) return 0;
  return size_t(n_in) * 8 * elem_bytes(wtype);
}

void prepack_float_panel(DType wtype, const uint8_t* w, size_t w_stride, int64_t n_rows, int64_t n_in, uint8_t* dst) {
  const size_t chunk = 8 * elem_bytes(wtype);  // 8 elements of one row
  for (int64_t s = 0; s < n_in / 8; ++s)
    for (int c = 0; c < 8; ++c)
      std::memcpy(dst + (size_t(s) * 8 + size_t(c)) * chunk, w + size_t(std::min<int64_t>(c, n_rows - 1)) * w_stride + size_t(s) * chunk,
                  chunk);
}

size_t prepacked_float_scratch_bytes(DType wtype, int64_t n_in, int64_t n_rows) {
  return wtype == DType::F32 ? 0 : size_t(n_rows * n_in) * sizeof(float);
}

void gemm_prepacked_float(DType wtype, const uint8_t* panels, size_t panel_bytes, int64_t n_in, int64_t out_begin,
                          int64_t out_end, const uint8_t* act, size_t a_stride, int64_t n_rows, float* y,
                          int64_t y_stride, void* scratch) {
  if (wtype == DType::F32)
    return run_float<DType::F32>(panels, panel_bytes, n_in, out_begin, out_end, reinterpret_cast<const float*>(act),
                                 int64_t(a_stride / 4), n_rows, y, y_stride);
  // F16 / BF16 activations widened once per call (exact).
  auto* rows = static_cast<float*>(scratch);
  for (int64_t r = 0; r < n_rows; ++r) {
    const auto* src = reinterpret_cast<const uint16_t*>(act + size_t(r) * a_stride);
    float* dst = rows + r * n_in;
    for (int64_t k = 0; k < n_in; k += 8) {
      const __m128i h = load128(src + k);
      _mm256_storeu_ps(dst + k, wtype == DType::F16
                                    ? _mm256_cvtph_ps(h)
                                    : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
    }
  }
  if (wtype == DType::F16)
    return run_float<DType::F16>(panels, panel_bytes, n_in, out_begin, out_end, rows, n_in, n_rows, y, y_stride);
  run_float<DType::BF16>(panels, panel_bytes, n_in, out_begin, out_end, rows, n_in, n_rows, y, y_stride);
}

}  // namespace kvasir::kernels::simd
#endif
