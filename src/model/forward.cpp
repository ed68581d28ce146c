#include "model/forward.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <unordered_set>

#include "kernels/attention.h"
#include "kernels/lora.h"
#include "kernels/matmul.h"
#include "kernels/moe.h"
#include "kernels/ops.h"
#include "kernels/quant/quant.h"

namespace kvasir {
namespace {

// Column chunks per thread of a matmul pass: small enough that a thread slowed by the OS or by
// the step's serial parts costs little idle time at the join (`kvasir batch` A/B, 6 rounds:
// 16 medians ~4% faster than 4, within this machine's noise; 32 no better).
constexpr int kLinearChunksPerThread = 16;
// From 16 rows on, fewer and larger chunks: every chunk's kernel call prepares each activation
// block again (scale, code-offset sum), ~6% of a 32-row decode step at 16 chunks a thread
// (batched decode x32 +7-9%, A/B with batched_decode_bench).
constexpr int kLinearChunksPerThreadBatched = 4;
constexpr int64_t kBatchedRows = 16;

// Rows below which per-row kernels run on the calling thread: a pool round trip costs more.
constexpr int64_t kParallelRows = 4;

// The distinct vec_dot_types of matrices that share an input, in first-seen order (at most 3).
struct ActTypes {
  std::array<DType, 3> type{};
  int n = 0;
  int index_of(DType t) {
    for (int i = 0; i < n; ++i)
      if (type[size_t(i)] == t) return i;
    type[size_t(n)] = t;
    return n++;
  }
};

DType act_type_of(const Matrix& w) { return kernels::quant_traits(w.type)->vec_dot_type; }

// Bytes of converted activations one row of a linear() group needs.
size_t act_row_bytes(std::initializer_list<const Matrix*> group) {
  ActTypes types;
  size_t bytes = 0;
  for (const Matrix* w : group) {
    const int before = types.n;
    const DType t = act_type_of(*w);
    if (types.index_of(t) == before) bytes += row_bytes(t, w->n_in) + 64;
  }
  return bytes;
}

}  // namespace

Forward::Forward(const Model& model, const ForwardOptions& o)
    : model_(model),
      c_(model.config()),
      max_tokens_(std::max<int64_t>(1, o.max_batch_tokens)),
      pool_owner_(o.pool ? o.pool : std::make_shared<ThreadPool>(o.num_threads > 0 ? o.num_threads : ThreadPool::default_threads())),
      pool_(*pool_owner_) {
  const size_t T = size_t(max_tokens_);
  x_.resize(T * c_.n_embd);
  xn_.resize(T * c_.n_embd);
  q_.resize(T * c_.q_dim());
  k_.resize(T * c_.kv_dim());
  v_.resize(T * c_.kv_dim());
  att_.resize(T * c_.q_dim());
  proj_.resize(T * c_.n_embd);
  // A MoE layer's gate/up rows are (row, expert) slots: k per row.
  const int64_t k = c_.n_experts_used;
  const size_t ff_row = size_t(std::max(c_.n_ff, k * c_.n_ff_exp));
  gate_.resize(T * ff_row);
  up_.resize(T * ff_row);
  if (c_.moe()) {
    const size_t S = T * size_t(k);
    router_.resize(T * c_.n_experts);
    xg_.resize(S * c_.n_embd);
    exp_out_.resize(S * c_.n_embd);
    moe_ids_.resize(S);
    moe_order_.resize(S);
    moe_pos_.resize(S);
    moe_w_.resize(S);
    moe_offsets_.resize(size_t(c_.n_experts) + 1);
  }
  segments_.reserve(size_t(3 + 2 * c_.n_experts));
  rope_cs_.resize(T * size_t(std::max<int64_t>(2, c_.rope_dims)));
  logits_.resize(T * c_.n_vocab);
  logit_rows_.reserve(T);
  tiles_.reserve(T);
  // The widest group of converted activation rows any linear() call holds.
  const Weights& w = model.weights();
  size_t widest = act_row_bytes({&w.output});
  for (const auto& l : w.layers) {
    widest = std::max({widest, act_row_bytes({&l.wq, &l.wk, &l.wv}), act_row_bytes({&l.wo})});
    if (c_.moe())
      widest = std::max({widest, act_row_bytes({&l.router}),
                         size_t(k) * act_row_bytes({&l.gate_exps.front(), &l.up_exps.front()}),
                         size_t(k) * act_row_bytes({&l.down_exps.front()})});
    else
      widest = std::max({widest, act_row_bytes({&l.w_gate, &l.w_up}), act_row_bytes({&l.w_down})});
  }
  act_q_.resize(T * widest + 256);
  kernels::KvLayerView probe{nullptr, nullptr, DType::F32, 16, c_.n_kv_heads, c_.head_dim};
  kernels::AttentionParams ap{c_.n_heads, 0, 1.f, 0.f};
  // Block size is a KvCache option; size the scratch for blocks of up to 256 tokens.
  probe.block_size = 256;
  // Whole cache lines per thread, so that no two threads' scratch shares one.
  attn_scratch_floats_ = (kernels::attention_scratch_floats(probe, ap) + 15) & ~int64_t(15);
  attn_scratch_.resize(size_t(attn_scratch_floats_) * size_t(pool_.num_threads()));
  pack_weights();
}

void Forward::pack_weights() {
  const Weights& w = model_.weights();
  std::vector<const Matrix*> all = {&w.output};
  for (const auto& l : w.layers) {
    for (const Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo}) all.push_back(m);
    if (c_.moe()) {
      all.push_back(&l.router);
      for (const auto* mats : {&l.gate_exps, &l.up_exps, &l.down_exps})
        for (const Matrix& m : *mats) all.push_back(&m);
    } else {
      for (const Matrix* m : {&l.w_gate, &l.w_up, &l.w_down}) all.push_back(m);
    }
  }
  // Every packed matrix in one mapping with huge pages: decode streams all of them every token.
  size_t total = 0;
  std::unordered_set<const void*> seen;
  for (const Matrix* m : all)
    if (seen.insert(m->data).second) total += kernels::pack_matrix_bytes(m->type, m->n_in, m->n_out);
  packed_memory_ = HugeBuffer(total);
  uint8_t* next = packed_memory_.data();
  for (const Matrix* m : all) {
    if (packed_.count(m->data)) continue;
    kernels::PackedMatrix pm = next ? kernels::pack_matrix_in(m->type, m->n_in, m->n_out, next)
                                    : kernels::pack_matrix_alloc(m->type, m->n_in, m->n_out);
    if (pm.empty()) continue;
    if (next) next += kernels::pack_matrix_bytes(m->type, m->n_in, m->n_out);
    pool_.parallel_for((m->n_out + 7) / 8, 1, [&](int64_t b, int64_t e, int) { kernels::pack_panels(pm, m->data, b, e); });
    packed_.emplace(m->data, std::move(pm));
  }
}

const kernels::PackedMatrix* Forward::packed_for(const Matrix& w) const {
  const auto it = packed_.find(w.data);
  return it == packed_.end() ? nullptr : &it->second;
}

Status Forward::validate(const Batch& b, const KvCache& kv) const {
  const int64_t slots = lora_slots_ ? int64_t(lora_slots_->size()) : 0;
  if (auto s = validate_batch(b, {.max_tokens = max_tokens_, .n_vocab = c_.n_vocab, .block_size = kv.block_size(),
                                  .num_blocks = kv.num_blocks(), .num_adapter_slots = slots});
      !s)
    return s;
  for (int32_t a : b.seq_adapter)
    if (a >= 0 && !(*lora_slots_)[size_t(a)])
      return Error{"batch names LoRA slot " + std::to_string(a) + ", which holds no adapter", ErrorCode::invalid_argument};
  return {};
}

void Forward::build_lora_groups(const Batch& b) {
  lora_groups_.clear();
  if (b.seq_adapter.empty()) return;
  for (int64_t t = 0; t < b.size(); ++t) {
    const int32_t slot = b.adapter_of(b.seq_index[size_t(t)]);
    if (slot < 0) continue;
    const LoraAdapter* a = (*lora_slots_)[size_t(slot)].get();
    auto g = std::find_if(lora_groups_.begin(), lora_groups_.end(), [&](const LoraGroup& x) { return x.adapter == a; });
    if (g == lora_groups_.end()) g = lora_groups_.insert(lora_groups_.end(), LoraGroup{a, {}});
    g->rows.push_back(int32_t(t));
  }
}

// Down (A x) before the pass, inline or in parallel over rows; the up-projection (B u) is added by
// run_segments to the columns each chunk computes, so an adapter costs no extra pass over threads.
void Forward::prepare_lora(std::initializer_list<LinearJob> jobs, const float* x, std::span<const LoraGroup> groups) {
  lora_units_.clear();
  size_t floats = 0, seg = 0;
  int64_t macs = 0;
  for (const LinearJob& job : jobs) {
    for (const LoraGroup& g : groups)
      if (const LoraFactors* f = g.adapter->find(job.w->data)) {
        lora_units_.push_back({f, &g, seg, floats});
        floats += g.rows.size() * size_t(f->rank);
        macs += int64_t(g.rows.size()) * f->rank * f->n_in;
      }
    ++seg;
  }
  if (lora_units_.empty()) return;
  if (lora_u_.size() < floats) lora_u_.resize(floats);
  const int64_t n_in = jobs.begin()->w->n_in;
  // One item per (unit, row); inline when too small to pay for the threads' sync (decode).
  std::vector<int64_t>& row_start = lora_row_start_;
  row_start.assign(lora_units_.size() + 1, 0);
  for (size_t i = 0; i < lora_units_.size(); ++i) row_start[i + 1] = row_start[i] + int64_t(lora_units_[i].g->rows.size());
  auto down = [&](int64_t begin, int64_t end, int) {
    for (size_t i = 0; i < lora_units_.size() && begin < end; ++i) {
      const int64_t lo = std::max(begin, row_start[i]), hi = std::min(end, row_start[i + 1]);
      if (lo >= hi) continue;
      const LoraUnit& u = lora_units_[i];
      const int64_t r0 = lo - row_start[i];
      kernels::lora_down(x, n_in, u.g->rows.data() + r0, hi - lo, u.f->a.data(), u.f->rank, n_in,
                         lora_u_.data() + u.u + size_t(r0 * u.f->rank));
    }
  };
  if (macs < (1 << 20)) down(0, row_start.back(), 0);
  else pool_.parallel_for(row_start.back(), 1, down);
}

void Forward::for_rows(int64_t T, const std::function<void(int64_t, int64_t)>& fn) {
  if (T < kParallelRows) return fn(0, T);
  pool_.parallel_for(T, 1, [&](int64_t b, int64_t e, int) { fn(b, e); }, 2);
}

const uint8_t* Forward::ActRegions::for_matrix(const Matrix& w, int64_t row) const {
  const DType t = act_type_of(w);
  for (int i = 0; i < n; ++i)
    if (type[size_t(i)] == t) return base[size_t(i)] + size_t(row) * row_bytes[size_t(i)];
  return nullptr;
}

Forward::ActRegions Forward::convert(std::span<const Matrix* const> readers, const float* x, int64_t T) {
  ActTypes types;
  for (const Matrix* w : readers) types.index_of(act_type_of(*w));
  const int64_t n_in = readers.front()->n_in;
  ActRegions a;
  a.n = types.n;
  uint8_t* next = act_q_.data();
  for (int i = 0; i < types.n; ++i) {
    a.type[size_t(i)] = types.type[size_t(i)];
    a.row_bytes[size_t(i)] = row_bytes(a.type[size_t(i)], n_in);
    a.base[size_t(i)] = next;
    next += (size_t(T) * a.row_bytes[size_t(i)] + 63) & ~size_t(63);
  }
  for_rows(T, [&](int64_t b, int64_t e) {
    for (int i = 0; i < a.n; ++i)
      kernels::quantize_activations(a.type[size_t(i)], x + b * n_in, e - b, n_in,
                                    a.base[size_t(i)] + size_t(b) * a.row_bytes[size_t(i)]);
  });
  return a;
}

// At least kLinearChunkMinBytes a chunk: every chunk starts its own stream from DRAM,
// unprefetched, and on narrow models 16 chunks a thread were 10-30 KiB each. The matmuls of the
// 134M and Gemma 3 270M shapes streamed 1.06-1.19x faster with chunks of 256 KiB or more (128:
// 1.04-1.16x, 512: as 256; gemv_stream_bench, docs/PERFORMANCE.md, session 23); the 1.1B
// shape's were level.
int linear_chunks_per_thread(int64_t weight_bytes, int threads, int64_t min_chunk_bytes) {
  return int(std::clamp<int64_t>(weight_bytes / (min_chunk_bytes * std::max(threads, 1)), 1, kLinearChunksPerThread));
}

void Forward::run_segments(const std::vector<Segment>& segs, std::span<const LoraUnit> lora) {
  // Each y element is one full dot product whatever the split (kernels/quant/gemm.h), so results
  // do not depend on the thread count, the batch composition or which matrices share the pass.
  int64_t total = 0, bytes = 0;
  for (const Segment& s : segs) total += s.w->n_out, bytes += int64_t(row_bytes(s.w->type, s.w->n_in)) * s.w->n_out;
  const int chunks = segs.front().rows >= kBatchedRows ? kLinearChunksPerThreadBatched
                                                       : linear_chunks_per_thread(bytes, pool_.num_threads());
  pool_.parallel_for(total, 16, [&](int64_t b, int64_t e, int) {
    int64_t offset = 0;
    for (const Segment& s : segs) {
      const Matrix& w = *s.w;
      const int64_t lo = std::max(b, offset), hi = std::min(e, offset + w.n_out);
      if (lo < hi && s.packed)
        kernels::matmul_rows_packed(*s.packed, lo - offset, hi - offset, s.act, s.rows, s.y, w.n_out);
      else if (lo < hi)
        kernels::matmul_rows(w.type, w.data, w.n_in, lo - offset, hi - offset, s.act, s.rows, s.y, w.n_out);
      if (lo < hi)
        for (const LoraUnit& u : lora)
          if (u.seg == size_t(&s - segs.data()))
            kernels::lora_up(lora_u_.data() + u.u, u.g->rows.data(), int64_t(u.g->rows.size()), u.f->bt.data(),
                             u.f->rank, w.n_out, u.f->scale, s.y, w.n_out, lo - offset, hi - offset);
      offset += w.n_out;
      if (offset >= e) break;
    }
  }, chunks);
}

void Forward::linear(std::initializer_list<LinearJob> jobs, const float* x, int64_t T) {
  linear(jobs, x, T, lora_groups_);
}

void Forward::linear(std::initializer_list<LinearJob> jobs, const float* x, int64_t T, std::span<const LoraGroup> groups) {
  std::array<const Matrix*, 3> readers{};
  size_t n = 0;
  for (const LinearJob& job : jobs) readers[n++] = job.w;
  if (hook_) hook_({readers.data(), n}, x, T);
  const ActRegions a = convert({readers.data(), n}, x, T);
  segments_.clear();
  for (const LinearJob& job : jobs) {
    const kernels::PackedMatrix* pm = packed_for(*job.w);
    segments_.push_back({job.w, pm && kernels::packed_pays(*pm, T) ? pm : nullptr, a.for_matrix(*job.w, 0), T, job.y});
  }
  lora_units_.clear();
  if (!groups.empty()) prepare_lora(jobs, x, groups);
  run_segments(segments_, lora_units_);
}

void Forward::expert_linear(std::initializer_list<std::pair<const std::vector<Matrix>*, float*>> jobs, const float* x) {
  const int64_t E = c_.n_experts;
  const int64_t* off = moe_offsets_.data();
  std::array<const Matrix*, 3> readers{};
  size_t n = 0;
  for (const auto& job : jobs) readers[n++] = &job.first->front();
  if (hook_) {
    for (int64_t e = 0; e < E; ++e) {
      if (off[e + 1] == off[e]) continue;
      std::array<const Matrix*, 3> experts{};
      for (size_t j = 0; j < n; ++j) experts[j] = &(*(jobs.begin() + ptrdiff_t(j))->first)[size_t(e)];
      hook_({experts.data(), n}, x + off[e] * readers[0]->n_in, off[e + 1] - off[e]);
    }
  }
  const ActRegions a = convert({readers.data(), n}, x, off[E]);
  segments_.clear();
  for (const auto& [mats, y] : jobs) {
    for (int64_t e = 0; e < E; ++e) {
      const int64_t rows = off[e + 1] - off[e];
      if (rows == 0) continue;  // decode reads only the experts some row chose
      const Matrix& w = (*mats)[size_t(e)];
      const kernels::PackedMatrix* pm = packed_for(w);
      segments_.push_back({&w, pm && kernels::packed_pays(*pm, rows) ? pm : nullptr, a.for_matrix(w, off[e]), rows,
                           y + off[e] * w.n_out});
    }
  }
  run_segments(segments_);
}

void Forward::norm_rows(const float* x, const Vector& weight, int64_t T, int64_t n, float* out) {
  for_rows(T, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) kernels::rms_norm(x + t * n, weight.data(), n, c_.norm_eps, out + t * n);
  });
}

void Forward::embed(const Batch& b) {
  const Matrix& e = model_.weights().token_embd;
  const auto* tr = kernels::quant_traits(e.type);
  const size_t rb = row_bytes(e.type, e.n_in);
  for_rows(b.size(), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* row = x_.data() + t * c_.n_embd;
      tr->dequantize_row(static_cast<const uint8_t*>(e.data) + size_t(b.tokens[t]) * rb, row, c_.n_embd);
      if (c_.embed_scale != 1.f) kernels::scale_inplace(row, c_.n_embd, c_.embed_scale);
    }
  });
}

void Forward::build_tiles(const Batch& b) {
  tiles_.clear();
  for (int64_t t = 0; t < b.size(); ++t) {
    if (!tiles_.empty()) {
      AttnTile& last = tiles_.back();
      const int64_t prev = last.row + last.n_rows - 1;
      if (prev == t - 1 && b.seq_index[t] == b.seq_index[prev] && b.positions[t] == b.positions[prev] + 1 &&
          last.n_rows < kernels::kAttentionTileRows) {
        ++last.n_rows;
        continue;
      }
    }
    tiles_.push_back({t, 1});
  }
  // Fewer (tile, run of KV heads) units than threads while a tile holds several rows (a decode
  // step verifying drafts, on a model with one KV head): halve the largest tile until each thread
  // has one. A row's attention is bitwise the same in any tile (TileRowsEqualSingleRowsBitwise),
  // and the rows then run side by side instead of on one thread while the others wait.
  const int64_t threads = pool_.num_threads(), run = std::max<int64_t>(1, c_.n_kv_heads / std::max<int64_t>(1, threads));
  const int64_t runs = (c_.n_kv_heads + run - 1) / run;
  while (int64_t(tiles_.size()) * runs < threads) {
    auto widest = std::max_element(tiles_.begin(), tiles_.end(),
                                   [](const AttnTile& a, const AttnTile& b) { return a.n_rows < b.n_rows; });
    if (widest == tiles_.end() || widest->n_rows < 2) break;
    const AttnTile second{widest->row + widest->n_rows / 2, widest->n_rows - widest->n_rows / 2};
    widest->n_rows /= 2;
    tiles_.insert(widest + 1, second);
  }
}

void Forward::attend_tiles(const Batch& b, const kernels::KvLayerView& view, const kernels::AttentionParams& ap) {
  // Work units are (tile, run of KV heads): disjoint outputs, each computed the same way wherever
  // it runs. Runs of several heads read each KV row once; enough runs to keep every thread busy
  // on a single sequence.
  const int64_t run = std::max<int64_t>(1, c_.n_kv_heads / std::max(1, pool_.num_threads()));
  const int64_t runs = (c_.n_kv_heads + run - 1) / run;
  const int64_t units = int64_t(tiles_.size()) * runs;
  auto heads = [&](int64_t r) { return std::pair{r * run, std::min(c_.n_kv_heads, r * run + run)}; };
  auto table = [&](const AttnTile& tile) { return b.blocks_of(b.seq_index[tile.row]).data(); };
  auto scratch_of = [&](int thread) { return attn_scratch_.data() + size_t(thread) * size_t(attn_scratch_floats_); };
  // Too few units for the threads: split long tiles by key span (the kernel's arithmetic is
  // fixed per span, so the bits are attention_rows' either way).
  int64_t n_spans = 0;
  for (const AttnTile& tile : tiles_) n_spans += kernels::attention_spans(b.positions[tile.row], tile.n_rows, ap.window).count();
  if (units >= 2 * pool_.num_threads() || n_spans == int64_t(tiles_.size())) {
    pool_.parallel_for(units, 1, [&](int64_t begin, int64_t end, int thread) {
      for (int64_t u = begin; u < end; ++u) {
        const AttnTile& tile = tiles_[size_t(u / runs)];
        const auto [g0, g1] = heads(u % runs);
        kernels::attention_rows(q_.data() + tile.row * c_.q_dim(), tile.n_rows, c_.q_dim(), view, table(tile),
                                b.positions[tile.row], ap, g0, g1, att_.data() + tile.row * c_.q_dim(), scratch_of(thread));
      }
    }, 16);
    return;
  }
  // One partial per (tile, span), sized for a full tile, in tile then span order.
  const int64_t part_floats = kernels::attention_partial_floats(kernels::kAttentionTileRows, c_.n_heads, c_.head_dim);
  if (attn_partials_.size() < size_t(n_spans * part_floats)) attn_partials_.resize(size_t(n_spans * part_floats));
  span_units_.clear();
  span_begin_.clear();
  span_parts_.clear();
  for (size_t i = 0; i < tiles_.size(); ++i) {
    const kernels::SpanRange spans = kernels::attention_spans(b.positions[tiles_[i].row], tiles_[i].n_rows, ap.window);
    span_begin_.push_back(int64_t(span_units_.size()));
    for (int64_t j = spans.first; j <= spans.last; ++j) {
      float* base = attn_partials_.data() + int64_t(span_units_.size()) * part_floats;
      span_units_.push_back({int64_t(i), j});
      span_parts_.push_back(kernels::attention_partial_at(base, tiles_[i].n_rows, c_.n_heads, c_.head_dim));
    }
  }
  span_begin_.push_back(int64_t(span_units_.size()));
  pool_.parallel_for(int64_t(span_units_.size()) * runs, 1, [&](int64_t begin, int64_t end, int thread) {
    for (int64_t u = begin; u < end; ++u) {
      const size_t i = size_t(u / runs);
      const SpanUnit& su = span_units_[i];
      const AttnTile& tile = tiles_[size_t(su.tile)];
      const auto [g0, g1] = heads(u % runs);
      kernels::attention_span(q_.data() + tile.row * c_.q_dim(), tile.n_rows, c_.q_dim(), view, table(tile),
                              b.positions[tile.row], ap, g0, g1, su.span, span_parts_[i], scratch_of(thread));
    }
  }, 16);
  pool_.parallel_for(units, 1, [&](int64_t begin, int64_t end, int) {
    for (int64_t u = begin; u < end; ++u) {
      const size_t ti = size_t(u / runs);
      const AttnTile& tile = tiles_[ti];
      const auto [g0, g1] = heads(u % runs);
      kernels::attention_merge(span_parts_.data() + span_begin_[ti], span_begin_[ti + 1] - span_begin_[ti], tile.n_rows,
                               c_.q_dim(), view, ap, g0, g1, att_.data() + tile.row * c_.q_dim());
    }
  });
}

kernels::RopeParams Forward::rope_params(int64_t il) const {
  const bool swa = c_.layer_is_swa[size_t(il)];
  return {c_.rope_mode, c_.rope_dims, swa ? c_.rope_base_swa : c_.rope_base, c_.rope_freq_scale,
          model_.weights().rope_freqs.empty() ? nullptr : model_.weights().rope_freqs.data(), c_.rope_mscale};
}

void Forward::attention_block(int64_t il, const Batch& b, KvCache& kv) {
  const LayerWeights& l = model_.weights().layers[size_t(il)];
  const int64_t T = b.size(), hd = c_.head_dim;
  norm_rows(x_.data(), l.attn_norm, T, c_.n_embd, xn_.data());
  linear({{&l.wq, q_.data()}, {&l.wk, k_.data()}, {&l.wv, v_.data()}}, xn_.data(), T);

  const bool swa = c_.layer_is_swa[size_t(il)];
  const kernels::RopeParams rope = rope_params(il);
  const kernels::KvLayerView view = kv.layer(il);
  const int64_t half = c_.rope_dims / 2;
  for_rows(T, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* q = q_.data() + t * c_.q_dim();
      float* k = k_.data() + t * c_.kv_dim();
      float* v = v_.data() + t * c_.kv_dim();
      if (c_.qkv_bias) {
        kernels::add_inplace(q, l.bq.data(), c_.q_dim());
        kernels::add_inplace(k, l.bk.data(), c_.kv_dim());
        kernels::add_inplace(v, l.bv.data(), c_.kv_dim());
      }
      if (c_.qk_norm) {
        for (int64_t h = 0; h < c_.n_heads; ++h) kernels::rms_norm(q + h * hd, l.q_norm.data(), hd, c_.norm_eps, q + h * hd);
        for (int64_t h = 0; h < c_.n_kv_heads; ++h) kernels::rms_norm(k + h * hd, l.k_norm.data(), hd, c_.norm_eps, k + h * hd);
      }
      // One set of angles per row serves its Q and K heads.
      float* cs = rope_cs_.data() + t * 2 * half;
      kernels::rope_angles(b.positions[t], rope, cs, cs + half);
      kernels::rope_apply(q, c_.n_heads, hd, rope, cs, cs + half);
      kernels::rope_apply(k, c_.n_kv_heads, hd, rope, cs, cs + half);
      kernels::kv_store(view, b.blocks_of(b.seq_index[t]).data(), b.positions[t], k, v);
    }
  });
  if (attention_hook_) attention_hook_(il, q_.data(), k_.data(), v_.data(), b.positions.data(), T);
  // Every row's K/V is stored before any row attends, so a prefill chunk sees itself causally.
  attend_tiles(b, view, {c_.n_heads, swa ? c_.sliding_window : 0, c_.attn_scale, c_.attn_softcap});
  linear({{&l.wo, proj_.data()}}, att_.data(), T);
  if (c_.post_norms) norm_rows(proj_.data(), l.post_attn_norm, T, c_.n_embd, proj_.data());
  for_rows(T, [&](int64_t begin, int64_t end) {
    kernels::add_inplace(x_.data() + begin * c_.n_embd, proj_.data() + begin * c_.n_embd, (end - begin) * c_.n_embd);
  });
}

void Forward::ffn_block(int64_t il, int64_t T) {
  const LayerWeights& l = model_.weights().layers[size_t(il)];
  norm_rows(x_.data(), l.ffn_norm, T, c_.n_embd, xn_.data());
  linear({{&l.w_gate, gate_.data()}, {&l.w_up, up_.data()}}, xn_.data(), T);
  for_rows(T, [&](int64_t b, int64_t e) {
    float* g = gate_.data() + b * c_.n_ff;
    const float* u = up_.data() + b * c_.n_ff;
    if (c_.ffn_act == FfnAct::Silu) kernels::silu_mul(g, u, (e - b) * c_.n_ff, g);
    else kernels::gelu_tanh_mul(g, u, (e - b) * c_.n_ff, g);
  });
  linear({{&l.w_down, proj_.data()}}, gate_.data(), T);
  if (c_.post_norms) norm_rows(proj_.data(), l.post_ffn_norm, T, c_.n_embd, proj_.data());
  for_rows(T, [&](int64_t b, int64_t e) {
    kernels::add_inplace(x_.data() + b * c_.n_embd, proj_.data() + b * c_.n_embd, (e - b) * c_.n_embd);
  });
}

void Forward::moe_block(int64_t il, int64_t T) {
  const LayerWeights& l = model_.weights().layers[size_t(il)];
  const int64_t E = c_.n_experts, k = c_.n_experts_used, S = T * k, d = c_.n_embd, ff = c_.n_ff_exp;
  norm_rows(x_.data(), l.ffn_norm, T, d, xn_.data());
  linear({{&l.router, router_.data()}}, xn_.data(), T);
  for_rows(T, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* logits = router_.data() + t * E;  // becomes its own scratch (the probabilities)
      kernels::moe_route(logits, E, k, true, moe_ids_.data() + t * k, moe_w_.data() + t * k, logits);
    }
  });
  kernels::moe_group(moe_ids_.data(), S, E, moe_offsets_.data(), moe_order_.data(), moe_pos_.data());
  for_rows(S, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p)
      std::copy_n(xn_.data() + (moe_order_[size_t(p)] / k) * d, d, xg_.data() + p * d);
  });
  expert_linear({{&l.gate_exps, gate_.data()}, {&l.up_exps, up_.data()}}, xg_.data());
  for_rows(S, [&](int64_t b, int64_t e) {
    kernels::silu_mul(gate_.data() + b * ff, up_.data() + b * ff, (e - b) * ff, gate_.data() + b * ff);
  });
  expert_linear({{&l.down_exps, exp_out_.data()}}, gate_.data());
  // Each row's experts summed in rank order, whatever the grouping: a row's result does not
  // depend on the rows that share its experts.
  for_rows(T, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* out = proj_.data() + t * d;
      for (int64_t r = 0; r < k; ++r) {
        const float w = moe_w_[size_t(t * k + r)];
        const float* y = exp_out_.data() + int64_t(moe_pos_[size_t(t * k + r)]) * d;
        if (r == 0)
          for (int64_t i = 0; i < d; ++i) out[i] = w * y[i];
        else
          for (int64_t i = 0; i < d; ++i) out[i] += w * y[i];
      }
    }
  });
  for_rows(T, [&](int64_t b, int64_t e) {
    kernels::add_inplace(x_.data() + b * d, proj_.data() + b * d, (e - b) * d);
  });
}

void Forward::output_logits(const Batch& b, const Matrix& head) {
  if (!b.want_hidden.empty()) {  // embeddings: the normed rows themselves
    std::vector<int64_t> rows;
    for (int64_t t = 0; t < b.size(); ++t)
      if (b.want_hidden[size_t(t)]) rows.push_back(t);
    if (hidden_.size() < size_t(max_tokens_ * c_.n_embd)) hidden_.resize(size_t(max_tokens_ * c_.n_embd));
    for_rows(int64_t(rows.size()), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        kernels::rms_norm(x_.data() + rows[size_t(i)] * c_.n_embd, model_.weights().output_norm.data(), c_.n_embd,
                          c_.norm_eps, hidden_.data() + i * c_.n_embd);
    });
  }
  // Gather the rows that want logits, norm them, and project only those.
  logit_rows_.clear();
  for (int64_t t = 0; t < b.size(); ++t)
    if (b.want_logits[t]) logit_rows_.push_back(t);
  const int64_t n = int64_t(logit_rows_.size());
  if (n == 0) return;
  for_rows(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      kernels::rms_norm(x_.data() + logit_rows_[size_t(i)] * c_.n_embd, model_.weights().output_norm.data(), c_.n_embd,
                        c_.norm_eps, xn_.data() + i * c_.n_embd);
  });
  lora_head_groups_.clear();
  for (const LoraGroup& g : lora_groups_) {  // the same adapters over the gathered rows
    LoraGroup h{g.adapter, {}};
    for (int32_t t : g.rows)
      if (b.want_logits[size_t(t)]) h.rows.push_back(int32_t(std::lower_bound(logit_rows_.begin(), logit_rows_.end(), t) - logit_rows_.begin()));
    if (!h.rows.empty()) lora_head_groups_.push_back(std::move(h));
  }
  linear({{&head, logits_.data()}}, xn_.data(), n, lora_head_groups_);
  if (c_.final_logit_softcap > 0) {
    pool_.parallel_for(n * head.n_out, 4096, [&](int64_t begin, int64_t end, int) {
      kernels::softcap_inplace(logits_.data() + begin, end - begin, c_.final_logit_softcap);
    });
  }
}

void Forward::run_layers(const Batch& batch, KvCache& kv, int64_t begin, int64_t end) {
  for (int64_t il = begin; il < end; ++il) {
    attention_block(il, batch, kv);
    if (c_.moe()) moe_block(il, batch.size());
    else ffn_block(il, batch.size());
  }
}

Result<const float*> Forward::forward(const Batch& batch, KvCache& kv) { return forward(batch, kv, ForwardPlan{}); }

Result<const float*> Forward::forward(const Batch& batch, KvCache& kv, const ForwardPlan& plan) {
  if (auto s = validate(batch, kv); !s) return Error{s.error()};
  for (size_t i = 0; i < plan.layers.size(); ++i)
    if (plan.layers[i] < 0 || plan.layers[i] >= c_.n_layers || (i > 0 && plan.layers[i] <= plan.layers[i - 1]))
      return Error{"a forward plan's layers must be ascending indices below " + std::to_string(c_.n_layers),
                   ErrorCode::invalid_argument};
  const Matrix& head = plan.head ? *plan.head : model_.weights().output;
  if (head.n_in != c_.n_embd || head.n_out < 1 || head.n_out > c_.n_vocab)
    return Error{"a forward plan's head must map n_embd to at most n_vocab rows", ErrorCode::invalid_argument};
  build_tiles(batch);
  build_lora_groups(batch);
  embed(batch);
  if (plan.layers.empty()) run_layers(batch, kv, 0, c_.n_layers);
  for (int32_t il : plan.layers) run_layers(batch, kv, il, il + 1);
  output_logits(batch, head);
  return static_cast<const float*>(logits_.data());
}

Status Forward::forward_layers(const Batch& batch, KvCache& kv, int64_t begin, int64_t end, float* residual) {
  if (auto s = validate(batch, kv); !s) return s;
  if (begin < 0 || begin >= end || end > c_.n_layers)
    return Error{"layer range [" + std::to_string(begin) + ", " + std::to_string(end) + ") outside the model's " +
                     std::to_string(c_.n_layers) + " layers",
                 ErrorCode::invalid_argument};
  const size_t floats = size_t(batch.size() * c_.n_embd);
  build_tiles(batch);
  build_lora_groups(batch);
  if (begin == 0) embed(batch);
  else std::copy_n(residual, floats, x_.data());
  run_layers(batch, kv, begin, end);
  std::copy_n(x_.data(), floats, residual);
  return {};
}

}  // namespace kvasir
