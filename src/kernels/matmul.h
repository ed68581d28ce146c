// Matrix-vector / matrix-matrix products on weights kept in their file type (tiles: quant/gemm.h).
// y[r][o] = dot(W row o, x row r): W is [n_out x n_in] (row o at byte o * row_bytes(wtype, n_in)),
// activations are first converted once per row to the weight type's vec_dot_type.
#pragma once
#include <cstdint>
#include <memory>

#include "core/dtype.h"

namespace kvasir::kernels {

// Converts n_rows rows of n floats (contiguous) to `vec_dot_type`, row after row. `out` holds
// n_rows * row_bytes(vec_dot_type, n) bytes. n must be a multiple of that type's block size.
void quantize_activations(DType vec_dot_type, const float* x, int64_t n_rows, int64_t n, void* out);

// For every activation row r in [0, n_rows) and output o in [out_begin, out_end):
//   y[r * y_stride + o] = dot(W row o, act row r)
// `act_q` is the output of quantize_activations(vec_dot_type of wtype, ..., n_in, ...). Pure:
// touches only those y entries, so threads may split [0, n_out) between them. Batch invariant:
// y[r][o] is bitwise the same for any n_rows, any range holding o, and any thread (gemm.h).
void matmul_rows(DType wtype, const void* w, int64_t n_in, int64_t out_begin, int64_t out_end,
                 const void* act_q, int64_t n_rows, float* y, int64_t y_stride);

// A weight matrix repacked once at load: panels of 8 rows interleaved so that every vector lane
// of the kernels is one row (llama.cpp repacks Q4_0 the same way). Same bytes per panel as the
// file's blocks; the file's pages are then no longer read by the matmuls (packed_pays says when
// the file layout is still used). Types with a packed form: Q4_0, Q8_0, Q4_K, Q6_K; the others
// give an empty PackedMatrix.
struct PackedMatrix {
  DType type = DType::F32;
  int64_t n_in = 0, n_out = 0;
  std::shared_ptr<uint8_t[]> data;  // [ceil(n_out / 8) panels][panel_bytes], 64-byte aligned
  size_t panel_bytes = 0;
  bool empty() const { return !data; }
};

// Allocates the packed form (empty when the type has none), then pack_panels fills panels
// [p_begin, p_end) from the file's rows (threads may split the panels).
PackedMatrix pack_matrix_alloc(DType wtype, int64_t n_in, int64_t n_out);
// The bytes of the packed form (0 when the type has none), and the packed form placed in memory
// the caller owns and keeps alive (64-byte aligned, that many bytes): a model's matrices in one
// mapping with huge pages, so that streaming them costs few TLB entries.
size_t pack_matrix_bytes(DType wtype, int64_t n_in, int64_t n_out);
PackedMatrix pack_matrix_in(DType wtype, int64_t n_in, int64_t n_out, uint8_t* memory);
void pack_panels(PackedMatrix& pm, const void* w, int64_t p_begin, int64_t p_end);

// Whether matmul_rows_packed is the faster path for n_rows activation rows: always for the 4-bit
// types; for Q8_0 up to decode-sized batches (prefill chunks repack per call, as fast there).
bool packed_pays(const PackedMatrix& pm, int64_t n_rows);

// matmul_rows on a packed matrix: bitwise the same outputs (the contract of quant/gemm.h).
void matmul_rows_packed(const PackedMatrix& pm, int64_t out_begin, int64_t out_end, const void* act_q,
                        int64_t n_rows, float* y, int64_t y_stride);

}  // namespace kvasir::kernels
