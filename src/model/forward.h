// The batched forward pass shared by every architecture: Batch + KvCache -> logits.
// All activations are preallocated for max_batch_tokens rows; forward() allocates nothing (a batch
// with LoRA adapters: its rows grouped by adapter, once per forward).
#pragma once
#include <cstdint>
#include <functional>
#include <array>
#include <initializer_list>
#include <utility>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/aligned_vector.h"
#include "core/huge_buffer.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/batch.h"
#include "model/kv_cache.h"
#include "model/lora.h"
#include "model/model.h"

namespace kvasir {

// Column chunks per thread of a one-to-15-row matmul pass over weight_bytes of weights
// (Forward::run_segments): as many as give each chunk min_chunk_bytes, from 1 to 16.
// gemv_stream_bench times other minimums against the default.
inline constexpr int64_t kLinearChunkMinBytes = 256 << 10;
int linear_chunks_per_thread(int64_t weight_bytes, int threads, int64_t min_chunk_bytes = kLinearChunkMinBytes);

struct ForwardOptions {
  int64_t max_batch_tokens = 512;
  int num_threads = 0;  // 0 = physical cores (when `pool` is null)
  std::shared_ptr<ThreadPool> pool = nullptr;  // threads shared with others (the engine's sampling); null: its own
};

// A forward hook (calibration: importance matrices, GPTQ/AWQ statistics): called with the F32
// input rows of every matrix product before they are converted, once per call for the matrices
// that share them (q/k/v; gate/up), and once per expert with that expert's rows.
using ActivationHook = std::function<void(std::span<const Matrix* const> weights, const float* x, int64_t rows)>;

// An attention hook (KV calibration): called per layer with the queries, keys and values as
// attention gets them (after biases, norms and RoPE): [rows][q_dim], [rows][kv_dim] twice, and
// the rows' positions.
using AttentionHook = std::function<void(int64_t layer, const float* q, const float* k, const float* v,
                                         const int32_t* positions, int64_t rows)>;

// What one forward runs: every layer and the whole output head by default. A self-speculative
// draft runs a subset of the layers (early exit, layer skipping) and may project onto a few of
// the vocabulary's rows (a head of the most frequent tokens: on a large vocabulary the head is
// most of a token's cost).
struct ForwardPlan {
  std::span<const int32_t> layers = {};  // strictly ascending layer indices; empty: all
  const Matrix* head = nullptr;          // null: the model's output matrix; else logits [head->n_out]
};

class Forward {
 public:
  Forward(const Model& model, const ForwardOptions& options);

  // PRECONDITIONS (checked, error on violation): 0 < batch.size() <= max_batch_tokens; token ids
  // in [0, n_vocab); each row's block table covers its position with ids < kv.num_blocks().
  // Writes the K/V of every row into the cache, then returns the logits of rows with
  // want_logits, in row order: [num_logit_rows][n_vocab], valid until the next call.
  Result<const float*> forward(const Batch& batch, KvCache& kv);
  // The same through a plan: only its layers write K/V (the others' cache is left as it was),
  // and logits rows are [plan.head->n_out] wide when the plan names a head.
  Result<const float*> forward(const Batch& batch, KvCache& kv, const ForwardPlan& plan);
  // The final hidden states (after the output norm) of the last forward's rows with want_hidden,
  // in row order: [n][n_embd], valid until the next call.
  const float* hidden() const { return hidden_.data(); }
  // Runs only layers [begin, end) of the batch (calibration: GPTQ quantizes one block at a time
  // over stored activations). The residual stream [T][n_embd] is read from `residual` (from the
  // token embeddings instead when begin == 0) and written back to it after layer end - 1; no
  // logits. Same preconditions as forward(), and 0 <= begin < end <= n_layers.
  Status forward_layers(const Batch& batch, KvCache& kv, int64_t begin, int64_t end, float* residual);
  // Observes every matrix product's input from now on (empty: none). Costs nothing when unset.
  void set_activation_hook(ActivationHook hook) { hook_ = std::move(hook); }
  // Observes every layer's attention inputs from now on (empty: none). Costs nothing when unset.
  void set_attention_hook(AttentionHook hook) { attention_hook_ = std::move(hook); }
  // LoRA: the adapters a batch's sequences name by slot (Batch::seq_adapter); the vector is the
  // caller's and may change between forwards, never during one. Null: no slots.
  using LoraSlots = std::vector<std::shared_ptr<const LoraAdapter>>;
  void set_lora_slots(const LoraSlots* slots) { lora_slots_ = slots; }
  // The rotary embedding layer il applies to its queries and keys.
  kernels::RopeParams rope_params(int64_t il) const;

  int64_t max_batch_tokens() const { return max_tokens_; }
  ThreadPool& pool() { return pool_; }

 private:
  // One weight matrix applied to the shared input of a linear() call.
  struct LinearJob {
    const Matrix* w;
    float* y;  // [T][w->n_out]
  };
  // The rows of one adapter (indices into the x/y of a linear() call).
  struct LoraGroup {
    const LoraAdapter* adapter;
    std::vector<int32_t> rows;
  };
  // One matrix over some converted activation rows: y[r * w->n_out + o] for r < rows.
  struct Segment {
    const Matrix* w;
    const kernels::PackedMatrix* packed;  // null: the file's layout
    const uint8_t* act;
    int64_t rows;
    float* y;
  };
  // Converted activations of one input, per distinct vec_dot_type of the matrices that read it.
  struct ActRegions {
    std::array<DType, 3> type{};
    std::array<uint8_t*, 3> base{};
    std::array<size_t, 3> row_bytes{};
    int n = 0;
    const uint8_t* for_matrix(const Matrix& w, int64_t row) const;
  };
  // A run of rows of one sequence at consecutive positions: attention converts each KV block
  // once for all of them (at most kernels::kAttentionTileRows rows).
  struct AttnTile {
    int64_t row, n_rows;
  };

  Status validate(const Batch& batch, const KvCache& kv) const;
  void embed(const Batch& batch);
  void run_layers(const Batch& batch, KvCache& kv, int64_t begin, int64_t end);
  void attention_block(int64_t il, const Batch& batch, KvCache& kv);
  void ffn_block(int64_t il, int64_t T);
  // The mixture-of-experts FFN: route every row, group the (row, expert) slots by expert, apply
  // each chosen expert once to all of its rows, then sum each row's experts in rank order.
  void moe_block(int64_t il, int64_t T);
  void output_logits(const Batch& batch, const Matrix& head);
  // For each job: y[T][w.n_out] = x[T][w.n_in] · Wᵀ. All matrices share x (same n_in): the
  // activations are converted once per vec_dot_type and one parallel pass covers every output.
  // Rows of adapted sequences also get their adapter's delta (lora_groups_, or `groups`).
  void linear(std::initializer_list<LinearJob> jobs, const float* x, int64_t T);
  void linear(std::initializer_list<LinearJob> jobs, const float* x, int64_t T, std::span<const LoraGroup> groups);
  // Groups the batch's rows by adapter (empty when no sequence names one).
  void build_lora_groups(const Batch& batch);
  // One group's delta on one job's matrix: its rows' A x at lora_u_[u], added to segment `seg`.
  struct LoraUnit {
    const LoraFactors* f;
    const LoraGroup* g;
    size_t seg, u;
  };
  // Fills lora_units_ for the jobs whose matrix an adapter of `groups` adapts, with A x computed.
  void prepare_lora(std::initializer_list<LinearJob> jobs, const float* x, std::span<const LoraGroup> groups);
  // Converts T rows of x once per vec_dot_type that `readers` need, into act_q_.
  ActRegions convert(std::span<const Matrix* const> readers, const float* x, int64_t T);
  // One parallel pass over the output columns of every segment (the pool claims chunks, so
  // segments of different row counts still share the threads).
  // `lora`: low-rank deltas added to the columns as they are computed.
  void run_segments(const std::vector<Segment>& segs, std::span<const LoraUnit> lora = {});
  // Applies expert e's matrix of each (mats, y) pair to its rows of the grouped input
  // (rows [moe_offsets_[e], moe_offsets_[e + 1])), for every expert that has rows.
  void expert_linear(std::initializer_list<std::pair<const std::vector<Matrix>*, float*>> jobs, const float* x);
  // out[t] = rms_norm(x[t]) * weight for T rows of n floats (in place allowed).
  void norm_rows(const float* x, const Vector& weight, int64_t T, int64_t n, float* out);
  // fn(begin, end) over rows [0, T): on the pool when T is large enough to pay for the sync.
  void for_rows(int64_t T, const std::function<void(int64_t, int64_t)>& fn);
  // Consecutive rows of one sequence grouped into attention tiles (split further when they are
  // fewer than the threads).
  void build_tiles(const Batch& batch);
  // The attention of one layer over the tiles: each (tile, run of KV heads) on one thread, or,
  // when those units are too few to keep the threads busy and some tile reaches several key
  // spans (one long sequence decoding), each (tile, run, span) on its own and merged after.
  void attend_tiles(const Batch& batch, const kernels::KvLayerView& view, const kernels::AttentionParams& ap);
  // Repacks (once, at construction) every matrix whose type has a decode layout.
  void pack_weights();
  const kernels::PackedMatrix* packed_for(const Matrix& w) const;

  const Model& model_;
  const ModelConfig& c_;
  int64_t max_tokens_;
  std::shared_ptr<ThreadPool> pool_owner_;
  ThreadPool& pool_;

  // Activations, one row per batch token.
  AlignedVector<float> x_;        // [T][n_embd] residual stream
  AlignedVector<float> xn_;       // [T][n_embd] normed input of a block
  AlignedVector<float> q_;        // [T][q_dim]
  AlignedVector<float> k_, v_;    // [T][kv_dim]
  AlignedVector<float> att_;      // [T][q_dim]
  AlignedVector<float> proj_;     // [T][n_embd] block output before the residual add
  AlignedVector<float> gate_;     // [T][n_ff]
  AlignedVector<float> up_;       // [T][n_ff]
  AlignedVector<float> rope_cs_;  // [T][rope_dims] cos then sin of each rotated pair
  AlignedVector<uint8_t> act_q_;  // activations converted to the weights' vec_dot_types
  AlignedVector<float> attn_scratch_;  // per thread
  int64_t attn_scratch_floats_ = 0;
  std::vector<AttnTile> tiles_;
  // attend_tiles split by span: one partial per (tile, span), tile i's at span_begin_[i] on.
  struct SpanUnit {
    int64_t tile, span;
  };
  std::vector<SpanUnit> span_units_;
  std::vector<int64_t> span_begin_;
  std::vector<kernels::AttentionPartial> span_parts_;
  AlignedVector<float> attn_partials_;  // grows to the largest split step, then is reused
  // Repacked copies keyed by the file data they come from (a tied output shares its embedding's).
  HugeBuffer packed_memory_;  // the packed matrices' bytes (declared first: outlives packed_)
  std::unordered_map<const void*, kernels::PackedMatrix> packed_;
  // Mixture of experts: k slots per row (slot t * k + r is row t's r-th expert).
  AlignedVector<float> router_;    // [T][n_experts] router logits
  AlignedVector<float> xg_;        // [T * k][n_embd] normed rows gathered in expert order
  AlignedVector<float> exp_out_;   // [T * k][n_embd] expert outputs in expert order
  std::vector<int32_t> moe_ids_, moe_order_, moe_pos_;  // [T * k]
  std::vector<float> moe_w_;                             // [T * k]
  std::vector<int64_t> moe_offsets_;                     // [n_experts + 1]
  std::vector<Segment> segments_;
  AlignedVector<float> logits_;   // [T][n_vocab]
  std::vector<int64_t> logit_rows_;
  AlignedVector<float> hidden_;   // [rows with want_hidden][n_embd], sized on first use
  ActivationHook hook_;
  AttentionHook attention_hook_;
  const LoraSlots* lora_slots_ = nullptr;
  std::vector<LoraGroup> lora_groups_;       // this forward's rows by adapter
  std::vector<LoraGroup> lora_head_groups_;  // the same over the rows that want logits
  std::vector<LoraUnit> lora_units_;         // the current linear() call's
  std::vector<int64_t> lora_row_start_;      // its units' first rows (prefix sums)
  AlignedVector<float> lora_u_;              // A x of every (job, group) row
};

}  // namespace kvasir
