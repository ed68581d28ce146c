// Packed-panel prefill kernels of the 32-element block types against Q8_0 (Q4_0, Q5_0, Q8_0),
// and the dispatch of the packed path (the k-quants live in gemm_avx2_packed_k.cpp).
//
// Codes are unsigned where the type allows (Q4_0: 0..15, Q5_0: 0..31; the offset comes back as
// offset * sum(activation block), exact in int32), so one vpmaddubsw per 4 elements x 8 columns
// x 1 row, and the int16 pair sums add up over several steps before widening:
//   Q4_0: 8 steps x 2 x 15 x 127 = 30480 < 32767;  Q5_0: 4 steps x 2 x 31 x 127 = 31496.
// Q8_0 codes are signed: |w| times sign-moved activations, widened every step.
// With AVX-512 VNNI, vpdpbusd does each step's four products straight into int32 (Q8_0's codes
// moved to unsigned, + 128, in the panel): the same exact sums.
#include "kernels/quant/simd.h"

#if KVASIR_HAVE_AVX2
#include <cstddef>

#include "kernels/quant/blocks.h"
#include "kernels/quant/gemm_avx2_packed.h"

namespace kvasir::kernels::simd {

// Defined in gemm_avx2_packed_k.cpp.
bool gemm_packed_k(const GemmTile& t, void* scratch);
size_t gemm_packed_k_scratch_bytes(DType wtype, int64_t n, int64_t n_rows);

namespace {

// Per activation (row, block): its scale and what the code offset takes away.
struct PrepQ8 {
  float da;
  int32_t corr;
};

template <int kOffset>
void prep_q8_0(const uint8_t* row, int64_t nb, PrepQ8* out) {
  const auto* a = reinterpret_cast<const BlockQ8_0*>(row);
  for (int64_t i = 0; i < nb; ++i) out[i] = {half_to_float(a[i].d), kOffset ? kOffset * sum_i8_32(a[i].qs) : 0};
}

// Panel block: 8 code vectors (4 elements x 8 columns each), then the 8 weight scales as f32.
constexpr size_t kSimplePanelBytes = 8 * 32 + 32;

template <class Block, class Codes>
void pack_simple(const uint8_t* const cols[8], int64_t i, uint8_t* dst, Codes codes) {
  __m256i c[8];
  alignas(16) uint16_t d[8];
  for (int k = 0; k < 8; ++k) {
    const Block& b = reinterpret_cast<const Block*>(cols[k])[i];
    c[k] = codes(b);
    d[k] = b.d;
  }
  store_transposed(c, dst);
  _mm256_store_ps(reinterpret_cast<float*>(dst + 256), _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d))));
}

// The float steps of one block for R rows: acc[r] = fma(dw * da[r], float(isum[r] - corr[r]), acc[r]);
// signed codes (Q8_0) have no offset to take away.
template <int R, bool kOffset>
inline void finish_block(const uint8_t* pb, const __m256i isum[R], const PrepQ8* const pr[], int64_t i, __m256 acc[R]) {
  const __m256 dw = _mm256_load_ps(reinterpret_cast<const float*>(pb + 256));
  for (int r = 0; r < R; ++r) {
    const __m256i v = kOffset ? _mm256_sub_epi32(isum[r], _mm256_set1_epi32(pr[r][i].corr)) : isum[r];
    acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(pr[r][i].da)), _mm256_cvtepi32_ps(v), acc[r]);
  }
}

// Unsigned codes: int16 pair sums accumulate over kSteps steps (see the bounds above).
template <int kOffset, int kSteps>
struct UnsignedK {
  static constexpr int kBlock = kQ;
  static constexpr size_t kPanelBytes = kSimplePanelBytes;
  using Prep = PrepQ8;
  static void prep(const uint8_t* row, int64_t nb, Prep* out) { prep_q8_0<kOffset>(row, nb, out); }

  template <int R>
  static void micro(const uint8_t* panel, int64_t nb, const uint8_t* const a[], const Prep* const pr[], float* y,
                    int64_t ys, int nc) {
    [[maybe_unused]] const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      const uint8_t* pb = panel + size_t(i) * kPanelBytes;
      __m256i isum[R];
#if KVASIR_HAVE_VNNI
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(pb + 32 * k));
        for (int r = 0; r < R; ++r)
          isum[r] = _mm256_dpbusd_epi32(k == 0 ? _mm256_setzero_si256() : isum[r], wv,
                                        bcast4(a[r] + size_t(i) * sizeof(BlockQ8_0) + 2 + 4 * k));
      }
#else
      for (int h = 0; h < 8; h += kSteps) {
        __m256i p[R];
#pragma GCC unroll 8
        for (int k = h; k < h + kSteps; ++k) {
          const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(pb + 32 * k));
          for (int r = 0; r < R; ++r) {
            const __m256i m = _mm256_maddubs_epi16(wv, bcast4(a[r] + size_t(i) * sizeof(BlockQ8_0) + 2 + 4 * k));
            p[r] = k == h ? m : _mm256_add_epi16(p[r], m);
            keep_chain(p[r]);
          }
        }
        for (int r = 0; r < R; ++r) {
          const __m256i s = _mm256_madd_epi16(p[r], ones);
          isum[r] = h == 0 ? s : _mm256_add_epi32(isum[r], s);
        }
      }
#endif
      finish_block<R, true>(pb, isum, pr, i, acc);
    }
    for (int r = 0; r < R; ++r) store_lanes(y + r * ys, acc[r], nc);
  }
};

struct Q4_0K : UnsignedK<8, 8> {
  static void pack(const uint8_t* const cols[8], int64_t i, uint8_t* dst) {
    pack_simple<BlockQ4_0>(cols, i, dst, [](const BlockQ4_0& b) { return unpack_nibbles(b.qs); });
  }
};

struct Q5_0K : UnsignedK<16, 4> {
  static void pack(const uint8_t* const cols[8], int64_t i, uint8_t* dst) {
    pack_simple<BlockQ5_0>(cols, i, dst, [](const BlockQ5_0& b) { return _mm256_or_si256(unpack_nibbles(b.qs), fifth_bits(b.qh)); });
  }
};

#if KVASIR_HAVE_VNNI
// vpdpbusd takes unsigned weights: the panel holds w + 128, an offset like Q4_0's 8 (the bound of
// UnsignedK's int16 steps does not apply: its VNNI form sums in int32).
struct Q8_0K : UnsignedK<128, 8> {
  static void pack(const uint8_t* const cols[8], int64_t i, uint8_t* dst) {
    pack_simple<BlockQ8_0>(cols, i, dst,
                           [](const BlockQ8_0& b) { return _mm256_xor_si256(load256(b.qs), _mm256_set1_epi8(char(0x80))); });
  }
};
#else
// Signed codes: |w| (shared by the rows) times the activations with w's sign moved onto them.
struct Q8_0K {
  static constexpr int kBlock = kQ;
  static constexpr size_t kPanelBytes = kSimplePanelBytes;
  using Prep = PrepQ8;
  static void prep(const uint8_t* row, int64_t nb, Prep* out) { prep_q8_0<0>(row, nb, out); }
  static void pack(const uint8_t* const cols[8], int64_t i, uint8_t* dst) {
    pack_simple<BlockQ8_0>(cols, i, dst, [](const BlockQ8_0& b) { return load256(b.qs); });
  }

  template <int R>
  static void micro(const uint8_t* panel, int64_t nb, const uint8_t* const a[], const Prep* const pr[], float* y,
                    int64_t ys, int nc) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      const uint8_t* pb = panel + size_t(i) * kPanelBytes;
      __m256i isum[R];
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(pb + 32 * k));
        const __m256i aw = _mm256_sign_epi8(wv, wv);
        for (int r = 0; r < R; ++r) {
          const __m256i av = _mm256_sign_epi8(bcast4(a[r] + size_t(i) * sizeof(BlockQ8_0) + 2 + 4 * k), wv);
          const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, av), ones);
          isum[r] = k == 0 ? s : _mm256_add_epi32(isum[r], s);
          keep_chain(isum[r]);
        }
      }
      finish_block<R, false>(pb, isum, pr, i, acc);
    }
    for (int r = 0; r < R; ++r) store_lanes(y + r * ys, acc[r], nc);
  }
};
#endif

}  // namespace

bool gemm_packed(const GemmTile& t, void* scratch) {
  switch (t.wtype) {
    case DType::Q4_0: run_packed<Q4_0K>(t, scratch); return true;
    case DType::Q5_0: run_packed<Q5_0K>(t, scratch); return true;
    case DType::Q8_0: run_packed<Q8_0K>(t, scratch); return true;
    default: return gemm_packed_k(t, scratch);
  }
}

size_t gemm_packed_scratch_bytes(DType wtype, int64_t n, int64_t n_rows) {
  switch (wtype) {
    case DType::Q4_0: return packed_scratch_bytes<Q4_0K>(n, n_rows);
    case DType::Q5_0: return packed_scratch_bytes<Q5_0K>(n, n_rows);
    case DType::Q8_0: return packed_scratch_bytes<Q8_0K>(n, n_rows);
    default: return gemm_packed_k_scratch_bytes(wtype, n, n_rows);
  }
}

}  // namespace kvasir::kernels::simd
#endif
