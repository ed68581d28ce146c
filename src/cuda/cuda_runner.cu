// CudaRunner: the forward pass of model/forward.cpp as kernels on one stream. Per step: the
// batch's ints go up in one copy, every layer runs on device memory, and only the logits (and
// hidden states) of the rows that want them come back.
#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "core/thread_pool.h"
#include "cuda/cuda_runner.h"
#include "cuda/kernels.cuh"

namespace kvasir::cuda {
namespace {

// Device allocations owned together, freed at once.
class DeviceArena {
 public:
  DeviceArena() = default;
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;
  ~DeviceArena() {
    for (void* p : blocks_) cudaFree(p);
  }
  Result<void*> alloc(size_t bytes) {
    void* p = nullptr;
    KV_CUDA_TRY(cudaMalloc(&p, std::max<size_t>(bytes, 256)));
    blocks_.push_back(p);
    return p;
  }
  template <typename T>
  Result<T*> alloc_n(size_t n) {
    auto p = alloc(n * sizeof(T));
    if (!p) return Error{p.error(), p.error_code()};
    return static_cast<T*>(*p);
  }

 private:
  std::vector<void*> blocks_;
};

// Pinned host memory that grows to the largest request.
template <typename T>
class PinnedBuffer {
 public:
  ~PinnedBuffer() { if (data_) cudaFreeHost(data_); }
  Status reserve(size_t n) {
    if (n <= size_) return {};
    if (data_) cudaFreeHost(data_);
    data_ = nullptr;
    size_ = 0;
    KV_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&data_), n * sizeof(T)));
    size_ = n;
    return {};
  }
  T* data() { return data_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

struct LayerDevice {
  DeviceMatrix wq, wk, wv, wo, gate, up, down;
  const float *attn_norm = nullptr, *ffn_norm = nullptr, *post_attn = nullptr, *post_ffn = nullptr;
  const float *q_norm = nullptr, *k_norm = nullptr, *bq = nullptr, *bk = nullptr, *bv = nullptr;
};

bool embed_supported(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q8_0: case DType::Q4_0:
    case DType::Q5_0: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: return true;
    default: return false;
  }
}

class CudaRunner final : public runtime::ModelRunner {
 public:
  CudaRunner(const Model& model, const runtime::RunnerOptions& o) : model_(model), c_(model.config()), o_(o) {}
  ~CudaRunner() override {
    clear_graphs();
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status init();
  const runtime::RunnerInfo& info() const override { return info_; }
  Result<const float*> forward(const Batch& batch) override;
  const float* hidden() const override { return hidden_host_.empty() ? nullptr : hidden_host_.data(); }
  // A block of a layer: its K for every KV head, then its V ([kv_head][slot][dim] each, F16).
  size_t kv_block_bytes(int64_t layer) const override {
    return layer >= 0 && layer < c_.n_layers ? 2 * block_halves() * sizeof(__half) : 0;
  }
  std::string kv_format() const override { return info_.identity + "|bs" + std::to_string(o_.kv.block_size) + "|f16"; }
  Status export_kv(int64_t layer, std::span<const int32_t> blocks, uint8_t* dst) const override;
  Status import_kv(int64_t layer, std::span<const int32_t> blocks, const uint8_t* src) override;

 private:
  struct Job {
    const DeviceMatrix* w;
    float* y;
  };
  Result<DeviceMatrix> upload_matrix(const Matrix& m, const char* what, bool as_embedding = false);
  Result<const float*> upload_vector(const Vector& v);
  Status check_supported() const;
  // What a captured step depends on besides the buffers: rows, logit rows, hidden rows, and the
  // attention's spans (full and sliding-window layers).
  struct Shape {
    int64_t rows, logit_rows, hidden_rows;
    int spans, spans_swa;
    bool operator==(const Shape&) const = default;
  };
  struct ShapeHash {
    size_t operator()(const Shape& s) const {
      return size_t(s.rows) * 1000003u ^ size_t(s.logit_rows) * 10007u ^ size_t(s.hidden_rows) * 101u ^
             size_t(s.spans) * 7u ^ size_t(s.spans_swa);
    }
  };
  static constexpr int64_t kGraphRows = 64;
  static constexpr size_t kMaxGraphs = 256;
  // Every kernel of one step, on stream_, reading the batch's ints from ints_dev_.
  void enqueue(const Shape& shape, int max_keys, int max_keys_swa);
  Status run_graph_or_direct(const Shape& shape, int max_keys, int max_keys_swa);
  void clear_graphs();
  size_t block_halves() const { return size_t(o_.kv.block_size) * size_t(c_.kv_dim()); }
  Status check_kv_io(int64_t layer, std::span<const int32_t> blocks) const;
  // The activation conversions a group of matrices that share an input reads.
  ActTargets targets_for(std::initializer_list<const DeviceMatrix*> group);
  // y = x · Wᵀ for each job, from activations already converted (targets_for their group).
  void matmuls(std::initializer_list<Job> jobs, int64_t T);
  // Converts x (T rows of the jobs' n_in) for the jobs, then runs them.
  void linear(std::initializer_list<Job> jobs, const float* x, int64_t T);
  ActBuffers& act_for(DType t);

  const Model& model_;
  const ModelConfig& c_;
  runtime::RunnerOptions o_;
  runtime::RunnerInfo info_;
  cudaStream_t stream_ = nullptr;
  DeviceArena arena_;
  std::unordered_map<const void*, DeviceMatrix> uploaded_;  // by file data: a tied head shares the embedding
  DeviceMatrix token_embd_, output_;
  const float* output_norm_ = nullptr;
  const float* rope_factors_ = nullptr;
  std::vector<LayerDevice> layers_;
  std::vector<KvLayerDevice> kv_;
  // Activations, max_batch_tokens rows each.
  float* x_[2] = {};  // the residual stream, ping-ponged at each fused junction
  float *xn_ = nullptr, *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *att_ = nullptr, *proj_ = nullptr;
  float *gate_ = nullptr, *up_ = nullptr, *logits_ = nullptr, *hidden_dev_ = nullptr;
  float* attn_partials_ = nullptr;
  std::vector<std::pair<DType, ActBuffers>> acts_;
  // The batch's ints: tokens, positions, table offsets, logit rows, hidden rows, then the tables.
  PinnedBuffer<int32_t> ints_host_;
  int32_t* ints_dev_ = nullptr;
  size_t ints_capacity_ = 0;
  PinnedBuffer<float> logits_host_;
  std::vector<float> hidden_host_;
  std::vector<int32_t> logit_rows_, hidden_rows_;  // per step, kept to reuse their memory
  std::unordered_map<Shape, cudaGraphExec_t, ShapeHash> graphs_;
  bool graphs_enabled_ = true;
};

Result<DeviceMatrix> CudaRunner::upload_matrix(const Matrix& m, const char* what, bool as_embedding) {
  if (as_embedding ? !embed_supported(m.type) : !matmul_supports(m.type, m.n_in))
    return Error{std::string("the CUDA runner does not take ") + what + " of type " + std::string(dtype_name(m.type)) + " and row length " +
                     std::to_string(m.n_in) + " (it takes F32, F16, BF16, Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K)",
                 ErrorCode::invalid_argument};
  if (auto it = uploaded_.find(m.data); it != uploaded_.end()) return it->second;
  DeviceMatrix d{m.type, nullptr, m.n_in, m.n_out, row_bytes(m.type, m.n_in)};
  auto p = arena_.alloc(d.row_bytes * size_t(m.n_out));
  if (!p) return Error{p.error(), p.error_code()};
  KV_CUDA_TRY(cudaMemcpy(*p, m.data, d.row_bytes * size_t(m.n_out), cudaMemcpyHostToDevice));
  d.data = static_cast<const uint8_t*>(*p);
  uploaded_.emplace(m.data, d);
  return d;
}

Result<const float*> CudaRunner::upload_vector(const Vector& v) {
  if (v.empty()) return static_cast<const float*>(nullptr);
  auto p = arena_.alloc_n<float>(v.size());
  if (!p) return Error{p.error(), p.error_code()};
  KV_CUDA_TRY(cudaMemcpy(*p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
  return static_cast<const float*>(*p);
}

Status CudaRunner::check_supported() const {
  if (c_.moe()) return Error{"the CUDA runner does not run mixture-of-experts models yet", ErrorCode::invalid_argument};
  if (!attention_supports(int(c_.n_heads), int(c_.n_kv_heads), int(c_.head_dim)))
    return Error{"the CUDA runner's attention takes up to 16 query heads per KV head and head sizes up to 256 (this "
                 "model: " + std::to_string(c_.n_heads) + "/" + std::to_string(c_.n_kv_heads) + " heads of " +
                     std::to_string(c_.head_dim) + ")",
                 ErrorCode::invalid_argument};
  if (c_.rope_dims > c_.head_dim || c_.rope_dims % 2) return Error{"rope dimensions must be even and fit a head"};
  if (o_.kv.block_size < 1 || o_.kv.block_size > 256) return Error{"the KV block size must be in [1, 256]", ErrorCode::invalid_argument};
  if (o_.max_batch_tokens < 1) return Error{"max_batch_tokens must be >= 1", ErrorCode::invalid_argument};
  if (!o_.kv.layer_types.empty() && int64_t(o_.kv.layer_types.size()) != c_.n_layers)
    return Error{"the KV layer types do not name every layer", ErrorCode::invalid_argument};
  for (int64_t il = 0; il < c_.n_layers; ++il)
    if (o_.kv.layer_type(il) != DType::F16)
      return Error{"the CUDA runner keeps K and V in F16 (--kv-type f16)", ErrorCode::invalid_argument};
  return {};
}

#define KV_TRY_ASSIGN(lhs, expr)                   \
  do {                                             \
    auto kv_r_ = (expr);                           \
    if (!kv_r_) return Error{kv_r_.error(), kv_r_.error_code()}; \
    lhs = *kv_r_;                                  \
  } while (0)

Status CudaRunner::init() {
  if (auto s = check_supported(); !s) return s;
  KV_CUDA_TRY(cudaSetDevice(o_.device));
  KV_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  const char* graphs = std::getenv("KVASIR_CUDA_GRAPHS");  // 0: launch every kernel (A/B timing)
  graphs_enabled_ = !(graphs && std::string(graphs) == "0");
  const Weights& w = model_.weights();
  KV_TRY_ASSIGN(token_embd_, upload_matrix(w.token_embd, "the token embedding", true));
  KV_TRY_ASSIGN(output_, upload_matrix(w.output, "the output matrix"));
  KV_TRY_ASSIGN(output_norm_, upload_vector(w.output_norm));
  KV_TRY_ASSIGN(rope_factors_, upload_vector(w.rope_freqs));
  int64_t max_in = c_.n_embd;
  for (const LayerWeights& l : w.layers) {
    LayerDevice d;
    KV_TRY_ASSIGN(d.wq, upload_matrix(l.wq, "attn_q"));
    KV_TRY_ASSIGN(d.wk, upload_matrix(l.wk, "attn_k"));
    KV_TRY_ASSIGN(d.wv, upload_matrix(l.wv, "attn_v"));
    KV_TRY_ASSIGN(d.wo, upload_matrix(l.wo, "attn_output"));
    KV_TRY_ASSIGN(d.gate, upload_matrix(l.w_gate, "ffn_gate"));
    KV_TRY_ASSIGN(d.up, upload_matrix(l.w_up, "ffn_up"));
    KV_TRY_ASSIGN(d.down, upload_matrix(l.w_down, "ffn_down"));
    KV_TRY_ASSIGN(d.attn_norm, upload_vector(l.attn_norm));
    KV_TRY_ASSIGN(d.ffn_norm, upload_vector(l.ffn_norm));
    KV_TRY_ASSIGN(d.post_attn, upload_vector(c_.post_norms ? l.post_attn_norm : Vector{}));
    KV_TRY_ASSIGN(d.post_ffn, upload_vector(c_.post_norms ? l.post_ffn_norm : Vector{}));
    KV_TRY_ASSIGN(d.q_norm, upload_vector(c_.qk_norm ? l.q_norm : Vector{}));
    KV_TRY_ASSIGN(d.k_norm, upload_vector(c_.qk_norm ? l.k_norm : Vector{}));
    KV_TRY_ASSIGN(d.bq, upload_vector(c_.qkv_bias ? l.bq : Vector{}));
    KV_TRY_ASSIGN(d.bk, upload_vector(c_.qkv_bias ? l.bk : Vector{}));
    KV_TRY_ASSIGN(d.bv, upload_vector(c_.qkv_bias ? l.bv : Vector{}));
    max_in = std::max({max_in, l.wo.n_in, l.w_down.n_in});
    layers_.push_back(d);
  }
  // A group that shares an input (q/k/v, gate/up) is converted into at most two activation types.
  for (const LayerDevice& l : layers_)
    for (auto group : {std::array{&l.wq, &l.wk, &l.wv}, std::array{&l.gate, &l.up, &l.up}}) {
      DType seen[3];
      int n = 0;
      for (const DeviceMatrix* m : group)
        if (std::find(seen, seen + n, act_type_of(m->type)) == seen + n) seen[n++] = act_type_of(m->type);
      if (n > 2) return Error{"the CUDA runner takes at most two activation types per matrix group", ErrorCode::invalid_argument};
    }
  // Activations and their converted copies, one set per activation type the model reads.
  const size_t T = size_t(o_.max_batch_tokens);
  KV_TRY_ASSIGN(x_[0], arena_.alloc_n<float>(T * c_.n_embd));
  KV_TRY_ASSIGN(x_[1], arena_.alloc_n<float>(T * c_.n_embd));
  KV_TRY_ASSIGN(xn_, arena_.alloc_n<float>(T * c_.n_embd));
  KV_TRY_ASSIGN(q_, arena_.alloc_n<float>(T * c_.q_dim()));
  KV_TRY_ASSIGN(k_, arena_.alloc_n<float>(T * c_.kv_dim()));
  KV_TRY_ASSIGN(v_, arena_.alloc_n<float>(T * c_.kv_dim()));
  KV_TRY_ASSIGN(att_, arena_.alloc_n<float>(T * c_.q_dim()));
  KV_TRY_ASSIGN(proj_, arena_.alloc_n<float>(T * c_.n_embd));
  KV_TRY_ASSIGN(gate_, arena_.alloc_n<float>(T * c_.n_ff));
  KV_TRY_ASSIGN(up_, arena_.alloc_n<float>(T * c_.n_ff));
  KV_TRY_ASSIGN(logits_, arena_.alloc_n<float>(T * c_.n_vocab));
  KV_TRY_ASSIGN(hidden_dev_, arena_.alloc_n<float>(T * c_.n_embd));
  KV_TRY_ASSIGN(attn_partials_, arena_.alloc_n<float>(attention_partial_floats(int64_t(T), int(c_.n_heads), int(c_.head_dim))));
  if (auto st = attention_prepare(int(c_.n_heads), int(c_.n_kv_heads), int(c_.head_dim)); !st) return st;
  std::vector<DType> act_types;
  for (const LayerDevice& l : layers_)
    for (const DeviceMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down}) act_types.push_back(act_type_of(m->type));
  act_types.push_back(act_type_of(output_.type));
  for (DType t : act_types) {
    if (std::any_of(acts_.begin(), acts_.end(), [&](const auto& a) { return a.first == t; })) continue;
    ActBuffers b;
    const bool quant = t == DType::Q8_0 || t == DType::Q8_K;
    if (quant) {
      KV_TRY_ASSIGN(b.q, arena_.alloc_n<int8_t>(T * max_in));
      KV_TRY_ASSIGN(b.d, arena_.alloc_n<float>(T * max_in / 32 + 1));
      KV_TRY_ASSIGN(b.s, arena_.alloc_n<int>(T * max_in / 16 + 1));
    } else {
      KV_TRY_ASSIGN(b.f, arena_.alloc_n<float>(T * max_in));
    }
    acts_.push_back({t, b});
  }
  // The paged KV storage.
  const uint64_t per_token = uint64_t(c_.n_layers) * uint64_t(c_.kv_dim()) * 2 * sizeof(__half);
  int64_t blocks = 0;
  KV_TRY_ASSIGN(blocks, runtime::kv_blocks_for(per_token, o_.kv.block_size, o_.kv.n_blocks, o_.kv.mem_bytes,
                                               o_.default_kv_tokens, 4ull << 30));
  const size_t layer_halves = size_t(blocks) * size_t(o_.kv.block_size) * size_t(c_.kv_dim());
  __half* kv = nullptr;
  KV_TRY_ASSIGN(kv, arena_.alloc_n<__half>(layer_halves * 2 * size_t(c_.n_layers)));
  for (int64_t il = 0; il < c_.n_layers; ++il)
    kv_.push_back({kv + size_t(2 * il) * layer_halves, kv + size_t(2 * il + 1) * layer_halves, int(o_.kv.block_size),
                   int(c_.n_kv_heads), int(c_.head_dim)});
  info_ = {.n_vocab = c_.n_vocab,
           .n_embd = c_.n_embd,
           .n_ctx_train = c_.n_ctx_train,
           .max_batch_tokens = o_.max_batch_tokens,
           .n_kv_blocks = blocks,
           .block_size = o_.kv.block_size,
           .n_layers = c_.n_layers,
           .identity = model_.identity() + "#cuda"};
  KV_CUDA_TRY(cudaDeviceSynchronize());
  return {};
}

ActBuffers& CudaRunner::act_for(DType t) {
  for (auto& [type, b] : acts_)
    if (type == t) return b;
  return acts_.front().second;  // unreachable: every matrix's act type was allocated at init
}

ActTargets CudaRunner::targets_for(std::initializer_list<const DeviceMatrix*> group) {
  ActTargets t;
  for (const DeviceMatrix* m : group) {
    const DType a = act_type_of(m->type);
    if (std::find(t.type, t.type + t.n, a) != t.type + t.n) continue;
    t.type[t.n] = a;
    t.buf[t.n++] = act_for(a);  // at most two: the model's groups are checked at init
  }
  return t;
}

void CudaRunner::matmuls(std::initializer_list<Job> jobs, int64_t T) {
  for (const Job& j : jobs) matmul(*j.w, act_for(act_type_of(j.w->type)), T, j.y, j.w->n_out, stream_);
}

void CudaRunner::linear(std::initializer_list<Job> jobs, const float* x, int64_t T) {
  DType done[3];
  int n_done = 0;
  for (const Job& j : jobs) {
    const DType t = act_type_of(j.w->type);
    if (std::find(done, done + n_done, t) != done + n_done) continue;
    quantize_act(t, x, T, j.w->n_in, act_for(t), stream_);
    done[n_done++] = t;
  }
  matmuls(jobs, T);
}

void CudaRunner::enqueue(const Shape& shape, int max_keys, int max_keys_swa) {
  const int64_t T = shape.rows;
  const int32_t* d_tokens = ints_dev_;
  const RowsDevice rows{ints_dev_ + T, ints_dev_ + 2 * T, ints_dev_ + 3 * T + shape.logit_rows + shape.hidden_rows};
  const int32_t* d_lrows = ints_dev_ + 3 * T;
  const int32_t* d_hrows = d_lrows + shape.logit_rows;
  const float eps = c_.norm_eps;
  int cur = 0;  // x_[cur] holds the residual stream
  // A junction: x_[cur] plus y (post-normed) into the other buffer, normed by w into xn_ and the
  // next group's activations.
  auto junction = [&](const float* y, const float* post, const float* w, const ActTargets& targets) {
    norm_convert(x_[cur], y, post, w, eps, T, c_.n_embd, y ? x_[cur ^ 1] : nullptr, xn_, targets, stream_);
    if (y) cur ^= 1;
  };
  embed_rows(token_embd_, d_tokens, T, c_.embed_scale, x_[cur], stream_);
  const LayerDevice& first = layers_[0];
  junction(nullptr, nullptr, first.attn_norm, targets_for({&first.wq, &first.wk, &first.wv}));
  for (int64_t il = 0; il < c_.n_layers; ++il) {
    const LayerDevice& l = layers_[size_t(il)];
    const bool swa = c_.layer_is_swa[size_t(il)];
    matmuls({{&l.wq, q_}, {&l.wk, k_}, {&l.wv, v_}}, T);
    QkvPrepParams qp{.n_heads = int(c_.n_heads), .n_kv_heads = int(c_.n_kv_heads), .head_dim = int(c_.head_dim),
                     .bq = l.bq, .bk = l.bk, .bv = l.bv, .q_norm = l.q_norm, .k_norm = l.k_norm, .eps = eps,
                     .rope = {.mode = c_.rope_mode == kernels::RopeMode::Normal ? 0 : 1,
                              .rot_dims = int(c_.rope_dims),
                              .base = swa ? c_.rope_base_swa : c_.rope_base,
                              .freq_scale = c_.rope_freq_scale,
                              .mscale = c_.rope_mscale,
                              .factors = rope_factors_}};
    qkv_prepare(q_, k_, v_, T, qp, rows, kv_[size_t(il)], stream_);
    attention(q_, T, swa ? max_keys_swa : max_keys, rows, kv_[size_t(il)],
              {.n_heads = int(c_.n_heads), .window = swa ? int(c_.sliding_window) : 0, .scale = c_.attn_scale,
               .softcap = c_.attn_softcap},
              attn_partials_, att_, stream_);
    linear({{&l.wo, proj_}}, att_, T);
    junction(proj_, l.post_attn, l.ffn_norm, targets_for({&l.gate, &l.up}));
    matmuls({{&l.gate, gate_}, {&l.up, up_}}, T);
    gated_act_convert(gate_, up_, T, c_.n_ff, c_.ffn_act == FfnAct::GeluTanh, targets_for({&l.down}), stream_);
    matmuls({{&l.down, proj_}}, T);
    if (il + 1 < c_.n_layers) {
      const LayerDevice& n = layers_[size_t(il + 1)];
      junction(proj_, l.post_ffn, n.attn_norm, targets_for({&n.wq, &n.wk, &n.wv}));
    } else {
      junction(proj_, l.post_ffn, nullptr, {});
    }
  }
  const float* x = x_[cur];
  const int64_t nh = shape.hidden_rows, nl = shape.logit_rows;
  if (nh > 0) {
    rms_norm_rows(x, d_hrows, nh, c_.n_embd, output_norm_, eps, hidden_dev_, stream_);
  }
  if (nl > 0) {
    rms_norm_rows(x, d_lrows, nl, c_.n_embd, output_norm_, eps, xn_, stream_);
    linear({{&output_, logits_}}, xn_, nl);
    if (c_.final_logit_softcap > 0) softcap(logits_, nl * c_.n_vocab, c_.final_logit_softcap, stream_);
  }
}

// Decode-sized steps replay a graph captured for their shape: one launch instead of a dozen per
// layer. Larger steps (prefill chunks) launch directly.
Status CudaRunner::run_graph_or_direct(const Shape& shape, int max_keys, int max_keys_swa) {
  if (!graphs_enabled_ || shape.rows > kGraphRows) {
    enqueue(shape, max_keys, max_keys_swa);
    return {};
  }
  auto it = graphs_.find(shape);
  if (it == graphs_.end()) {
    if (graphs_.size() >= kMaxGraphs) clear_graphs();
    cudaGraph_t graph = nullptr;
    KV_CUDA_TRY(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    enqueue(shape, max_keys, max_keys_swa);
    KV_CUDA_TRY(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    KV_CUDA_TRY(e);
    it = graphs_.emplace(shape, exec).first;
  }
  KV_CUDA_TRY(cudaGraphLaunch(it->second, stream_));
  return {};
}

void CudaRunner::clear_graphs() {
  for (auto& [shape, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
}

Status CudaRunner::check_kv_io(int64_t layer, std::span<const int32_t> blocks) const {
  if (layer < 0 || layer >= c_.n_layers)
    return Error{"KV layer " + std::to_string(layer) + " outside the model's " + std::to_string(c_.n_layers),
                 ErrorCode::invalid_argument};
  for (int32_t b : blocks)
    if (b < 0 || b >= info_.n_kv_blocks)
      return Error{"KV block " + std::to_string(b) + " outside the pool of " + std::to_string(info_.n_kv_blocks),
                   ErrorCode::invalid_argument};
  return {};
}

Status CudaRunner::export_kv(int64_t layer, std::span<const int32_t> blocks, uint8_t* dst) const {
  if (auto s = check_kv_io(layer, blocks); !s) return s;
  KV_CUDA_TRY(cudaSetDevice(o_.device));
  const size_t n = block_halves() * sizeof(__half);
  const KvLayerDevice& kv = kv_[size_t(layer)];
  for (size_t i = 0; i < blocks.size(); ++i) {
    KV_CUDA_TRY(cudaMemcpyAsync(dst + 2 * i * n, kv.k + size_t(blocks[i]) * block_halves(), n, cudaMemcpyDeviceToHost, stream_));
    KV_CUDA_TRY(cudaMemcpyAsync(dst + (2 * i + 1) * n, kv.v + size_t(blocks[i]) * block_halves(), n, cudaMemcpyDeviceToHost,
                                stream_));
  }
  KV_CUDA_TRY(cudaStreamSynchronize(stream_));
  return {};
}

Status CudaRunner::import_kv(int64_t layer, std::span<const int32_t> blocks, const uint8_t* src) {
  if (auto s = check_kv_io(layer, blocks); !s) return s;
  KV_CUDA_TRY(cudaSetDevice(o_.device));
  const size_t n = block_halves() * sizeof(__half);
  const KvLayerDevice& kv = kv_[size_t(layer)];
  for (size_t i = 0; i < blocks.size(); ++i) {
    KV_CUDA_TRY(cudaMemcpyAsync(kv.k + size_t(blocks[i]) * block_halves(), src + 2 * i * n, n, cudaMemcpyHostToDevice, stream_));
    KV_CUDA_TRY(cudaMemcpyAsync(kv.v + size_t(blocks[i]) * block_halves(), src + (2 * i + 1) * n, n, cudaMemcpyHostToDevice,
                                stream_));
  }
  KV_CUDA_TRY(cudaStreamSynchronize(stream_));
  return {};
}

Result<const float*> CudaRunner::forward(const Batch& b) {
  if (auto s = validate_batch(b, {.max_tokens = o_.max_batch_tokens, .n_vocab = c_.n_vocab,
                                  .block_size = o_.kv.block_size, .num_blocks = info_.n_kv_blocks});
      !s)
    return Error{s.error()};
  KV_CUDA_TRY(cudaSetDevice(o_.device));
  const int64_t T = b.size();
  // The batch's ints in one upload.
  std::vector<int32_t>& logit_rows = logit_rows_;
  std::vector<int32_t>& hidden_rows = hidden_rows_;
  logit_rows.clear();
  hidden_rows.clear();
  for (int64_t t = 0; t < T; ++t) {
    if (b.want_logits[size_t(t)]) logit_rows.push_back(int32_t(t));
    if (b.wants_hidden(t)) hidden_rows.push_back(int32_t(t));
  }
  const size_t table_ints = b.block_ids.size();
  const size_t n_ints = size_t(3 * T) + logit_rows.size() + hidden_rows.size() + table_ints;
  if (auto s = ints_host_.reserve(n_ints); !s) return Error{s.error()};
  if (n_ints > ints_capacity_) {
    auto p = arena_.alloc_n<int32_t>(n_ints * 2);
    if (!p) return Error{p.error(), p.error_code()};
    ints_dev_ = *p, ints_capacity_ = n_ints * 2;
    clear_graphs();  // they name the old buffer
  }
  int32_t* h = ints_host_.data();
  int32_t* tokens = h;
  int32_t* pos = tokens + T;
  int32_t* offsets = pos + T;
  int32_t* lrows = offsets + T;
  int32_t* hrows = lrows + logit_rows.size();
  int32_t* tables = hrows + hidden_rows.size();
  std::copy(b.block_ids.begin(), b.block_ids.end(), tables);  // the batch's tables are one flat array already
  for (int64_t t = 0; t < T; ++t) {
    tokens[t] = b.tokens[size_t(t)];
    pos[t] = b.positions[size_t(t)];
    offsets[t] = b.block_start[size_t(b.seq_index[size_t(t)])];
  }
  std::copy(logit_rows.begin(), logit_rows.end(), lrows);
  std::copy(hidden_rows.begin(), hidden_rows.end(), hrows);
  KV_CUDA_TRY(cudaMemcpyAsync(ints_dev_, h, n_ints * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  // The most keys a row attends, in full-attention and in sliding-window layers.
  int max_keys = 1, max_keys_swa = 1;
  for (int64_t t = 0; t < T; ++t) {
    const int p = b.positions[size_t(t)] + 1;
    max_keys = std::max(max_keys, p);
    max_keys_swa = std::max(max_keys_swa, c_.sliding_window > 0 ? std::min(p, int(c_.sliding_window)) : p);
  }
  const Shape shape{T, int64_t(logit_rows.size()), int64_t(hidden_rows.size()), attention_spans_for(max_keys),
                    attention_spans_for(max_keys_swa)};
  if (auto st = run_graph_or_direct(shape, max_keys, max_keys_swa); !st) return Error{st.error(), st.error_code()};
  const int64_t nh = shape.hidden_rows, nl = shape.logit_rows;
  if (auto st = logits_host_.reserve(size_t(std::max<int64_t>(nl, 1) * c_.n_vocab)); !st) return Error{st.error()};
  if (nh > 0) {
    hidden_host_.resize(size_t(nh * c_.n_embd));
    KV_CUDA_TRY(cudaMemcpyAsync(hidden_host_.data(), hidden_dev_, hidden_host_.size() * sizeof(float),
                                cudaMemcpyDeviceToHost, stream_));
  }
  if (nl > 0)
    KV_CUDA_TRY(cudaMemcpyAsync(logits_host_.data(), logits_, size_t(nl * c_.n_vocab) * sizeof(float),
                                cudaMemcpyDeviceToHost, stream_));
  KV_CUDA_TRY(cudaGetLastError());
  KV_CUDA_TRY(cudaStreamSynchronize(stream_));
  return static_cast<const float*>(logits_host_.data());
}

}  // namespace

bool built_with_cuda() { return true; }

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = std::string("no CUDA device: ") + cudaGetErrorString(e);
    cudaGetLastError();  // clear it
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device";
  return n;
}

Result<std::string> describe_device(int device) {
  std::string why;
  const int n = device_count(&why);
  if (n == 0) return Error{why, ErrorCode::unavailable};
  if (device < 0 || device >= n) return Error{"CUDA device " + std::to_string(device) + " does not exist", ErrorCode::invalid_argument};
  cudaDeviceProp p{};
  KV_CUDA_TRY(cudaGetDeviceProperties(&p, device));
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s, %d SMs, %.1f GiB, sm_%d%d", p.name, p.multiProcessorCount,
                double(p.totalGlobalMem) / double(1ull << 30), p.major, p.minor);
  return std::string(buf);
}

Result<double> copy_bandwidth_gbps(int device) {
  if (auto d = describe_device(device); !d) return Error{d.error(), d.error_code()};
  KV_CUDA_TRY(cudaSetDevice(device));
  const size_t bytes = size_t(2) << 30;
  void *a = nullptr, *b = nullptr;
  KV_CUDA_TRY(cudaMalloc(&a, bytes));
  if (cudaMalloc(&b, bytes) != cudaSuccess) {
    cudaFree(a);
    return Error{"CUDA: out of memory for the copy probe", ErrorCode::exhausted};
  }
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaMemset(a, 1, bytes);
  cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);  // warm-up
  std::vector<float> ms;
  for (int r = 0; r < 5; ++r) {
    cudaEventRecord(start);
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float t = 0;
    cudaEventElapsedTime(&t, start, stop);
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(a);
  cudaFree(b);
  KV_CUDA_TRY(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  return 2.0 * double(bytes) / (double(ms[2]) * 1e-3) / 1e9;  // read + write, the median run
}

Result<std::unique_ptr<runtime::ModelRunner>> create_runner(const Model& model, const runtime::RunnerOptions& o) {
  std::string why;
  const int n = device_count(&why);
  if (n == 0) return Error{why, ErrorCode::unavailable};
  if (o.device < 0 || o.device >= n)
    return Error{"CUDA device " + std::to_string(o.device) + " does not exist (" + std::to_string(n) + " present)",
                 ErrorCode::invalid_argument};
  auto r = std::make_unique<CudaRunner>(model, o);
  if (auto s = r->init(); !s) return Error{s.error(), s.error_code()};
  return std::unique_ptr<runtime::ModelRunner>(std::move(r));
}

}  // namespace kvasir::cuda
