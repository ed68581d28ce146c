// The float types (F32, F16, BF16) repacked once at load (PackedMatrix) where rows are a multiple
// of 8 elements (BF16: of 32). A panel holds 8 weight rows interleaved
// by k-step: for each 8 elements of the row, the 8 rows' 8 elements in row order (128 bytes for
// F16); BF16 interleaves 32-element chunks, its own order (gemm.h). A one-row GEMV then reads one
// sequential stream instead of 8 rows of a few KiB each (16 short streams on 2 threads left DRAM
// half idle: 20-27 GB/s). The arithmetic is micro's / micro512's (gemm_avx2_float.cpp) and
// gemm_avx2_bf16.cpp's: the same bits.
#include "kernels/quant/simd.h"

#if KVASIR_HAVE_AVX2
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "core/fp16.h"
#include "kernels/quant/gemm_avx2_packed.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace kvasir::kernels::simd {
namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }
size_t elem_bytes(DType t) { return t == DType::F32 ? 4 : 2; }

#if KVASIR_HAVE_AVX512_FLOAT
// The AVX-512 tile reads f32 activations; F16 rows are widened once per call into scratch.
template <DType kType>
using ActOf = float;
constexpr bool kWidenF16Activations = true;

// 16 elements at p (rows 2p and 2p + 1's 8 each) widened to f32 (exact). kHalves: F32 read as
// two 256-bit halves, for one-row decode: from DRAM, 512-bit loads streamed 5-12% slower on an
// AVX-512 EPYC (Zen 4). Prefill rereads a panel from cache and keeps the one load (the halves
// were 3-5% slower there in one pair of runs, level in later ones; docs/PERFORMANCE.md, session 23).
template <DType kType, bool kHalves>
inline __m512 wide16(const uint8_t* p) {
  const auto* f = reinterpret_cast<const float*>(p);
  if constexpr (kType == DType::F32 && kHalves)
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(f)), _mm256_loadu_ps(f + 8), 1);
  else if constexpr (kType == DType::F32) return _mm512_loadu_ps(f);
  else return _mm512_cvtph_ps(load256(p));
}

// Panel q of a step for R rows: out[r][8q + c] = row r . weight row c.
template <DType kType, int R>
void panel_float(const uint8_t* panel, int64_t n, const float* const a[], float (*out)[8 * kPanelsPerStep], int q) {
  constexpr size_t kStep = kType == DType::F32 ? 256 : 128;  // 8 rows x 8 elements
  __m512 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < 4; ++p) acc[r][p] = _mm512_setzero_ps();
  for (int64_t s = 0; s < n / 8; ++s) {
    // No software prefetch, as in the BF16 panel below: 1.1B F16 decode 1.03x and 1.04x without
    // it, 134M F16 level (session 21).
    const uint8_t* ps = panel + size_t(s) * kStep;
    __m512 w[4];
    for (int p = 0; p < 4; ++p) w[p] = wide16<kType, R == 1>(ps + p * kStep / 4);
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
#else
// 8 elements of one weight row at p, widened (exact).
template <DType kType>
inline __m256 wide8(const uint8_t* p) {
  if constexpr (kType == DType::F32) return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  else return _mm256_cvtph_ps(load128(p));
}

// The activations as the kernel reads them: F32 weights take f32 rows; F16 weights take the F16
// rows as they come, widened 8 at a time inside the tile (exact). Kept 2 bytes wide, 3 rows of
// activations and a pass's panel half fit in L1 together; widened once per call into scratch,
// they did not, and the tile ran 5-14% slower from L2.
template <DType kType>
using ActOf = std::conditional_t<kType == DType::F32, float, uint16_t>;
constexpr bool kWidenF16Activations = false;

template <DType kType>
inline __m256 act8(const ActOf<kType>* p) {
  if constexpr (kType == DType::F32) return _mm256_loadu_ps(p);
  else return _mm256_cvtph_ps(load128(p));
}

// An empty asm the compiler cannot see through: the value lives in a register, so it is loaded
// once and not folded into every FMA as a memory operand (which made the tile load-bound).
inline void in_register(__m256& v) { asm("" : "+x"(v)); }

// Rows a[0..R) times panel columns [C0, C0 + NC): out[r][C0 + c]. R x NC accumulators, each one
// output's eight lane sums; the NC outputs of a row reduced together (hsum4, the same bits as
// hsum). 3 rows x 4 columns fill the 16 registers: 12 sums, 3 activation vectors, 1 weight.
template <DType kType, int R, int C0, int NC>
  requires(NC == 4 || NC == 8)
void panel_cols(const uint8_t* panel, int64_t n, const ActOf<kType>* const a[], float* const out[]) {
  constexpr size_t kElem = kType == DType::F32 ? 4 : 2, kStep = 64 * kElem;  // 8 rows x 8 elements
  __m256 acc[R][NC];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_setzero_ps();
  for (int64_t s = 0; s < n / 8; ++s) {
    const uint8_t* ps = panel + size_t(s) * kStep;
    if constexpr (R == 1) prefetch_part<kStep, 1>(ps, 0);
    __m256 av[R];
    for (int r = 0; r < R; ++r) {
      av[r] = act8<kType>(a[r] + 8 * s);
      in_register(av[r]);
    }
    for (int c = 0; c < NC; ++c) {
      __m256 w = wide8<kType>(ps + size_t(C0 + c) * 8 * kElem);
      in_register(w);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(w, av[r], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm_storeu_ps(out[r] + C0, hsum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
    if constexpr (NC == 8) _mm_storeu_ps(out[r] + C0 + 4, hsum4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]));
  }
}

// R rows x the panel's 8 columns: one row takes all 8 at once (8 sums); more rows take the
// panel in halves of 4 columns, 3 rows (then 2, then 1) at a time.
template <DType kType, int R>
void panel_rows(const uint8_t* panel, int64_t n, const ActOf<kType>* const a[], float* const out[]) {
  if constexpr (R == 1) {
    panel_cols<kType, 1, 0, 8>(panel, n, a, out);
  } else {
    constexpr int kTake = R >= 3 ? 3 : R;
    panel_cols<kType, kTake, 0, 4>(panel, n, a, out);
    panel_cols<kType, kTake, 4, 4>(panel, n, a, out);
    if constexpr (R > kTake) panel_rows<kType, R - kTake>(panel, n, a + kTake, out + kTake);
  }
}

template <DType kType, int R>
void panel_float(const uint8_t* panel, int64_t n, const ActOf<kType>* const a[], float (*out)[8 * kPanelsPerStep], int q) {
  float* o[R];
  for (int r = 0; r < R; ++r) o[r] = out[r] + 8 * q;
  panel_rows<kType, R>(panel, n, a, o);
}
#endif

#if KVASIR_HAVE_AVX512_FLOAT
constexpr int kFloatRows = int(kPanelRowGroup);
#else
// Rows a pass of the float panels takes: two 3-row passes (one 3-row tile converts each weight
// vector for 3 rows; a fourth row alone took 40% of the time for 25% of the products).
constexpr int kFloatRows = 6;
#endif

template <DType kType>
void run_float(const uint8_t* panels, size_t panel_bytes, int64_t n, int64_t out_begin, int64_t out_end,
               const ActOf<kType>* rows, int64_t row_stride, int64_t n_rows, float* y, int64_t y_stride) {
  for_prepacked_panels<kFloatRows>(panel_bytes, out_begin, out_end, n_rows, y, y_stride,
                                   [&](int64_t p, int np, int64_t r0, int R, float (*out)[8 * kPanelsPerStep]) {
    const ActOf<kType>* a[kFloatRows];
    for (int r = 0; r < R; ++r) a[r] = rows + (r0 + r) * row_stride;
    for (int q = 0; q < np; ++q)
      with_rows<kFloatRows>(R, [&]<int kR>() { panel_float<kType, kR>(panels + size_t(p + q) * panel_bytes, n, a, out, q); });
  });
}

// BF16 in its own order (gemm.h, vdpbf16ps's): the panel interleaves the 8 rows by 32-element
// chunks (64 bytes a row); without vdpbf16ps, in two halves of 4 rows (prepack_float_panel).
#if defined(__AVX512BF16__)
// Each row's 16 lanes take a chunk per vdpbf16ps. R <= 2 rows a pass (16 accumulators + 8
// weight registers).
template <int R>
void panel_bf16(const uint8_t* panel, int64_t n, const uint16_t* const a[], float* const out[]) {
  __m512 acc[R][8];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < 8; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t s = 0; s < n / 32; ++s) {
    // No software prefetch: one 512-byte chunk takes only eight vdpbf16ps, and the hardware
    // prefetcher alone streamed decode 11-13% faster than prefetching 2 KiB ahead (8% faster
    // than 8 KiB ahead) on an AVX-512 BF16 EPYC (docs/PERFORMANCE.md, session 21).
    // Each weight line is read as two 256-bit halves: from DRAM, 512-bit loads streamed
    // 10-20% slower on that EPYC (Zen 4), the same bytes (session 23).
    const uint8_t* ps = panel + size_t(s) * 512;
    __m512bh w[8];
    for (int c = 0; c < 8; ++c)
      w[c] = (__m512bh)_mm512_inserti64x4(_mm512_castsi256_si512(load256(ps + 64 * c)), load256(ps + 64 * c + 32), 1);
    for (int r = 0; r < R; ++r) {
      const __m512bh av = (__m512bh)_mm512_loadu_si512(a[r] + 32 * s);
      for (int c = 0; c < 8; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], w[c], av);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < 8; ++c)
      out[r][c] = hsum(_mm256_add_ps(_mm512_castps512_ps256(acc[r][c]), _mm512_extractf32x8_ps(acc[r][c], 1)));
}

void run_bf16(const uint8_t* panels, size_t panel_bytes, int64_t n, int64_t out_begin, int64_t out_end,
              const uint8_t* act, size_t a_stride, int64_t n_rows, float* y, int64_t y_stride, void*) {
  for_prepacked_panels(panel_bytes, out_begin, out_end, n_rows, y, y_stride,
                       [&](int64_t p, int np, int64_t r0, int R, float (*out)[8 * kPanelsPerStep]) {
    for (int q = 0; q < np; ++q)
      for (int r = 0; r < R; r += 2) {
        const uint16_t* a[2];
        float* o[2];
        for (int i = 0; i < 2; ++i) {
          a[i] = reinterpret_cast<const uint16_t*>(act + size_t(r0 + std::min(r + i, R - 1)) * a_stride);
          o[i] = out[std::min(r + i, R - 1)] + 8 * q;
        }
        const uint8_t* panel = panels + size_t(p + q) * panel_bytes;
        if (R - r >= 2) panel_bf16<2>(panel, n, a, o);
        else panel_bf16<1>(panel, n, a, o);
      }
  });
}
#else
// Odd and even elements of 16 bf16 at p as f32 (8 lanes each): the high half of every dword,
// and the low half shifted up (as gemm_avx2_bf16.cpp).
inline void split_bf16(const void* p, __m256& odd, __m256& even) {
  const __m256i v = load256(p);
  odd = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(int(0xFFFF0000u))));
  even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

// The FMA emulation of gemm_avx2_bf16.cpp: per output, lanes 0..7 (a chunk's first 16
// elements) and 8..15 in two registers, odd product then even, under DAZ + FTZ for the chunk
// loop only. R rows x panel columns [C0, C0 + NC) of one half (R * NC <= 6: 12 sums). The
// activations come split already (run_bf16: per 16 elements, the 8 odd then the 8 even as f32),
// so only the weights pay the split, once for R rows. Each half of the panel is its own
// sequential stream (prepack_float_panel), so one-row decode reads it in two straight passes.
template <int R, int C0, int NC>
void panel_bf16_cols(const uint8_t* panel, int64_t n, const float* const a[], float* const out[]) {
  static_assert(C0 % 4 + NC <= 4 && R * NC <= 6, "one half of the panel, 12 sums at most");
  const uint8_t* half = panel + size_t(C0 / 4) * size_t(n) * 8;
  __m256 acc[R][NC][2];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NC; ++c) acc[r][c][0] = acc[r][c][1] = _mm256_setzero_ps();
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | 0x8040);  // FTZ (bit 15) and DAZ (bit 6)
  for (int64_t s = 0; s < n / 32; ++s) {
    const uint8_t* ps = half + size_t(s) * 256;
    if constexpr (R == 1) prefetch_part<256, 1>(ps, 0);
    for (int h = 0; h < 2; ++h) {
      for (int c = 0; c < NC; ++c) {
        __m256 wo, we;
        split_bf16(ps + 64 * (C0 % 4 + c) + 32 * h, wo, we);
        for (int r = 0; r < R; ++r) {
          const float* ar = a[r] + 32 * s + 16 * h;
          acc[r][c][h] = _mm256_fmadd_ps(wo, _mm256_loadu_ps(ar), acc[r][c][h]);
          acc[r][c][h] = _mm256_fmadd_ps(we, _mm256_loadu_ps(ar + 8), acc[r][c][h]);
        }
      }
    }
  }
  _mm_setcsr(csr);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NC; ++c) out[r][C0 + c] = hsum(_mm256_add_ps(acc[r][c][0], acc[r][c][1]));
}

// R <= 3 rows x the panel's 8 columns: one row 4 columns a pass, more rows 2.
template <int R>
void panel_bf16(const uint8_t* panel, int64_t n, const float* const a[], float* const out[]) {
  if constexpr (R == 1) {
    panel_bf16_cols<1, 0, 4>(panel, n, a, out);
    panel_bf16_cols<1, 4, 4>(panel, n, a, out);
  } else {
    panel_bf16_cols<R, 0, 2>(panel, n, a, out);
    panel_bf16_cols<R, 2, 2>(panel, n, a, out);
    panel_bf16_cols<R, 4, 2>(panel, n, a, out);
    panel_bf16_cols<R, 6, 2>(panel, n, a, out);
  }
}

// Rows a pass of run_bf16 takes: two 3-row tiles (as the other float panels).
constexpr int64_t kBf16Rows = 6;

// rows: n_rows x n floats of scratch, each activation row split as panel_bf16_cols reads it
// (exact: a bf16 is the high half of its f32).
void run_bf16(const uint8_t* panels, size_t panel_bytes, int64_t n, int64_t out_begin, int64_t out_end,
              const uint8_t* act, size_t a_stride, int64_t n_rows, float* y, int64_t y_stride, void* scratch) {
  auto* rows = static_cast<float*>(scratch);
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t k = 0; k < n; k += 16) {
      __m256 odd, even;
      split_bf16(act + size_t(r) * a_stride + size_t(k) * 2, odd, even);
      _mm256_storeu_ps(rows + r * n + k, odd);
      _mm256_storeu_ps(rows + r * n + k + 8, even);
    }
  for_prepacked_panels<kBf16Rows>(panel_bytes, out_begin, out_end, n_rows, y, y_stride,
                                  [&](int64_t p, int np, int64_t r0, int R, float (*out)[8 * kPanelsPerStep]) {
    for (int q = 0; q < np; ++q)
      for (int r = 0; r < R; r += 3) {
        const float* a[3];
        float* o[3];
        for (int i = 0; i < 3; ++i) {
          a[i] = rows + (r0 + std::min(r + i, R - 1)) * n;
          o[i] = out[std::min(r + i, R - 1)] + 8 * q;
        }
        const uint8_t* panel = panels + size_t(p + q) * panel_bytes;
        if (R - r >= 3) panel_bf16<3>(panel, n, a, o);
        else if (R - r == 2) panel_bf16<2>(panel, n, a, o);
        else panel_bf16<1>(panel, n, a, o);
      }
  });
}
#endif

}  // namespace

size_t prepacked_float_panel_bytes(DType wtype, int64_t n_in) {
  if (wtype == DType::BF16) return n_in % 32 == 0 ? size_t(n_in) * 8 * 2 : 0;
  if (!is_float(wtype) || n_in % 8 != 0) return 0;
  return size_t(n_in) * 8 * elem_bytes(wtype);
}

void prepack_float_panel(DType wtype, const uint8_t* w, size_t w_stride, int64_t n_rows, int64_t n_in, uint8_t* dst) {
#if !defined(__AVX512BF16__)
  // BF16 without vdpbf16ps: two halves (rows 0-3, rows 4-7), each the 32-element chunks of its
  // 4 rows in row order, chunk after chunk (panel_bf16_cols streams one half a pass).
  if (wtype == DType::BF16) {
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t s = 0; s < n_in / 32; ++s)
        for (int64_t c = 0; c < 4; ++c)
          std::memcpy(dst + size_t(j * n_in * 8 + s * 256 + c * 64),
                      w + size_t(std::min<int64_t>(4 * j + c, n_rows - 1)) * w_stride + size_t(s) * 64, 64);
    return;
  }
#endif
  // 8 elements of one row a piece (32 for BF16's chunks), the 8 rows' pieces in row order.
  const size_t chunk = (wtype == DType::BF16 ? 32 : 8) * elem_bytes(wtype);
  const int64_t per = wtype == DType::BF16 ? 32 : 8;
  for (int64_t s = 0; s < n_in / per; ++s)
    for (int c = 0; c < 8; ++c)
      std::memcpy(dst + (size_t(s) * 8 + size_t(c)) * chunk, w + size_t(std::min<int64_t>(c, n_rows - 1)) * w_stride + size_t(s) * chunk,
                  chunk);
}

size_t prepacked_float_scratch_bytes(DType wtype, int64_t n_in, int64_t n_rows) {
#if !defined(__AVX512BF16__)
  if (wtype == DType::BF16) return size_t(n_rows * n_in) * sizeof(float);  // the split activations
#endif
  return wtype == DType::F16 && kWidenF16Activations ? size_t(n_rows * n_in) * sizeof(float) : 0;
}

void gemm_prepacked_float(DType wtype, const uint8_t* panels, size_t panel_bytes, int64_t n_in, int64_t out_begin,
                          int64_t out_end, const uint8_t* act, size_t a_stride, int64_t n_rows, float* y,
                          int64_t y_stride, void* scratch) {
  if (wtype == DType::F32)
    return run_float<DType::F32>(panels, panel_bytes, n_in, out_begin, out_end, reinterpret_cast<const float*>(act),
                                 int64_t(a_stride / 4), n_rows, y, y_stride);
  if (wtype == DType::BF16)
    return run_bf16(panels, panel_bytes, n_in, out_begin, out_end, act, a_stride, n_rows, y, y_stride, scratch);
#if KVASIR_HAVE_AVX512_FLOAT
  // F16 activations widened once per call (exact).
  auto* rows = static_cast<float*>(scratch);
  for (int64_t r = 0; r < n_rows; ++r) {
    const auto* src = reinterpret_cast<const uint16_t*>(act + size_t(r) * a_stride);
    for (int64_t k = 0; k < n_in; k += 8) _mm256_storeu_ps(rows + r * n_in + k, _mm256_cvtph_ps(load128(src + k)));
  }
  run_float<DType::F16>(panels, panel_bytes, n_in, out_begin, out_end, rows, n_in, n_rows, y, y_stride);
#else
  run_float<DType::F16>(panels, panel_bytes, n_in, out_begin, out_end, reinterpret_cast<const uint16_t*>(act),
                        int64_t(a_stride / 2), n_rows, y, y_stride);
#endif
}

}  // namespace kvasir::kernels::simd
#endif
