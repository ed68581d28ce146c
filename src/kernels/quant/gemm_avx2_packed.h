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
#include "kernels/quant/simd.h"

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

#if KVASIR_HAVE_VNNI && defined(__GNUC__) && !defined(__clang__)
// GCC 12 warns inside its own AVX-512 headers (their "undefined" upper halves); nothing of ours.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#if KVASIR_HAVE_VNNI
// Building blocks of the two-panel kernels: lanes 0..7 from panel p, 8..15 from panel p + 1.
inline __m512i pair256(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_zextsi256_si512(lo), hi, 1); }
inline __m512i load_pair(const uint8_t* p0, const uint8_t* p1) { return pair256(load256(p0), load256(p1)); }
// 8 fp16 at p0 and 8 at p1, widened (exact).
inline __m512 load_pair_half(const uint8_t* p0, const uint8_t* p1) {
  return _mm512_cvtph_ps(_mm256_set_m128i(load128(p1), load128(p0)));
}
inline __m512i bcast4_512(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
#endif

// Software prefetch of the panels kPrefetchAhead bytes ahead of the block being read: hardware
// prefetch alone leaves DRAM idle between blocks in one-row decode. A block's kernel calls
// prefetch_part for k = 0..kParts-1; together they cover all kBlock bytes (a part left
// uncovered, such as a Q6_K block's high bits, halved Q6_K decode speed).
inline constexpr size_t kPrefetchAhead = 2048;
template <size_t kBlock, int kParts>
inline void prefetch_part(const uint8_t* pb, int k) {
  constexpr size_t kStep = (kBlock + kParts - 1) / kParts;
  const char* p = reinterpret_cast<const char*>(pb) + kPrefetchAhead + kStep * size_t(k);
  for (size_t o = 0; o < kStep; o += 64) prefetch_line(p + o);
}

inline size_t round64(size_t b) { return (b + 63) & ~size_t(63); }

// Packed weights per column block: about half of a core's L2, so that the panels and the
// activation rows a row group reads stay cached.
inline constexpr size_t kPackedBudget = 256u << 10;
// Rows the per-call packed kernels (run_packed) take at once.
inline constexpr int64_t kRowGroup = 4;

// Panels one call of a panel function covers: where AVX-512 VNNI is compiled in, two adjacent
// panels side by side in 512-bit registers (lanes 0..7 panel p, 8..15 panel p + 1), so a
// broadcast activation feeds 16 columns per instruction.
inline constexpr int kPanelsPerStep = KVASIR_HAVE_VNNI ? 2 : 1;

// Pairs pay from 5 rows on; decode (1-3 rows) streams one panel at a time, which measured
// 3-10% faster there (two panels' streams at once read memory less evenly), and so does a
// 4-row speculative verify step (Gemma 3 270M's layers 4.8-5.0 ms against 5.3-6.5 with pairs,
// 3 interleaved runs; docs/PERFORMANCE.md, session 34).
inline constexpr int64_t kPairMinRows = 5;
// Rows the packed-at-load kernels take at once (each panel block is decoded once for them).
inline constexpr int64_t kPanelRowGroup = KVASIR_HAVE_VNNI ? 8 : 4;

// Walks repacked weights (PackedMatrix): outputs [out_begin, out_end) of n_rows activation rows,
// panels in blocks that stay in L2 while every row group of kRows rows passes over them.
// panel(p, np, r0, R, out) writes out[r][8q + c] = column c of panel p + q (q < np <=
// kPanelsPerStep) for rows r0..r0+R-1.
template <int64_t kRows = kPanelRowGroup, class PanelFn>
void for_prepacked_panels(size_t panel_bytes, int64_t out_begin, int64_t out_end, int64_t n_rows, float* y,
                          int64_t y_stride, PanelFn&& panel) {
  const int64_t first = out_begin / 8, last = (out_end - 1) / 8;
  const int step = n_rows >= kPairMinRows ? kPanelsPerStep : 1;
  const int64_t fit = std::max<int64_t>(1, int64_t(kPackedBudget / panel_bytes));
  const int64_t per_block = (fit + step - 1) / step * step;
  for (int64_t p0 = first; p0 <= last; p0 += per_block) {
    const int64_t p1 = std::min(last + 1, p0 + per_block);
    for (int64_t r0 = 0; r0 < n_rows; r0 += kRows) {
      const int R = int(std::min<int64_t>(kRows, n_rows - r0));
      for (int64_t p = p0; p < p1; p += step) {
        const int np = int(std::min<int64_t>(step, p1 - p));
        alignas(64) float out[kRows][8 * kPanelsPerStep];
        panel(p, np, r0, R, out);
        for (int q = 0; q < np; ++q) {
          const int64_t pq = p + q;
          const int lo = int(std::max<int64_t>(out_begin - 8 * pq, 0)), hi = int(std::min<int64_t>(out_end - 8 * pq, 8));
          for (int r = 0; r < R; ++r) {
            float* yr = y + (r0 + r) * y_stride + 8 * pq;
            for (int c = lo; c < hi; ++c) yr[c] = out[r][8 * q + c];
          }
        }
      }
    }
  }
}

// One panel (one(acc0)) or two (two(acc0, acc1)) for R rows, stored into out as
// for_prepacked_panels wants them; acc0 / acc1: panel p's / p + 1's 8 lanes per row.
template <int R, class One, class Two>
void run_panels(int np, float (*out)[8 * kPanelsPerStep], One&& one, [[maybe_unused]] Two&& two) {
  __m256 acc[2][R];
  if (kPanelsPerStep == 2 && np == 2) two(acc[0], acc[1]);
  else one(acc[0]);
  for (int q = 0; q < np; ++q)
    for (int r = 0; r < R; ++r) _mm256_store_ps(out[r] + 8 * q, acc[q][r]);
}

// Calls f.template operator()<R>() for R = 1..kMax (larger R: kMax).
template <int kMax = int(kPanelRowGroup), int kR = 1, class F>
void with_rows(int R, F&& f) {
  if constexpr (kR == kMax) {
    return f.template operator()<kR>();
  } else {
    if (R == kR) return f.template operator()<kR>();
    return with_rows<kMax, kR + 1>(R, f);
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
