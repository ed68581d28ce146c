// The packed-panel GEMM driver (internal; include only under KVASIR_HAVE_AVX2). For a batch of
// activation rows, 8 weight rows at a time are unpacked once into a panel where every 32-byte
// vector holds the codes of 4 consecutive elements of each of the 8 columns (lane c = column c,
// after an 8x8 transpose of 4-byte groups). The micro-kernel then broadcasts 4 activation bytes
// and a single vpmaddubsw multiplies them into all 8 columns, so the int32 lane of column c
// gathers that column's exact block dot directly, with no horizontal reduction, and the float
// steps of the contract (gemm.h) run one lane per column: bitwise what the direct kernels give.
#pragma once
#include <algorithm>
#include <cstdint>

#include "kernels/quant/gemm_avx2.h"

namespace kvasir::kernels::simd {

// v[k] (k = 0..7) holds 8 dwords, one per column; afterwards v[k] holds dword k of every column.
inline void transpose8x8_epi32(__m256i v[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_permute2x128_si256(u[k], u[k + 4], 0x20);
    v[k + 4] = _mm256_permute2x128_si256(u[k], u[k + 4], 0x31);
  }
}

// Stores 8 columns' 32 codes each (codes[c], element order) as 8 transposed vectors at dst.
inline void store_transposed(__m256i codes[8], uint8_t* dst) {
  transpose8x8_epi32(codes);
  for (int k = 0; k < 8; ++k) _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 32 * k), codes[k]);
}

inline __m256i bcast4(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// An empty asm the compiler cannot see through: keeps a running int16/int32 sum a chain in one
// register instead of letting reassociation hoist every product first (which spills).
inline void keep_chain(__m256i& v) { asm("" : "+x"(v)); }

inline size_t round64(size_t b) { return (b + 63) & ~size_t(63); }

// Packed weights per column block: about half of a core's L2, so that the panels and the
// activation rows a row group reads stay cached.
inline constexpr size_t kPackedBudget = 256u << 10;
inline constexpr int64_t kRowGroup = 4;

// Walks repacked weights (PackedMatrix): outputs [out_begin, out_end) of n_rows activation rows,
// panels in blocks that stay in L2 while every row group of kRowGroup rows passes over them.
// panel(p, r0, R, acc) fills acc[0..R) with panel p's 8 lanes for rows r0..r0+R-1.
template <class PanelFn>
void for_prepacked_panels(size_t panel_bytes, int64_t out_begin, int64_t out_end, int64_t n_rows, float* y,
                          int64_t y_stride, PanelFn&& panel) {
  const int64_t first = out_begin / 8, last = (out_end - 1) / 8;
  const int64_t per_block = std::max<int64_t>(1, int64_t(kPackedBudget / panel_bytes));
  for (int64_t p0 = first; p0 <= last; p0 += per_block) {
    const int64_t p1 = std::min(last + 1, p0 + per_block);
    for (int64_t r0 = 0; r0 < n_rows; r0 += kRowGroup) {
      const int R = int(std::min<int64_t>(kRowGroup, n_rows - r0));
      for (int64_t p = p0; p < p1; ++p) {
        const int lo = int(std::max<int64_t>(out_begin - 8 * p, 0)), hi = int(std::min<int64_t>(out_end - 8 * p, 8));
        __m256 acc[kRowGroup];
        panel(p, r0, R, acc);
        for (int r = 0; r < R; ++r) {
          alignas(32) float tmp[8];
          _mm256_store_ps(tmp, acc[r]);
          float* yr = y + (r0 + r) * y_stride + 8 * p;
          for (int c = lo; c < hi; ++c) yr[c] = tmp[c];
        }
      }
    }
  }
}

// K: the type's kernel policy. K::kBlock elements per block, K::kPanelBytes per packed block
// of a panel, K::Prep per activation (row, block) computed once per call, K::pack(cols, i, dst)
// and K::micro<R>(panel, nb, act rows, prep rows, y, y_stride, n_cols).
template <class K>
size_t packed_scratch_bytes(int64_t n, int64_t n_rows) {
  const int64_t nb = n / K::kBlock;
  const size_t panel = size_t(nb) * K::kPanelBytes;
  const size_t panels = std::max<size_t>(1, kPackedBudget / panel);
  return round64(size_t(n_rows * nb) * sizeof(typename K::Prep)) + panels * panel + 64;
}

template <class K>
void run_packed(const GemmTile& t, void* scratch) {
  using Prep = typename K::Prep;
  const int64_t nb = t.n / K::kBlock;
  auto* prep = static_cast<Prep*>(scratch);
  uint8_t* packed = static_cast<uint8_t*>(scratch) + round64(size_t(t.n_rows * nb) * sizeof(Prep));
  const size_t panel_bytes = size_t(nb) * K::kPanelBytes;
  const int64_t max_panels = int64_t(std::max<size_t>(1, kPackedBudget / panel_bytes));
  for (int64_t r = 0; r < t.n_rows; ++r) K::prep(t.a + size_t(r) * t.a_stride, nb, prep + r * nb);

  for (int64_t c0 = 0; c0 < t.n_cols; c0 += 8 * max_panels) {
    const int64_t n_panels = std::min(max_panels, (t.n_cols - c0 + 7) / 8);
    for (int64_t p = 0; p < n_panels; ++p) {
      const int64_t first = c0 + 8 * p, valid = std::min<int64_t>(8, t.n_cols - first);
      const uint8_t* cols[8];
      for (int c = 0; c < 8; ++c) cols[c] = t.w + size_t(first + std::min<int64_t>(c, valid - 1)) * t.w_stride;
      uint8_t* dst = packed + size_t(p) * panel_bytes;
      for (int64_t i = 0; i < nb; ++i) K::pack(cols, i, dst + size_t(i) * K::kPanelBytes);
    }
    for (int64_t r0 = 0; r0 < t.n_rows; r0 += kRowGroup) {
      const int R = int(std::min<int64_t>(kRowGroup, t.n_rows - r0));
      const uint8_t* a[kRowGroup];
      const Prep* pr[kRowGroup];
      for (int r = 0; r < kRowGroup; ++r) {
        const int64_t rr = r0 + std::min(r, R - 1);
        a[r] = t.a + size_t(rr) * t.a_stride;
        pr[r] = prep + rr * nb;
      }
      for (int64_t p = 0; p < n_panels; ++p) {
        const uint8_t* panel = packed + size_t(p) * panel_bytes;
        const int nc = int(std::min<int64_t>(8, t.n_cols - c0 - 8 * p));
        float* y = t.y + r0 * t.y_stride + c0 + 8 * p;
        switch (R) {
          case 1: K::template micro<1>(panel, nb, a, pr, y, t.y_stride, nc); break;
          case 2: K::template micro<2>(panel, nb, a, pr, y, t.y_stride, nc); break;
          case 3: K::template micro<3>(panel, nb, a, pr, y, t.y_stride, nc); break;
          default: K::template micro<4>(panel, nb, a, pr, y, t.y_stride, nc); break;
        }
      }
    }
  }
}

}  // namespace kvasir::kernels::simd
