#include "compress/prune_file.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <set>

#include "core/thread_pool.h"
#include "format/gguf.h"
#include "format/mapped_file.h"
#include "kernels/quant/quant.h"
#include "model/config.h"

namespace kvasir::compress {

int64_t layer_of_tensor(const std::string& name) {
  if (!name.starts_with("blk.")) return -1;
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos || dot == 4) return -1;
  int64_t v = 0;
  for (size_t i = 4; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

namespace {

bool prunable(const gguf::TensorInfo& t) {
  return layer_of_tensor(t.name) >= 0 && t.n_dims >= 2 && t.name.ends_with(".weight") &&
         t.name.find("norm") == std::string::npos && t.name.find("ffn_gate_inp") == std::string::npos;
}

// One tensor of the output: its source, and the FFN channels it keeps when channels are removed
// (rows of gate/up, columns of down; null: all).
struct Out {
  const gguf::TensorInfo* t;
  std::string name;
  int64_t layer;  // output layer, -1 outside the blocks
  bool prune;     // sparsified
  const std::vector<int32_t>* keep_rows = nullptr;
  const std::vector<int32_t>* keep_cols = nullptr;
  int64_t n_in() const { return keep_cols ? int64_t(keep_cols->size()) : t->ne[0]; }
  int64_t n_rows() const { return keep_rows ? int64_t(keep_rows->size()) : t->num_rows(); }
  std::vector<int64_t> shape() const {
    std::vector<int64_t> s(t->ne, t->ne + t->n_dims);
    s[0] = n_in();
    if (keep_rows) s[1] = int64_t(keep_rows->size());
    return s;
  }
};

// A tensor's kept rows and columns in F32.
Result<std::vector<float>> to_f32(const Out& x, ThreadPool& pool) {
  const gguf::TensorInfo& t = *x.t;
  const auto* tr = kernels::quant_traits(t.type);
  if (!tr) return Error{"tensor '" + t.name + "': cannot read type " + std::string(dtype_name(t.type))};
  const int64_t n = t.ne[0], m = x.n_in(), rows = x.n_rows();
  const size_t rb = row_bytes(t.type, n);
  std::vector<float> w(size_t(m * rows));
  pool.parallel_for(rows, 16, [&](int64_t b, int64_t e, int) {
    std::vector<float> full(x.keep_cols ? static_cast<size_t>(n) : 0);
    for (int64_t r = b; r < e; ++r) {
      const int64_t src = x.keep_rows ? (*x.keep_rows)[size_t(r)] : r;
      if (!x.keep_cols) {
        tr->dequantize_row(t.data + size_t(src) * rb, w.data() + r * n, n);
        continue;
      }
      tr->dequantize_row(t.data + size_t(src) * rb, full.data(), n);
      for (int64_t j = 0; j < m; ++j) w[size_t(r * m + j)] = full[size_t((*x.keep_cols)[size_t(j)])];
    }
  });
  return w;
}

// Scores of a whole tensor: per matrix of a 3-D tensor, that matrix's column norms.
Result<std::vector<float>> scores_of(const Out& x, std::span<const float> w, const PruneOptions& o) {
  const gguf::TensorInfo& t = *x.t;
  std::vector<float> s(w.size());
  const int64_t n = x.n_in(), rows_per_mat = x.keep_rows ? x.n_rows() : t.ne[1], n_mat = x.n_rows() / rows_per_mat;
  const calib::ImatrixEntry* entry = nullptr;
  if (o.unstructured->method == PruneMethod::wanda) {
    if (!o.imatrix) return Error{"Wanda needs an importance matrix (--imatrix FILE or -f TEXT)", ErrorCode::invalid_argument};
    auto it = o.imatrix->entries.find(t.name);
    if (it == o.imatrix->entries.end())
      return Error{"the importance matrix has no entry for '" + t.name + "'", ErrorCode::invalid_argument};
    entry = &it->second;
    if (entry->n_in() != t.ne[0] || int64_t(entry->counts.size()) != n_mat)
      return Error{"the importance matrix's entry for '" + t.name + "' does not match its shape", ErrorCode::invalid_argument};
  }
  std::vector<float> col(entry ? size_t(n) : 0);
  for (int64_t mat = 0; mat < n_mat; ++mat) {
    if (entry)
      for (int64_t j = 0; j < n; ++j) col[size_t(j)] = entry->mean(mat, x.keep_cols ? (*x.keep_cols)[size_t(j)] : j);
    const size_t off = size_t(mat * rows_per_mat * n), len = size_t(rows_per_mat * n);
    weight_scores(w.subspan(off, len), n, col, std::span<float>(s).subspan(off, len));
  }
  return s;
}

// E[x_j²] · ||W[:, j]||² per input column j of a layer's matrix: what removing that input (an FFN
// channel, a head's channel) takes out of the matrix's output, the activation statistics from the
// importance matrix's entry for it. `what` names the cut in errors.
Result<std::vector<double>> column_energy(const gguf::File& in, const std::string& name, int64_t layer,
                                          const calib::Imatrix* im, ThreadPool& pool, const std::string& what) {
  const gguf::TensorInfo* t = in.tensor(name);
  if (!t || t->n_dims != 2) return Error{what + " needs '" + name + "'"};
  if (!im) return Error{what + " needs activation statistics (-f TEXT or --imatrix FILE)", ErrorCode::invalid_argument};
  auto it = im->entries.find(name);
  if (it == im->entries.end() || it->second.n_in() != t->ne[0])
    return Error{"the importance matrix has no entry of the right shape for '" + name + "'", ErrorCode::invalid_argument};
  auto w = to_f32(Out{t, name, layer, false}, pool);
  if (!w) return Error{w.error()};
  const int64_t n = t->ne[0];
  std::vector<double> energy(static_cast<size_t>(n), 0.0);
  for (int64_t o = 0; o < t->ne[1]; ++o)
    for (int64_t j = 0; j < n; ++j) energy[size_t(j)] += double((*w)[size_t(o * n + j)]) * (*w)[size_t(o * n + j)];
  for (int64_t j = 0; j < n; ++j) energy[size_t(j)] *= std::max(0.0, double(it->second.mean(0, j)));
  return energy;
}

// The `keep` ids of `ids` with the highest scores (ties: the lower id), ascending.
std::vector<int32_t> highest(std::vector<int32_t> ids, const std::vector<double>& score, int64_t keep) {
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return score[size_t(a)] > score[size_t(b)]; });
  ids.resize(size_t(keep));
  std::sort(ids.begin(), ids.end());
  return ids;
}

// The FFN channels each layer keeps: the `keep` highest of E[h_c²] · ||W_down[:, c]||².
Result<std::vector<int32_t>> ffn_channels_kept(const gguf::File& in, int64_t layer, int64_t keep, const calib::Imatrix* im,
                                               ThreadPool& pool) {
  auto energy = column_energy(in, "blk." + std::to_string(layer) + ".ffn_down.weight", layer, im, pool,
                              "removing FFN channels (a dense FFN)");
  if (!energy) return Error{energy.error(), energy.error_code()};
  std::vector<int32_t> all(energy->size());
  std::iota(all.begin(), all.end(), 0);
  return highest(std::move(all), *energy, keep);
}

// The query heads a layer keeps: in each KV group the `keep` highest of the sum over the head's
// channels j of E[o_j²] · ||W_o[:, j]||², o the attention output that attn_output reads.
Result<std::vector<int32_t>> heads_kept(const gguf::File& in, int64_t layer, const ModelConfig& c, int64_t keep,
                                        const calib::Imatrix* im, ThreadPool& pool) {
  auto energy = column_energy(in, "blk." + std::to_string(layer) + ".attn_output.weight", layer, im, pool, "removing heads");
  if (!energy) return Error{energy.error(), energy.error_code()};
  const int64_t D = c.head_dim, group = c.n_heads / c.n_kv_heads;
  if (int64_t(energy->size()) != c.n_heads * D) return Error{"removing heads: attn_output's width is not heads x head width"};
  std::vector<double> score(static_cast<size_t>(c.n_heads), 0.0);
  for (size_t j = 0; j < energy->size(); ++j) score[j / size_t(D)] += (*energy)[j];
  std::vector<int32_t> kept;
  for (int64_t g = 0; g < c.n_kv_heads; ++g) {
    std::vector<int32_t> heads(static_cast<size_t>(group));
    std::iota(heads.begin(), heads.end(), int32_t(g * group));
    const auto top = highest(std::move(heads), score, keep);
    kept.insert(kept.end(), top.begin(), top.end());
  }
  return kept;
}

// The rows (or columns) of the kept heads' channels.
std::vector<int32_t> head_channels(const std::vector<int32_t>& heads, int64_t D) {
  std::vector<int32_t> out;
  for (int32_t h : heads)
    for (int64_t i = 0; i < D; ++i) out.push_back(int32_t(h * D + i));
  return out;
}

Status check_removal(const std::vector<int64_t>& remove, int64_t n_layers) {
  std::set<int64_t> seen;
  for (int64_t l : remove) {
    if (l < 0 || l >= n_layers)
      return Error{"layer " + std::to_string(l) + " does not exist (the model has " + std::to_string(n_layers) + ")",
                   ErrorCode::invalid_argument};
    if (!seen.insert(l).second) return Error{"layer " + std::to_string(l) + " is named twice", ErrorCode::invalid_argument};
  }
  if (int64_t(seen.size()) >= n_layers) return Error{"removing every layer leaves no model", ErrorCode::invalid_argument};
  return {};
}

}  // namespace

Result<PruneReport> prune_file(const std::string& in_path, const std::string& out_path, const PruneOptions& o) {
  if (in_path == out_path) return Error{"the output must be another file than the input", ErrorCode::invalid_argument};
  auto file = MappedFile::open(in_path);
  if (!file) return Error{file.error()};
  auto parsed = gguf::parse(file->bytes());
  if (!parsed) return Error{in_path + ": " + parsed.error()};
  const gguf::File& in = *parsed;
  auto config = config_from_gguf(in);
  if (!config) return Error{in_path + ": " + config.error()};
  const std::string& arch = config->arch_name;
  const int64_t n_layers = config->n_layers;
  if (auto s = check_removal(o.remove_layers, n_layers); !s) return Error{s.error(), s.error_code()};
  if (const auto& u = o.unstructured) {
    if (u->m > 0 && (u->n < 0 || u->n >= u->m))
      return Error{"an N:M pattern keeps fewer than M of every M (got " + std::to_string(u->n) + ":" + std::to_string(u->m) + ")",
                   ErrorCode::invalid_argument};
    if (u->m == 0 && !(u->sparsity >= 0 && u->sparsity < 1))
      return Error{"the sparsity must be in [0, 1)", ErrorCode::invalid_argument};
  }

  PruneReport report;
  report.layers_in = n_layers;
  report.removed_layers = o.remove_layers;
  std::sort(report.removed_layers.begin(), report.removed_layers.end());
  report.layers_out = n_layers - int64_t(report.removed_layers.size());
  std::vector<int64_t> new_index(size_t(n_layers), -1);
  for (int64_t l = 0, next = 0; l < n_layers; ++l)
    if (!std::binary_search(report.removed_layers.begin(), report.removed_layers.end(), l)) new_index[size_t(l)] = next++;

  ThreadPool pool(o.num_threads > 0 ? o.num_threads : ThreadPool::default_threads());
  // FFN channels: the same number kept in every layer (one feed_forward_length), rounded to whole
  // 256-blocks where the width allows, so the K-quants still fit the rows.
  int64_t n_ff_out = config->n_ff;
  std::vector<std::vector<int32_t>> channels(static_cast<size_t>(n_layers));
  if (o.ffn_keep < 1.0) {
    if (config->n_experts > 0 || !in.tensor("blk.0.ffn_gate.weight"))
      return Error{"removing FFN channels needs separate gate, up and down matrices (not experts or a fused gate|up)",
                   ErrorCode::invalid_argument};
    const int64_t unit = config->n_ff % 256 == 0 ? 256 : config->n_ff % 32 == 0 ? 32 : 1;
    n_ff_out = std::max<int64_t>(unit, std::llround(o.ffn_keep * double(config->n_ff) / double(unit)) * unit);
    if (!(o.ffn_keep > 0) || n_ff_out >= config->n_ff)
      return Error{"--ffn-keep " + std::to_string(o.ffn_keep) + " keeps every one of " + std::to_string(config->n_ff) +
                       " channels (rounded to whole groups of " + std::to_string(unit) + ")",
                   ErrorCode::invalid_argument};
    for (int64_t l = 0; l < n_layers; ++l) {
      if (new_index[size_t(l)] < 0) continue;
      auto kept = ffn_channels_kept(in, l, n_ff_out, o.imatrix, pool);
      if (!kept) return Error{kept.error(), kept.error_code()};
      channels[size_t(l)] = std::move(*kept);
    }
  }
  report.n_ff_in = config->n_ff, report.n_ff_out = n_ff_out;
  // Query heads: the same number kept in every KV group and layer (one head_count).
  int64_t n_head_out = config->n_heads;
  std::vector<std::vector<int32_t>> head_rows(static_cast<size_t>(n_layers));
  if (o.heads_keep > 0) {
    const int64_t group = config->n_kv_heads > 0 ? config->n_heads / config->n_kv_heads : 0;
    if (!in.tensor("blk.0.attn_q.weight") || !in.tensor("blk.0.attn_output.weight"))
      return Error{"removing heads needs separate attn_q and attn_output matrices (not a fused qkv)", ErrorCode::invalid_argument};
    if (o.heads_keep >= group)
      return Error{"--heads-keep " + std::to_string(o.heads_keep) + " keeps every one of the " + std::to_string(group) +
                       " query heads per KV group",
                   ErrorCode::invalid_argument};
    n_head_out = config->n_kv_heads * o.heads_keep;
    for (int64_t l = 0; l < n_layers; ++l) {
      if (new_index[size_t(l)] < 0) continue;
      auto kept = heads_kept(in, l, *config, o.heads_keep, o.imatrix, pool);
      if (!kept) return Error{kept.error(), kept.error_code()};
      head_rows[size_t(l)] = head_channels(*kept, config->head_dim);
    }
  }
  report.n_head_in = config->n_heads, report.n_head_out = n_head_out;

  // Metadata: what counts layers follows the kept ones; the FFN width follows the kept channels.
  gguf::Writer w;
  const std::string prefix = arch + ".";
  for (const auto& kv : in.kv) {
    if (kv.key == "general.alignment") continue;
    gguf::Value v = kv.value;
    if (kv.key == prefix + "feed_forward_length" && n_ff_out != config->n_ff) {
      v.u = uint64_t(n_ff_out), v.i = n_ff_out;
      for (auto& item : v.items) item.u = uint64_t(n_ff_out), item.i = n_ff_out;
    }
    if (kv.key == prefix + "attention.head_count" && n_head_out != config->n_heads) {
      v.u = uint64_t(n_head_out), v.i = n_head_out;
      for (auto& item : v.items) item.u = uint64_t(n_head_out), item.i = n_head_out;
    }
    if (!report.removed_layers.empty() && kv.key.starts_with(prefix)) {
      if (kv.key == prefix + "block_count") {
        v.u = uint64_t(report.layers_out), v.i = report.layers_out;
      } else if (v.type == gguf::ValueType::ARRAY && int64_t(v.items.size()) == n_layers) {
        std::vector<gguf::Value> kept;
        for (int64_t l = 0; l < n_layers; ++l)
          if (new_index[size_t(l)] >= 0) kept.push_back(v.items[size_t(l)]);
        v.items = std::move(kept);
      }
    }
    w.set(kv.key, std::move(v));
  }
  // A head's width no longer follows from n_embd / head_count: written where the file left it implicit.
  if (n_head_out != config->n_heads)
    for (const char* key : {"attention.key_length", "attention.value_length"})
      if (!in.find(prefix + key)) w.set(prefix + key, gguf::Value::of_u32(uint32_t(config->head_dim)));
  const std::string pattern_key = prefix + "attention.sliding_window_pattern";
  if (!report.removed_layers.empty() && config->sliding_window > 0 && !in.find(pattern_key)) {
    std::vector<gguf::Value> pattern;
    for (int64_t l = 0; l < n_layers; ++l)
      if (new_index[size_t(l)] >= 0) pattern.push_back(gguf::Value::of_bool(config->layer_is_swa[size_t(l)]));
    w.set(pattern_key, gguf::Value::of_array(gguf::ValueType::BOOL, std::move(pattern)));
  }
  if (!report.removed_layers.empty()) {
    std::vector<gguf::Value> removed;
    for (int64_t l : report.removed_layers) removed.push_back(gguf::Value::of_u32(uint32_t(l)));
    w.set("kvasir.prune.removed_layers", gguf::Value::of_array(gguf::ValueType::U32, std::move(removed)));
  }

  // Tensors: those of removed layers dropped, the others renumbered, FFN channels cut.
  std::vector<Out> outs;
  for (const auto& t : in.tensors) {
    const int64_t l = layer_of_tensor(t.name);
    if (l >= n_layers) return Error{"tensor '" + t.name + "' names a layer the model does not have"};
    if (l >= 0 && new_index[size_t(l)] < 0) continue;
    std::string name = l < 0 ? t.name : "blk." + std::to_string(new_index[size_t(l)]) + t.name.substr(t.name.find('.', 4));
    Out x{&t, std::move(name), l < 0 ? -1 : new_index[size_t(l)], o.unstructured && prunable(t)};
    if (l >= 0 && !channels[size_t(l)].empty()) {
      if (t.name.ends_with(".ffn_gate.weight") || t.name.ends_with(".ffn_up.weight")) x.keep_rows = &channels[size_t(l)];
      if (t.name.ends_with(".ffn_down.weight")) x.keep_cols = &channels[size_t(l)];
    }
    if (l >= 0 && !head_rows[size_t(l)].empty()) {
      if (t.name.ends_with(".attn_q.weight")) x.keep_rows = &head_rows[size_t(l)];
      if (t.name.ends_with(".attn_q.bias") || t.name.ends_with(".attn_output.weight")) x.keep_cols = &head_rows[size_t(l)];
    }
    if (x.prune || x.keep_cols) {  // through F32 and back into the type
      const char* why = x.prune ? "pruning" : "removing FFN channels or heads";
      if (dtype_info(t.type).block_size > 1 && !o.allow_requantize)
        return Error{"tensor '" + t.name + "' is quantized (" + std::string(dtype_name(t.type)) + "): " + why +
                         " dequantizes and quantizes it again; prune the float model, or pass --allow-requantize",
                     ErrorCode::invalid_argument};
      if (const auto* tr = kernels::quant_traits(t.type); !tr || (t.type != DType::F32 && !tr->quantize_row))
        return Error{"tensor '" + t.name + "': no quantizer for " + std::string(dtype_name(t.type))};
      if (x.n_in() % dtype_info(t.type).block_size != 0)
        return Error{"tensor '" + t.name + "': rows of " + std::to_string(x.n_in()) + " are not whole " +
                         std::string(dtype_name(t.type)) + " blocks",
                     ErrorCode::invalid_argument};
    }
    if (x.prune && o.unstructured->m > 0 && x.n_in() % o.unstructured->m != 0)
      return Error{"tensor '" + t.name + "': rows of " + std::to_string(x.n_in()) + " are not whole groups of " +
                       std::to_string(o.unstructured->m),
                   ErrorCode::invalid_argument};
    w.add_tensor_header(x.name, t.type, x.shape());
    outs.push_back(std::move(x));
  }
  for (const auto& t : in.tensors) report.bytes_in += t.nbytes;

  // Scope layer / global: one threshold per group over every pruned tensor in it, found first.
  std::map<int64_t, Threshold> thresholds;  // by output layer; -2: the whole model
  const bool grouped = o.unstructured && o.unstructured->m == 0 &&
                       (o.unstructured->scope == PruneScope::layer || o.unstructured->scope == PruneScope::global);
  if (grouped) {
    std::map<int64_t, std::vector<float>> scores;
    for (const Out& x : outs) {
      if (!x.prune) continue;
      auto wf = to_f32(x, pool);
      if (!wf) return Error{wf.error()};
      auto s = scores_of(x, *wf, o);
      if (!s) return Error{s.error(), s.error_code()};
      auto& group = scores[o.unstructured->scope == PruneScope::global ? -2 : x.layer];
      group.insert(group.end(), s->begin(), s->end());
    }
    for (auto& [g, s] : scores) {
      const int64_t k = std::llround(o.unstructured->sparsity * double(s.size()));
      thresholds[g] = lowest_k_threshold(std::move(s), k);
    }
  }

  auto data_of = [&](size_t i) -> Result<std::vector<uint8_t>> {
    const Out& x = outs[i];
    const gguf::TensorInfo& t = *x.t;
    if (o.progress) o.progress(i, outs.size(), x.name);
    const int64_t n = x.n_in(), rows = x.n_rows();
    const size_t rb = row_bytes(t.type, n);
    report.bytes_out += rb * size_t(rows);
    if (!x.prune && !x.keep_cols) {  // the bytes as they are (or the kept rows of them)
      if (!x.keep_rows) return std::vector<uint8_t>(t.data, t.data + t.nbytes);
      std::vector<uint8_t> bytes(rb * size_t(rows));
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(bytes.data() + size_t(r) * rb, t.data + size_t((*x.keep_rows)[size_t(r)]) * rb, rb);
      return bytes;
    }
    auto wf = to_f32(x, pool);
    if (!wf) return Error{wf.error()};
    std::vector<float>& wv = *wf;
    if (x.prune) {
      auto s = scores_of(x, wv, o);
      if (!s) return Error{s.error(), s.error_code()};
      const Unstructured& u = *o.unstructured;
      if (u.m > 0) {
        pool.parallel_for(rows, 16, [&](int64_t b, int64_t e, int) {
          const size_t off = size_t(b * n), len = size_t((e - b) * n);
          zero_n_of_m(std::span<float>(wv).subspan(off, len), std::span<const float>(*s).subspan(off, len), u.n, u.m);
        });
      } else if (grouped) {
        zero_below(wv, *s, thresholds[u.scope == PruneScope::global ? -2 : x.layer]);
      } else if (u.scope == PruneScope::matrix) {
        const int64_t per_mat = n * (x.keep_rows ? rows : t.ne[1]);
        for (size_t off = 0; off < wv.size(); off += size_t(per_mat))
          zero_lowest(std::span<float>(wv).subspan(off, size_t(per_mat)), std::span<const float>(*s).subspan(off, size_t(per_mat)),
                      std::llround(u.sparsity * double(per_mat)));
      } else {  // row
        pool.parallel_for(rows, 16, [&](int64_t b, int64_t e, int) {
          const size_t off = size_t(b * n), len = size_t((e - b) * n);
          zero_lowest_per_row(std::span<float>(wv).subspan(off, len), std::span<const float>(*s).subspan(off, len), n, u.sparsity);
        });
      }
    }
    // Back to the tensor's type; the zeros counted as they will be read.
    const auto* tr = kernels::quant_traits(t.type);
    std::vector<uint8_t> bytes(rb * size_t(rows));
    std::vector<int64_t> zeros(size_t(pool.num_threads()), 0);
    pool.parallel_for(rows, 16, [&](int64_t b, int64_t e, int tid) {
      std::vector<float> back(static_cast<size_t>(n));
      for (int64_t r = b; r < e; ++r) {
        uint8_t* y = bytes.data() + size_t(r) * rb;
        if (t.type == DType::F32) std::memcpy(y, wv.data() + r * n, rb);
        else tr->quantize_row(wv.data() + r * n, y, n);
        tr->dequantize_row(y, back.data(), n);
        zeros[size_t(tid)] += count_zeros(back);
      }
    });
    if (x.prune) {
      int64_t z = 0;
      for (int64_t v : zeros) z += v;
      report.tensors.push_back({x.name, x.layer, int64_t(wv.size()), z});
    }
    return bytes;
  };
  if (auto st = w.write_streaming(out_path, data_of); !st) return Error{st.error(), st.error_code()};
  return report;
}

}  // namespace kvasir::compress
