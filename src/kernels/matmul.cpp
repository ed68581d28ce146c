#include "kernels/matmul.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "kernels/quant/quant.h"

namespace kvasir::kernels {
namespace {

[[noreturn]] void unsupported(const char* what, DType t) {
  std::fprintf(stderr, "kvasir: %s: no kernels for type %.*s\n", what, int(dtype_name(t).size()),
               dtype_name(t).data());
  std::abort();
}

// Output rows per tile: as many weight rows as fit in ~32 KiB (L1/L2-resident while every
// activation row passes over them), at least 1, at most 64.
int64_t tile_rows(size_t w_row_bytes) {
  return std::clamp<int64_t>(int64_t((32u << 10) / std::max<size_t>(w_row_bytes, 1)), 1, 64);
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
  const VecDotFn dot = t->vec_dot;
  const size_t w_row = row_bytes(wtype, n_in);
  const size_t a_row = row_bytes(t->vec_dot_type, n_in);
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(act_q);
  const int64_t tile = tile_rows(w_row);
  for (int64_t o0 = out_begin; o0 < out_end; o0 += tile) {
    const int64_t o1 = std::min(out_end, o0 + tile);
    for (int64_t r = 0; r < n_rows; ++r) {
      const uint8_t* act = ab + size_t(r) * a_row;
      float* yr = y + r * y_stride;
      for (int64_t o = o0; o < o1; ++o) yr[o] = dot(n_in, wb + size_t(o) * w_row, act);
    }
  }
}

}  // namespace kvasir::kernels
