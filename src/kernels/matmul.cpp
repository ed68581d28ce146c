#include "kernels/matmul.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "kernels/quant/gemm.h"
#include "kernels/quant/quant.h"
#include "kernels/quant/simd.h"
#if KVASIR_HAVE_AVX2
#include "kernels/quant/gemm_avx2.h"
#endif

namespace kvasir::kernels {
namespace {

[[noreturn]] void unsupported(const char* what, DType t) {
  std::fprintf(stderr, "kvasir: %s: no kernels for type %.*s\n", what, int(dtype_name(t).size()),
               dtype_name(t).data());
  std::abort();
}

// Q8_0's packed-at-load kernel is ahead up to decode-sized batches (no repacking per call: 1.37x
// at 16 rows, ~1.05x at 64 in a single-thread run over the small shape's matrices); for prefill
// chunks (512 rows) repacking per call costs nothing that shows and both run alike. With VNNI
// the packed-at-load kernel walks two panels per 512-bit register and wins at every size
// (1.1B Q8_0 pp512 1.45x over repacking per call).
constexpr int64_t kQ8_0PackedMaxRows = KVASIR_HAVE_VNNI ? INT64_MAX : 128;

// Per-thread scratch of the tile kernels (packed panels, widened activations): grows to the
// largest request once, then every matmul reuses it; nothing is allocated per token.
void* thread_scratch(size_t bytes) {
  thread_local std::unique_ptr<uint8_t[]> buf;
  thread_local size_t cap = 0;
  if (bytes + 64 > cap) {
    cap = bytes + 64;
    buf.reset(new uint8_t[cap]);
  }
  auto p = reinterpret_cast<uintptr_t>(buf.get());
  return reinterpret_cast<void*>((p + 63) & ~uintptr_t(63));
}

}  // namespace

void quantize_activations(DType vec_dot_type, const float* x, int64_t n_rows, int64_t n, void* out) {
  const QuantTraits* t = quant_traits(vec_dot_type);
  if (!t || !t->quantize_row_fast) unsupported("quantize_activations", vec_dot_type);
  const size_t out_row = row_bytes(vec_dot_type, n);
  auto* dst = static_cast<uint8_t*>(out);
  for (int64_t r = 0; r < n_rows; ++r) t->quantize_row_fast(x + r * n, dst + size_t(r) * out_row, n);
}

void matmul_rows(DType wtype, const void* w, int64_t n_in, int64_t out_begin, int64_t out_end,
                 const void* act_q, int64_t n_rows, float* y, int64_t y_stride) {
  const QuantTraits* t = quant_traits(wtype);
  if (!t || !t->vec_dot) unsupported("matmul_rows", wtype);
  if (out_begin >= out_end || n_rows <= 0) return;
  const size_t w_row = row_bytes(wtype, n_in);
  GemmTile tile{.wtype = wtype,
                .n = n_in,
                .w = static_cast<const uint8_t*>(w) + size_t(out_begin) * w_row,
                .w_stride = w_row,
                .n_cols = out_end - out_begin,
                .a = static_cast<const uint8_t*>(act_q),
                .a_stride = row_bytes(t->vec_dot_type, n_in),
                .n_rows = n_rows,
                .y = y + out_begin,
                .y_stride = y_stride};
  if (gemm_has_simd(wtype)) gemm_simd(tile, thread_scratch(gemm_scratch_bytes(wtype, n_in, n_rows)));
  else gemm_ref(tile);
}

size_t pack_matrix_bytes(DType wtype, int64_t n_in, int64_t n_out) {
#if KVASIR_HAVE_AVX2
  const size_t panel = simd::prepacked_panel_bytes(wtype, n_in);
  return panel == 0 || n_out <= 0 ? 0 : (size_t((n_out + 7) / 8) * panel + 63) & ~size_t(63);
#else
  (void)wtype, (void)n_in, (void)n_out;
  return 0;
#endif
}

PackedMatrix pack_matrix_in(DType wtype, int64_t n_in, int64_t n_out, uint8_t* memory) {
  PackedMatrix pm;
  if (pack_matrix_bytes(wtype, n_in, n_out) == 0 || !memory) return pm;
#if KVASIR_HAVE_AVX2
  pm.type = wtype;
  pm.n_in = n_in;
  pm.n_out = n_out;
  pm.panel_bytes = simd::prepacked_panel_bytes(wtype, n_in);
  pm.data = std::shared_ptr<uint8_t[]>(std::shared_ptr<uint8_t[]>(), memory);  // not owned
#endif
  return pm;
}

PackedMatrix pack_matrix_alloc(DType wtype, int64_t n_in, int64_t n_out) {
  const size_t bytes = pack_matrix_bytes(wtype, n_in, n_out);
  if (bytes == 0) return {};
  std::shared_ptr<uint8_t[]> owner(static_cast<uint8_t*>(std::aligned_alloc(64, bytes)), [](uint8_t* p) { std::free(p); });
  PackedMatrix pm = pack_matrix_in(wtype, n_in, n_out, owner.get());
  pm.data = std::move(owner);
  return pm;
}

void pack_panels(PackedMatrix& pm, const void* w, int64_t p_begin, int64_t p_end) {
#if KVASIR_HAVE_AVX2
  const size_t w_row = row_bytes(pm.type, pm.n_in);
  for (int64_t p = p_begin; p < p_end; ++p)
    simd::prepack_panel(pm.type, static_cast<const uint8_t*>(w) + size_t(8 * p) * w_row, w_row,
                        std::min<int64_t>(8, pm.n_out - 8 * p), pm.n_in, pm.data.get() + size_t(p) * pm.panel_bytes);
#else
  (void)pm, (void)w, (void)p_begin, (void)p_end;
#endif
}

bool packed_pays(const PackedMatrix& pm, int64_t n_rows) {
  return !pm.empty() && (pm.type != DType::Q8_0 || n_rows <= kQ8_0PackedMaxRows);
}

void matmul_rows_packed(const PackedMatrix& pm, int64_t out_begin, int64_t out_end, const void* act_q,
                        int64_t n_rows, float* y, int64_t y_stride) {
#if KVASIR_HAVE_AVX2
  if (out_begin >= out_end || n_rows <= 0) return;
  const DType at = quant_traits(pm.type)->vec_dot_type;
  simd::gemm_prepacked(pm.type, pm.data.get(), pm.panel_bytes, pm.n_in, out_begin, out_end,
                       static_cast<const uint8_t*>(act_q), row_bytes(at, pm.n_in), n_rows, y, y_stride,
                       thread_scratch(simd::prepacked_scratch_bytes(pm.type, pm.n_in, n_rows)));
#else
  (void)pm, (void)out_begin, (void)out_end, (void)act_q, (void)n_rows, (void)y, (void)y_stride;
  std::abort();  // pack_matrix_alloc never returns a non-empty matrix here
#endif
}

}  // namespace kvasir::kernels
