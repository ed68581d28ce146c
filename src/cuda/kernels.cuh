// The backend's kernels, as host-side launchers on a stream. Every pointer is device memory;
// shapes are checked by the caller (CudaRunner at load, the tests by construction).
#pragma once
#include "cuda/device.cuh"

namespace kvasir::cuda {

// Activations converted for the matrices that read them: codes, scales and 16-sums for the
// quantized types, rounded floats for the float ones. Each buffer holds rows x n_in entries.
struct ActBuffers {
  int8_t* q = nullptr;
  float* d = nullptr;  // rows x n_in / 32
  int* s = nullptr;    // rows x n_in / 16
  float* f = nullptr;  // rows x n_in
};

// Up to two activation types a group of matrices reads, with their buffers: what the fused
// norm and activation kernels convert their output into.
struct ActTargets {
  int n = 0;
  DType type[2] = {};
  ActBuffers buf[2] = {};
};

// The activation type a weight type's products read (its vec_dot_type, as on the CPU).
DType act_type_of(DType weight);
// Whether the matrix product kernels take this weight type and row length.
bool matmul_supports(DType weight, int64_t n_in);
// Converts T rows of x [T][n_in] to act type `act` (Q8_0, Q8_K, F32, F16 or BF16).
void quantize_act(DType act, const float* x, int64_t T, int64_t n_in, const ActBuffers& out, cudaStream_t s);
// y[t * ldy + o] = dot(row o of w, activation row t) for t < T, o < w.n_out; the activations
// are w's act type, converted by quantize_act. The arithmetic of one (t, o) does not depend on T.
// unroll: the units a thread has in flight (1, 2 or 4; 0: launch_tuning()'s).
void matmul(const DeviceMatrix& w, const ActBuffers& act, int64_t T, float* y, int64_t ldy, cudaStream_t s,
            int unroll = 0);

// out[i] = rms_norm(x[rows ? rows[i] : i]) * w for n_rows rows of n floats (sum of squares in
// double, as the CPU's).
void rms_norm_rows(const float* x, const int32_t* rows, int64_t n_rows, int64_t n, const float* w, float eps,
                   float* out, cudaStream_t s);
// The junction between blocks, fused: x_out[t] = x_in[t] + (post ? rms_norm(y[t]) * post : y[t])
// (x_in[t] alone when y is null; x_out may then be null), then, when w is set,
// xn[t] = rms_norm(x_out[t]) * w converted into `targets` (and kept as floats in xn when xn is
// set). x_in and x_out must differ: every block reads the whole row.
void norm_convert(const float* x_in, const float* y, const float* post, const float* w, float eps, int64_t T, int64_t n,
                  float* x_out, float* xn, const ActTargets& targets, cudaStream_t s);
// gate = act(gate) * up over T rows of n, converted into `targets` too.
void gated_act_convert(float* gate, const float* up, int64_t T, int64_t n, bool gelu, const ActTargets& targets,
                       cudaStream_t s);
// The embedding rows of T tokens, times scale.
void embed_rows(const DeviceMatrix& table, const int32_t* tokens, int64_t T, float scale, float* out, cudaStream_t s);
// x[i] = cap * tanh(x[i] / cap).
void softcap(float* x, int64_t n, float cap, cudaStream_t s);

struct RopeDevice {
  int mode = 0;  // 0: pairs (2i, 2i+1); 1: NeoX pairs (i, i + dims/2)
  int rot_dims = 0;
  float base = 10000.f, freq_scale = 1.f, mscale = 1.f;
  const float* factors = nullptr;  // [rot_dims / 2] or null
};
// A paged KV layer in device memory: K and V each [blocks][kv_heads][block_size][head_dim], F16.
struct KvLayerDevice {
  __half* k = nullptr;
  __half* v = nullptr;
  int block_size = 16, n_kv_heads = 0, head_dim = 0;
};
// Where each batch row's K/V goes and what it attends: its position and its sequence's block
// table (table_offset[t] indexes `tables`).
struct RowsDevice {
  const int32_t* pos = nullptr;
  const int32_t* table_offset = nullptr;
  const int32_t* tables = nullptr;
};
// Per row: q/k/v biases, QK-norm, RoPE, then K and V stored to the row's slot (F16).
struct QkvPrepParams {
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr;
  const float *q_norm = nullptr, *k_norm = nullptr;
  float eps = 1e-6f;
  RopeDevice rope;
};
void qkv_prepare(float* q, float* k, float* v, int64_t T, const QkvPrepParams& p, const RowsDevice& rows,
                 const KvLayerDevice& kv, cudaStream_t s);
// Causal attention of T rows over their sequences' cached keys (0..pos, or the last `window`):
// out [T][n_heads * head_dim]. scale multiplies q·k; softcap > 0 caps the scores. Each row's keys
// are split into at most kAttentionMaxSpans spans of at least kAttentionSpanMin keys, computed
// apart into `partials` (attention_partial_floats) and merged.
struct AttentionDeviceParams {
  int n_heads = 0;
  int window = 0;
  float scale = 1.f, softcap = 0.f;
};
inline constexpr int kAttentionSpanMin = 64;
inline constexpr int kAttentionMaxSpans = 32;
inline size_t attention_partial_floats(int64_t T, int n_heads, int head_dim) {
  return size_t(T) * size_t(n_heads) * kAttentionMaxSpans * size_t(head_dim + 2);
}
// max_keys: the most keys any row attends (from its position and the window).
void attention(const float* q, int64_t T, int max_keys, const RowsDevice& rows, const KvLayerDevice& kv,
               const AttentionDeviceParams& p, float* partials, float* out, cudaStream_t s);
// Raises the span kernel's shared-memory limit where this head layout needs more than 48 KiB.
Status attention_prepare(int n_heads, int n_kv_heads, int head_dim);
// Whether the attention kernel takes this head layout (query heads per KV head, head size).
bool attention_supports(int n_heads, int n_kv_heads, int head_dim);
// The spans a row attending n_keys keys is split into (the span kernel's grid depth).
int attention_spans_for(int n_keys);

}  // namespace kvasir::cuda
